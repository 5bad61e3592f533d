"""Model registry, builtin kinds, cache keys and the cached Model wrapper (no real LLM)."""

from __future__ import annotations

import logging
import sqlite3
import sys
import textwrap

import pytest
from splits.config.schema import load_config
from splits.errors import ConfigError
from splits.llm import (
    Backend,
    Completion,
    Model,
    Request,
    ResponseCache,
    SamplingParams,
    gpu_resources,
    load_model,
    register_builtin,
    request_key,
    validate_registry,
)
from splits.llm import backends as backends_module


class CountingBackend(Backend):
    """Answers with the payload's ``answer``; counts what it was asked."""

    def __init__(self, name: str, spec):
        self.name = name
        self.spec = spec
        self.seen: list[Request] = []

    def identity(self):
        return {"kind": "counting", "version": self.spec.get("version", 1)}

    def generate(self, requests):
        self.seen.extend(requests)
        return [
            Completion(str((r.payload or {}).get("answer")), "stop", 1, 1, 0.0) for r in requests
        ]


register_builtin("test_counting")(CountingBackend)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"backend": "vllm"}, "models.m.model: required key is missing"),
        ({"backend": "vllm", "model": "x", "tp": 2}, "models.m.tp: unknown key"),
        (
            {"backend": "vllm", "model": "x", "tensor_parallel_size": 0},
            "models.m.tensor_parallel_size:",
        ),
        ({"backend": "openai", "model": "x"}, "models.m.base_url: required key is missing"),
        (
            {"backend": "openai", "model": "x", "base_url": "localhost:8000"},
            "models.m.base_url: must start",
        ),
        (
            {"backend": "openai", "model": "x", "base_url": "http://h", "concurrency": "many"},
            "models.m.concurrency:",
        ),
        (
            {"backend": "openai", "model": "x", "base_url": "http://h", "api_key": "sk"},
            "models.m.api_key: unknown key",
        ),
        ({"backend": "transformers", "model": "x", "device": "gpu0"}, "models.m.device:"),
        ({"backend": "builtin"}, "models.m.kind: required key is missing"),
        ({"backend": "tensorflow"}, "models.m.backend:"),
        ({"model": "x"}, "models.m.backend: required key is missing"),
    ],
)
def test_bad_specs_name_the_key(spec, message):
    with pytest.raises(ConfigError) as err:
        validate_registry({"m": spec})
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


def test_defaults_are_filled_and_input_untouched():
    spec = {"backend": "openai", "model": "x", "base_url": "http://h/v1"}
    checked = validate_registry({"m": spec})["m"]
    assert checked["concurrency"] == 8 and checked["max_retries"] == 6
    assert checked["api_key_env"] is None
    assert spec == {"backend": "openai", "model": "x", "base_url": "http://h/v1"}
    builtin = validate_registry({"b": {"backend": "builtin", "kind": "k", "own_param": [1, 2]}})[
        "b"
    ]
    assert builtin["own_param"] == [1, 2]  # builtin kinds define their own keys


