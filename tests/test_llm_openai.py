"""The openai backend against a real HTTP server on 127.0.0.1 (scripted failures)."""

from __future__ import annotations

import json
import logging
import time

import pytest
from splits.cli import main as splits_main
from splits.errors import ConfigError
from splits.llm import LLMError, Request, SamplingParams, load_model
from splits.llm.openai_api import backoff_delay, parse_retry_after
from splits.testing.fake_openai_server import FakeOpenAIServer

SECRET = "sk-test-SECRET-7f3a9b"


def registry(server: FakeOpenAIServer, **extra) -> dict:
    spec = {
        "backend": "openai",
        "base_url": server.base_url,
        "model": "served-model",
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.05,
        "timeout_s": 5,
    }
    spec.update(extra)
    return {"api": spec}


def test_chat_goes_to_chat_and_prompt_to_completions():
    with FakeOpenAIServer() as server:
        model = load_model("api", registry(server), cache_path=None)
        params = SamplingParams(temperature=0.0, max_tokens=7, seed=3, stop=("\n",))
        out = model.generate(
            [
                Request(
                    messages=(
                        {"role": "system", "content": "s"},
                        {"role": "user", "content": "hi there"},
                    ),
                    params=params,
                ),
                Request(prompt="Answer: A", params=params),
            ]
        )
        assert [c.text for c in out] == ["reply: hi there", "reply: Answer: A"]
        assert [c.finish_reason for c in out] == ["stop", "stop"]
        assert out[1].output_tokens == 3 and out[1].prompt_tokens == 2
        (chat,) = server.calls("/chat/completions")
        (plain,) = server.calls("/v1/completions")
        assert chat["body"]["messages"][1] == {"role": "user", "content": "hi there"}
        assert chat["body"]["model"] == "served-model"
        assert plain["body"]["prompt"] == "Answer: A"
        for call in (chat, plain):
            assert call["body"]["max_tokens"] == 7 and call["body"]["temperature"] == 0.0
            assert call["body"]["stop"] == ["\n"] and call["body"]["seed"] == 3
            assert "Authorization" not in call["headers"]  # no api_key_env: no key sent


def test_length_finish_reason_and_order():
    with FakeOpenAIServer() as server:
        model = load_model("api", registry(server, concurrency=4), cache_path=None)
        prompts = [" ".join(["w"] * n) for n in range(1, 12)]
        out = model.generate(
            [Request(prompt=p, params=SamplingParams(max_tokens=4)) for p in prompts]
        )
        assert [c.finish_reason for c in out] == ["stop"] * 3 + ["length"] * 8
        assert [c.text for c in out[:3]] == ["reply: " + p for p in prompts[:3]]


def test_retries_every_failure_kind_then_succeeds(caplog):
    script = ["429", "500", "503", "malformed", "nochoices", "timeout", "drop"]
    with FakeOpenAIServer(script=list(script), hang_s=1.0) as server:
        model = load_model(
            "api", registry(server, timeout_s=0.3, max_retries=7, concurrency=1), None
        )
        with caplog.at_level(logging.WARNING):
            (out,) = model.generate([Request(prompt="persist")])
        assert out.text == "reply: persist"
        assert len(server.calls()) == len(script) + 1
        retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
        assert len(retries) == len(script)
        for needle in (
            "HTTP 429",
            "HTTP 500",
            "HTTP 503",
            "malformed",
            "timeout",
            "connection error",
        ):
            assert any(needle in m for m in retries), needle


def test_final_error_names_server_and_last_status():
    with FakeOpenAIServer(default_action="503") as server:
        model = load_model("api", registry(server, max_retries=3), None)
        with pytest.raises(LLMError) as err:
            model.generate([Request(prompt="x")])
        assert server.base_url in str(err.value)
        assert "4 attempts" in str(err.value) and "HTTP 503" in str(err.value)
        assert len(server.calls()) == 4


def test_client_errors_are_not_retried():
    with FakeOpenAIServer(default_action="400") as server:
        model = load_model("api", registry(server, max_retries=5), None)
        with pytest.raises(LLMError, match="HTTP 400"):
            model.generate([Request(prompt="x")])
        assert len(server.calls()) == 1


def test_backoff_grows_exponentially_with_jitter():
    base, cap = 0.04, 10.0
    with FakeOpenAIServer(script=["500"] * 4) as server:
        model = load_model(
            "api", registry(server, backoff_base_s=base, backoff_max_s=cap, concurrency=1), None
        )
        requested: list[float] = []

        def recording_sleep(seconds: float) -> None:
            requested.append(seconds)
            time.sleep(seconds)

        model.backend.sleep = recording_sleep
        model.generate([Request(prompt="x")])
        times = [c["t"] for c in server.calls()]
    # the delays the backend chose: jitter factor in [0.5, 1) of base * 2**attempt
    assert len(requested) == 4
    for attempt, delay in enumerate(requested):
        assert base * 2**attempt * 0.5 <= delay < base * 2**attempt, (attempt, requested)
    # and the server saw the retries no sooner than that (a wall-clock upper bound would
    # only measure how loaded the machine is)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert len(gaps) == 4
    for gap, delay in zip(gaps, requested, strict=True):
        assert gap >= delay * 0.99, (gaps, requested)
    import random

    rng = random.Random(0)
    delays = [backoff_delay(a, 1.0, 5.0, rng) for a in range(8)]
    assert all(d <= 5.0 for d in delays) and delays[6] >= 2.5