def test_registry_errors_through_the_config_file(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("models:\n  big: {backend: vllm, model: m, tensor_parallel_size: two}\n")
    with pytest.raises(ConfigError, match=r"^models\.big\.tensor_parallel_size:"):
        load_config(cfg)


def test_gpu_resources():
    registry = {
        "big": {"backend": "vllm", "model": "m", "tensor_parallel_size": 4},
        "slurm": {
            "backend": "vllm",
            "model": "m",
            "tensor_parallel_size": 2,
            "slurm_extra": "--qos=gpu",
        },
        "hf_gpu": {"backend": "transformers", "model": "m", "device": "cuda:1"},
        "hf_cpu": {"backend": "transformers", "model": "m", "device": "cpu"},
        "api": {"backend": "openai", "model": "m", "base_url": "http://h/v1"},
        "rule": {"backend": "builtin", "kind": "test_counting"},
    }
    assert gpu_resources("big", registry) == {"gpu": 4, "slurm_extra": ""}
    assert gpu_resources("slurm", registry) == {"gpu": 2, "slurm_extra": "--qos=gpu"}
    assert gpu_resources("hf_gpu", registry)["gpu"] == 1
    for name in ("hf_cpu", "api", "rule"):
        assert gpu_resources(name, registry) == {"gpu": 0, "slurm_extra": ""}
    with pytest.raises(ConfigError, match=r"^models\.nope: no such model"):
        gpu_resources("nope", registry)


def test_request_key_properties():
    ident = {"backend": "x", "model": "m"}
    chat = Request(messages=({"role": "user", "content": "hi"},))
    assert request_key(ident, chat, False) == request_key(
        ident, Request(messages=({"content": "hi", "role": "user"},)), False
    )
    variants = [
        Request(prompt="hi"),
        Request(messages=({"role": "user", "content": "hi!"},)),
        Request(messages=chat.messages, params=SamplingParams(max_tokens=5)),
        Request(messages=chat.messages, params=SamplingParams(stop=("\n",))),
        Request(messages=chat.messages, params=SamplingParams(temperature=0.7)),
    ]
    keys = {request_key(ident, r, False) for r in [chat, *variants]}
    assert len(keys) == 6
    assert request_key({"backend": "x", "model": "other"}, chat, False) != request_key(
        ident, chat, False
    )
    # greedy decoding ignores the seed; sampling does not
    assert request_key(
        ident, Request(prompt="a", params=SamplingParams(seed=1)), False
    ) == request_key(ident, Request(prompt="a", params=SamplingParams(seed=2)), False)
    hot = SamplingParams(temperature=1.0, seed=1)
    assert request_key(ident, Request(prompt="a", params=hot), False) != request_key(
        ident, Request(prompt="a", params=SamplingParams(temperature=1.0, seed=2)), False
    )
    # payload counts for builtin models only
    a, b = Request(prompt="a", payload={"x": 1}), Request(prompt="a", payload={"x": 2})
    assert request_key(ident, a, True) != request_key(ident, b, True)
    assert request_key(ident, a, False) == request_key(ident, b, False)


def test_model_caches_and_deduplicates(tmp_path):
    registry = {"c": {"backend": "builtin", "kind": "test_counting"}}
    cache = tmp_path / "cache.sqlite"
    requests = [Request(prompt="q", payload={"answer": i % 3}) for i in range(9)]
    model = load_model("c", registry, cache_path=cache)
    first = model.generate(requests)
    assert [c.text for c in first] == [str(i % 3) for i in range(9)]
    assert len(model.backend.seen) == 3  # each distinct request once
    assert not any(c.cached for c in first)
    model.close()
    again = load_model("c", registry, cache_path=cache)
    second = again.generate(requests + [Request(prompt="q", payload={"answer": 7})])
    assert [c.text for c in second] == [c.text for c in first] + ["7"]
    assert [c.cached for c in second] == [True] * 9 + [False]
    assert [r.payload for r in again.backend.seen] == [{"answer": 7}]
    # a different model identity does not see these entries
    other = load_model(
        "d", {"d": {"backend": "builtin", "kind": "test_counting", "version": 2}}, cache
    )
    other.generate(requests[:3])
    assert len(other.backend.seen) == 3
    assert again.name == "c" and again.spec["kind"] == "test_counting"
    assert isinstance(again, Model)


def test_errors_are_not_cached(tmp_path):
    @register_builtin("test_flaky")
    class Flaky(CountingBackend):
        def generate(self, requests):
            self.seen.extend(requests)
            return [Completion("", "error", 0, 0, 0.0) for _ in requests]

    model = load_model(
        "f", {"f": {"backend": "builtin", "kind": "test_flaky"}}, tmp_path / "c.sqlite"
    )
    model.generate([Request(prompt="x")])
    model.generate([Request(prompt="x")])
    assert len(model.backend.seen) == 2
    assert len(model.cache) == 0


def test_backends_and_builtin_kinds_through_one_table(tmp_path, monkeypatch):
    """Kinds and backends come from "module:Class" tables imported lazily: an unknown name is one
    ConfigError line listing the known names, a missing optional library one line naming the
    extra to install, and any other import error is not swallowed."""
    (tmp_path / "splits_test_provider_ok.py").write_text(
        textwrap.dedent(
            """
            from splits.llm import Backend, Completion
            class Echo(Backend):
                def __init__(self, name, spec):
                    self.name = name
                def identity(self):
                    return {"kind": "echo"}
                def generate(self, requests):
                    return [Completion(r.prompt, "stop", 0, 0, 0.0) for r in requests]
            """
        )
    )
    (tmp_path / "splits_test_provider_broken.py").write_text("raise RuntimeError('provider bug')\n")
    (tmp_path / "splits_test_needs_engine.py").write_text("import splits_fake_engine_library\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    kinds = {
        "test_provided": "splits_test_provider_ok:Echo",
        "test_broken": "splits_test_provider_broken:Echo",
        "test_engine": "splits_test_needs_engine:Engine",
    }
    monkeypatch.setattr(backends_module, "BUILTIN_KINDS", kinds)
    monkeypatch.setitem(backends_module.EXTRAS, "splits_fake_engine_library", "vllm")
    model = load_model("p", {"p": {"backend": "builtin", "kind": "test_provided"}})
    assert model.generate([Request(prompt="hello")])[0].text == "hello"
    assert "splits_test_provider_broken" not in sys.modules  # only what is asked is imported
    with pytest.raises(ConfigError) as err:
        load_model("q", {"q": {"backend": "builtin", "kind": "no_such_kind"}})
    message = str(err.value)
    assert message.startswith("models.q.kind: unknown builtin kind 'no_such_kind' (known: ")
    assert "test_provided" in message and "test_engine" in message and "\n" not in message
    with pytest.raises(RuntimeError, match="provider bug"):
        load_model("b", {"b": {"backend": "builtin", "kind": "test_broken"}}).generate(
            [Request(prompt="x")]
        )
    with pytest.raises(ConfigError) as err:
        load_model("e", {"e": {"backend": "builtin", "kind": "test_engine"}}).generate(
            [Request(prompt="x")]
        )
    assert str(err.value) == (
        "models.e.kind: needs splits_fake_engine_library, which is not installed "
        "(pip install 'splits[vllm]')"
    )


def test_package_builtin_kinds_are_in_the_table():
    for kind in ("lexical", "no-theory", "oracle-lexical", "probe-scripted"):
        factory = backends_module.backend_factory("m", {"backend": "builtin", "kind": kind})
        assert isinstance(factory, type) and issubclass(factory, Backend)


def test_cache_file_is_wal_sqlite(tmp_path):
    cache = ResponseCache(tmp_path / "c.sqlite")
    cache.put("k", Completion("t", "stop", 1, 2, 0.5))
    assert cache.get_many(["k", "missing"]) == {
        "k": Completion("t", "stop", 1, 2, 0.5, cached=True)
    }
    cache.close()
    conn = sqlite3.connect(tmp_path / "c.sqlite")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT COUNT(*) FROM completions").fetchone()[0] == 1


def test_progress_bar_and_throughput_line(caplog, capsys):
    model = load_model("c", {"c": {"backend": "builtin", "kind": "test_counting"}})
    requests = [Request(prompt="q", payload={"answer": i}) for i in range(20)]
    with caplog.at_level(logging.INFO, logger="splits.llm.registry"):
        model.generate(requests)
    line = next(r.getMessage() for r in caplog.records if "requests/s" in r.getMessage())
    assert "model c: 20 requests (0 cached, 20 generated)" in line
    assert "tokens/s (prompt 20, output 20 tokens)" in line
    assert "llm c" in capsys.readouterr().err  # the tqdm bar went to stderr
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="splits.llm.registry"):
        model.generate(requests[:2], progress=False)
    assert not any(
        "requests/s" in r.getMessage() for r in caplog.records
    )  # short batches stay quiet
    assert capsys.readouterr().err == ""