def test_retry_after_is_honoured():
    with FakeOpenAIServer(script=["429:0.3"]) as server:
        model = load_model("api", registry(server, backoff_base_s=0.0, backoff_max_s=0.0), None)
        model.generate([Request(prompt="x")])
        first, second = (c["t"] for c in server.calls())
    assert second - first >= 0.29
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert 0 <= parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") <= 0.0 + 1e-9


def test_concurrency_is_bounded():
    with FakeOpenAIServer(latency_s=0.05) as server:
        model = load_model("api", registry(server, concurrency=3), None)
        started = time.perf_counter()
        out = model.generate([Request(prompt=f"p{i}") for i in range(24)])
        elapsed = time.perf_counter() - started
        assert [c.text for c in out] == [f"reply: p{i}" for i in range(24)]
        assert server.max_in_flight == 3
        assert elapsed >= 24 / 3 * 0.05 * 0.9  # it did not exceed the bound
    with FakeOpenAIServer(latency_s=0.05) as server:
        load_model("api", registry(server, concurrency=1), None).generate(
            [Request(prompt=f"p{i}") for i in range(5)]
        )
        assert server.max_in_flight == 1


def test_failure_keeps_finished_results_in_cache(tmp_path):
    def action(body):
        return "500" if body.get("prompt") == "bad" else "ok"

    cache = tmp_path / "cache.sqlite"
    with FakeOpenAIServer(action_for=action, latency_s=0.01) as server:
        model = load_model("api", registry(server, max_retries=1, concurrency=2), cache)
        requests = [Request(prompt="good0"), Request(prompt="bad"), Request(prompt="good1")]
        with pytest.raises(LLMError):
            model.generate(requests)
        model.close()
        good_calls = len(server.calls()) - 2
        again = load_model("api", registry(server, max_retries=1, concurrency=2), cache)
        with pytest.raises(LLMError):
            again.generate(requests)
        # results that had finished were cached and are not requested again
        assert good_calls >= 1
        n_good_second = (
            len([c for c in server.calls() if c["body"]["prompt"] != "bad"]) - good_calls
        )
        assert n_good_second == 2 - good_calls


def test_api_key_never_leaks(tmp_path, monkeypatch, caplog, capsys):
    monkeypatch.setenv("SPLITS_TEST_KEY", SECRET)
    cache = tmp_path / "cache.sqlite"

    def action(body):
        text = body.get("prompt", "")
        return {"flaky": "429", "broken": "401"}.get(text, "ok")

    with caplog.at_level(logging.DEBUG), FakeOpenAIServer(action_for=action) as server:
        reg = registry(server, api_key_env="SPLITS_TEST_KEY", max_retries=1)
        model = load_model("api", reg, cache)
        assert SECRET not in repr(model.backend) and SECRET not in json.dumps(
            model.backend.identity()
        )
        out = model.generate(
            [Request(prompt="hello"), Request(messages=({"role": "user", "content": "x"},))]
        )
        assert all(c["headers"]["Authorization"] == f"Bearer {SECRET}" for c in server.calls())
        errors = []
        for prompt in ("flaky", "broken"):
            with pytest.raises(LLMError) as err:
                model.generate([Request(prompt=prompt)])
            errors.append(str(err.value) + repr(err.value.__cause__))
        model.close()
        cfg = tmp_path / "config.yaml"
        cfg.write_text(json.dumps({"models": reg}))
        prompts = tmp_path / "in.jsonl"
        prompts.write_text('{"prompt": "hello"}\n{"prompt": "cli"}\n')
        out_file = tmp_path / "out.jsonl"
        rc = splits_main(
            [
                "llm",
                "--config",
                str(cfg),
                "--model",
                "api",
                "--input",
                str(prompts),
                "--output",
                str(out_file),
                "--cache",
                str(cache),
            ]
        )
        assert rc == 0
    assert all(SECRET not in c.text for c in out)
    assert all(SECRET not in e for e in errors)
    assert SECRET not in caplog.text
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    assert [json.loads(x)["text"] for x in out_file.read_text().splitlines()] == [
        "reply: hello",
        "reply: cli",
    ]
    assert json.loads(out_file.read_text().splitlines()[0])["cached"] is True


def test_missing_key_variable_is_a_config_error(monkeypatch):
    monkeypatch.delenv("SPLITS_TEST_ABSENT_KEY", raising=False)
    with FakeOpenAIServer() as server:
        with pytest.raises(
            ConfigError,
            match=r"^models\.api\.api_key_env: environment variable SPLITS_TEST_ABSENT_KEY",
        ):
            load_model("api", registry(server, api_key_env="SPLITS_TEST_ABSENT_KEY"), None)


def test_cli_reports_bad_input_lines(tmp_path, capsys):
    with FakeOpenAIServer() as server:
        cfg = tmp_path / "config.yaml"
        cfg.write_text(json.dumps({"models": registry(server)}))
        prompts = tmp_path / "in.jsonl"
        prompts.write_text('{"prompt": "ok"}\n{"promt": "typo"}\n')
        rc = splits_main(
            ["llm", "--config", str(cfg), "--model", "api", "--input", str(prompts), "--no-cache"]
        )
        assert rc == 2
        assert f"{prompts}:2: unknown key 'promt'" in capsys.readouterr().err
        assert server.calls() == []
        with FakeOpenAIServer(default_action="500") as down:
            cfg.write_text(json.dumps({"models": registry(down, max_retries=0)}))
            prompts.write_text('{"prompt": "ok"}\n')
            rc = splits_main(
                [
                    "llm",
                    "--config",
                    str(cfg),
                    "--model",
                    "api",
                    "--input",
                    str(prompts),
                    "--no-cache",
                ]
            )
            assert rc == 1
            err = capsys.readouterr().err
            assert down.base_url in err and "HTTP 500" in err and "Traceback" not in err


def test_timeout_bounds_the_whole_request():
    """A server that drips its answer one byte every 0.2 s is never idle for timeout_s, but
    the request must end timeout_s after it began (the body here takes over a minute)."""
    with FakeOpenAIServer(default_action="drip", drip_s=0.2) as server:
        model = load_model("api", registry(server, timeout_s=1, max_retries=1), None)
        started = time.perf_counter()
        with pytest.raises(LLMError) as err:
            model.generate([Request(prompt="slow " * 40)])
        elapsed = time.perf_counter() - started
        assert "within 1 s" in str(err.value) and "2 attempts" in str(err.value)
        # two attempts of 1 s each and a backoff of at most 0.05 s; a lower bound too
        assert 2.0 <= elapsed < 3.5, elapsed
        assert len(server.calls()) == 2


def test_a_fast_answer_is_unaffected_by_the_whole_request_bound():
    with FakeOpenAIServer(default_action="drip", drip_s=0.001) as server:
        model = load_model("api", registry(server, timeout_s=5), None)
        (out,) = model.generate([Request(prompt="quick")])
        assert out.text == "reply: quick"


def test_a_key_echoed_in_an_answer_is_scrubbed_everywhere(tmp_path, monkeypatch, caplog, capsys):
    """A server that puts the API key in a successful answer: the key reaches neither the
    completion, the cache, the CLI's output file nor the logs."""
    monkeypatch.setenv("SPLITS_TEST_KEY", SECRET)
    cache = tmp_path / "cache.sqlite"

    def echo(body):
        return f"your key is {SECRET} ok " + str(body.get("prompt", ""))

    with caplog.at_level(logging.DEBUG), FakeOpenAIServer(reply=echo) as server:
        reg = registry(server, api_key_env="SPLITS_TEST_KEY")
        model = load_model("api", reg, cache)
        (out,) = model.generate([Request(prompt="hello")])
        model.close()
        assert SECRET not in out.text and out.text.startswith("your key is ")
        cfg = tmp_path / "config.yaml"
        cfg.write_text(json.dumps({"models": reg}))
        prompts = tmp_path / "in.jsonl"
        prompts.write_text('{"prompt": "hello"}\n{"prompt": "again"}\n')
        out_file = tmp_path / "out.jsonl"
        argv = ["-v", "llm", "--config", str(cfg), "--model", "api", "--input", str(prompts)]
        argv += ["--output", str(out_file), "--cache", str(cache)]
        assert splits_main(argv) == 0
    assert SECRET not in caplog.text
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    texts = [json.loads(x)["text"] for x in out_file.read_text().splitlines()]
    assert len(texts) == 2 and all("***" in t for t in texts)


def test_scrub_secrets_in_log_records_of_any_logger(monkeypatch, capsys):
    """A key that made it into a log message (any module) is scrubbed by the CLI's handler."""
    from splits.llm.secrets import ScrubbingFilter, register_secret, scrub_secrets

    register_secret("sk-another-secret-42")
    assert scrub_secrets("a sk-another-secret-42 b") == "a *** b"
    handler = logging.StreamHandler()
    handler.addFilter(ScrubbingFilter())
    logger = logging.getLogger("splits.some_module")
    logger.addHandler(handler)
    try:
        logger.warning("leaked %s here", "sk-another-secret-42")
    finally:
        logger.removeHandler(handler)
    err = capsys.readouterr().err
    assert "sk-another-secret-42" not in err and "leaked *** here" in err
