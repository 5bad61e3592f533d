"""Served mode (``llm.serve``, issue 13): one server per local model, shared by every job.

- Two real jobs (``splits llm`` processes) running at once with overlapping prompts share one
  server of a tiny random-weight transformers model: one engine build, each distinct prompt
  generated once (the server's own counters), and the same answers as the model run in-process
  without a server (the oracle).
- Switching served mode off reuses the cache: the job then runs in a process where importing
  torch fails, and every answer comes from the cache; with served mode on, a fully cached job
  starts no server.
- A served job killed half way and resumed sends no finished prompt to the engine again.
- An idle server exits and removes its endpoint; a killed server's stale endpoint is replaced.
- The sample workflow in served mode, with every LLM behind a stand-in engine (one of them the
  TM, the CM and the self-ID verifier at once): engine builds = distinct local models, and the
  same accuracies as the builtin models they stand in for.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import polars as pl
import pytest
import snakemake_fork
import yaml
from splits.config.schema import load_schema, validate_config
from splits.errors import ConfigError
from splits.llm import Request, SamplingParams, load_model
from splits.llm.serve import (
    SERVE_ENV,
    ServeSettings,
    read_endpoint,
    settings_from_config,
    settings_from_env,
    stop_servers,
)
from splits.testing.tiny_models import build_tiny_model

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import standin_engine  # noqa: E402
from test_llm_batch import BLOCKED_RUNNER  # noqa: E402

MAX_TOKENS = 6


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("tiny") / "llama")
    root = tmp_path_factory.mktemp("serve")
    spec = {
        "backend": "transformers",
        "model": str(path),
        "device": "cpu",
        "batch_size": 4,
        "cpu_threads": 1,
    }
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["models"] = {"tiny": spec}
    config_path = root / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    return {"spec": spec, "config": config_path, "root": root}


def serve_settings(folder: Path, **keys) -> ServeSettings:
    """Served mode's settings with the schema's defaults but ``keys``, as the Snakefile builds
    them."""
    config = validate_config({"llm": {"serve": {"enabled": True, **keys}}}, load_schema())
    return settings_from_config(config, folder)


def _env(settings: ServeSettings | None, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != SERVE_ENV}
    env["OMP_NUM_THREADS"] = "1"
    if settings is not None:
        env[SERVE_ENV] = settings.as_json()
    return {**env, **extra}


def _write_prompts(path: Path, prompts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"id": p, "prompt": p}) + "\n" for p in prompts))
    return path


def _llm_job(tiny, prompts_file, out, cache, env, runner=None):
    head = [sys.executable, str(runner)] if runner else [sys.executable, "-m", "splits.cli"]
    cmd = [*head, "llm", "--config", str(tiny["config"]), "--model", "tiny"]
    cmd += ["--input", str(prompts_file), "--output", str(out), "--cache", str(cache)]
    cmd += ["--max-tokens", str(MAX_TOKENS)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _answers(path: Path) -> dict[str, dict]:
    return {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}


def _stats(folder, name="tiny") -> dict:
    endpoint = read_endpoint(folder, name)
    assert endpoint is not None, f"no running server of {name} in {folder}"
    return httpx.get(f"http://{endpoint['host']}:{endpoint['port']}/stats", timeout=10).json()


def _finish(proc) -> str:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return err


def test_two_jobs_share_one_server_and_each_prompt_is_generated_once(tiny, tmp_path):
    folder = tmp_path / "servers"
    settings = serve_settings(folder, idle_timeout_s=60)
    prompts_a = [f"alpha {i} baking bread" for i in range(8)]
    prompts_b = prompts_a[4:] + [f"beta {i} grading papers" for i in range(4)]
    jobs = []
    try:
        for who, prompts in (("a", prompts_a), ("b", prompts_b)):
            file = _write_prompts(tmp_path / f"{who}.jsonl", prompts)
            out, cache = tmp_path / f"{who}.out.jsonl", tmp_path / f"{who}.sqlite"
            jobs.append((_llm_job(tiny, file, out, cache, _env(settings)), out))
        for proc, _ in jobs:
            _finish(proc)
        stats = _stats(folder)
        distinct = set(prompts_a) | set(prompts_b)
        # one engine, 16 requests from two jobs, each distinct prompt through the engine once
        assert stats["engine_builds"] == 1
        assert stats["requests"] == len(prompts_a) + len(prompts_b)
        assert stats["engine_calls"] == len(distinct)
        assert len(list(folder.glob("*.json"))) == 1
        served = {**_answers(jobs[0][1]), **_answers(jobs[1][1])}
        shared = _answers(jobs[1][1])
        assert all(served[p]["text"] == shared[p]["text"] for p in prompts_a[4:])

        # oracle: the same model run in this process, no server, no cache
        registry = {"tiny": tiny["spec"]}
        os.environ.pop(SERVE_ENV, None)
        params = SamplingParams(max_tokens=MAX_TOKENS)
        with load_model("tiny", registry) as model:
            direct = model.generate([Request(prompt=p, params=params) for p in sorted(distinct)])
            assert model.stats.engine_builds == 1
        assert [served[p]["text"] for p in sorted(distinct)] == [c.text for c in direct]

        # served mode off: the same cache answers everything, torch is never imported
        runner = tmp_path / "blocked.py"
        runner.write_text(BLOCKED_RUNNER)
        out = tmp_path / "a.off.jsonl"
        file = tmp_path / "a.jsonl"
        _finish(_llm_job(tiny, file, out, tmp_path / "a.sqlite", _env(None), runner))
        assert all(r["cached"] for r in _answers(out).values())
        assert {p: r["text"] for p, r in _answers(out).items()} == {
            p: served[p]["text"] for p in prompts_a
        }
        # served mode on, everything cached: the server sees no request at all
        out = tmp_path / "a.again.jsonl"
        _finish(_llm_job(tiny, file, out, tmp_path / "a.sqlite", _env(settings)))
        assert all(r["cached"] for r in _answers(out).values())
        assert _stats(folder)["requests"] == stats["requests"]
    finally:
        stop_servers(folder)
    assert read_endpoint(folder, "tiny") is None


def test_killed_served_job_resumed_sends_no_finished_prompt_to_the_engine(tiny, tmp_path):
    folder = tmp_path / "servers"
    # one request in flight at a time, so the kill lands between answers
    settings = serve_settings(folder, idle_timeout_s=60, concurrency=1)
    prompts = [f"item {i:02d} about parish picnics" for i in range(60)]
    file = _write_prompts(tmp_path / "p.jsonl", prompts)
    cache = tmp_path / "cache.sqlite"
    try:
        proc = _llm_job(tiny, file, tmp_path / "first.jsonl", cache, _env(settings))
        deadline = time.time() + 300
        calls = 0
        while time.time() < deadline and proc.poll() is None:
            endpoint = read_endpoint(folder, "tiny")
            if endpoint is not None:
                calls = _stats(folder)["engine_calls"]
                if calls >= len(prompts) // 3:
                    break
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        at_kill = _stats(folder)["engine_calls"]
        assert len(prompts) // 3 <= at_kill < len(prompts)

        out = tmp_path / "resumed.jsonl"
        _finish(_llm_job(tiny, file, out, cache, _env(settings)))
        answers = _answers(out)
        assert set(answers) == set(prompts)
        # the killed job committed all it had received (at most the request in flight lost)
        assert sum(r["cached"] for r in answers.values()) >= at_kill - 1
        # the engine generated every prompt exactly once across both runs
        assert _stats(folder)["engine_calls"] == len(prompts)
    finally:
        stop_servers(folder)


def test_idle_server_exits_and_a_killed_one_is_replaced(tiny, tmp_path, monkeypatch):
    folder = tmp_path / "servers"
    settings = serve_settings(folder, idle_timeout_s=1.0)
    monkeypatch.setenv(SERVE_ENV, settings.as_json())
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    registry = {"tiny": tiny["spec"]}
    params = SamplingParams(max_tokens=2)

    def ask(prompt):
        with load_model("tiny", registry, cache_path=tmp_path / "c.sqlite") as model:
            model.generate([Request(prompt=prompt, params=params)])
            endpoint = read_endpoint(folder, "tiny")
            return model.stats.engine_builds, endpoint

    try:
        builds, first = ask("one")
        assert builds == 1 and first is not None
        deadline = time.time() + 60
        while read_endpoint(folder, "tiny") is not None and time.time() < deadline:
            time.sleep(0.1)
        assert read_endpoint(folder, "tiny") is None, "the idle server did not exit"
        assert not _alive(first["pid"], wait_s=10)

        builds, second = ask("two")
        assert builds == 1 and second["pid"] != first["pid"]
        os.kill(second["pid"], signal.SIGKILL)  # leaves its endpoint file behind
        assert not _alive(second["pid"], wait_s=10)
        assert read_endpoint(folder, "tiny") == second
        builds, third = ask("three")
        assert builds == 1 and third["pid"] != second["pid"]
        builds, _ = ask("one")  # cached: no server needed, none started
        assert builds == 0
    finally:
        stop_servers(folder)


def _alive(pid: int, wait_s: float) -> bool:
    deadline = time.time() + wait_s
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        # a child of this process (started by the test's own client) must be reaped
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = 0
        if done:
            return False
        time.sleep(0.1)
    return True


def test_serve_settings_from_the_config(tmp_path, monkeypatch):
    schema = load_schema()
    config = validate_config({}, schema)
    assert config["llm"]["serve"] == {
        "enabled": False,
        "idle_timeout_s": 300,
        "startup_timeout_s": 3600,
        "concurrency": 64,
        "request_timeout_s": 3600,
        "vllm_server": "engine",
    }
    assert settings_from_config(config, tmp_path) is None  # batch mode
    config["llm"]["serve"].update(enabled=True, idle_timeout_s=5)
    settings = settings_from_config(config, tmp_path / "servers")
    assert settings.idle_timeout_s == 5 and Path(settings.dir).is_absolute()
    assert settings.concurrency == 64 and settings.vllm_server == "engine"
    # what a job inherits from the Snakefile reads back the same
    assert settings_from_env({SERVE_ENV: settings.as_json()}) == settings
    assert settings_from_env({}) is None
    with pytest.raises(ConfigError, match=r"^SPLITS_LLM_SERVE: not valid served-mode settings"):
        settings_from_env({SERVE_ENV: '{"dir": "x"}'})
    with pytest.raises(ConfigError, match=r"^llm\.serve\.idle_timeout_s: "):
        validate_config({"llm": {"serve": {"idle_timeout_s": 0}}}, schema)
    with pytest.raises(ConfigError, match=r"^llm\.serve\.port: unknown key"):
        validate_config({"llm": {"serve": {"port": 8000}}}, schema)


FAKE_VLLM = """#!{python}
# a stand-in for the vllm executable: records its arguments, answers like a server
import json, os, signal, sys, time
from splits.llm.base import Backend, Completion
from splits.llm.server import ModelServer

argv = sys.argv[1:]
with open(os.environ["FAKE_VLLM_RECORD"], "w") as out:
    json.dump({{"argv": argv, "pid": os.getpid()}}, out)


class Echo(Backend):
    name = "echo"

    def identity(self):
        return {{}}

    def generate(self, requests):
        texts = [r.prompt if r.prompt is not None else r.messages[-1]["content"] for r in requests]
        marks = [" +payload" if r.payload is not None else "" for r in requests]
        return [Completion(f"echo {{t}}{{m}}", "stop", 1, 1, 0.0) for t, m in zip(texts, marks)]


host, port = argv[argv.index("--host") + 1], int(argv[argv.index("--port") + 1])
ModelServer("fake", Echo(), 0.0, host, port).start()
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(1)
"""


def test_vllm_model_served_by_vllm_serve_with_its_engine_arguments(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "vllm"
    fake.write_text(FAKE_VLLM.format(python=sys.executable))
    fake.chmod(0o755)
    record = tmp_path / "vllm-args.json"
    folder = tmp_path / "servers"
    settings = serve_settings(folder, idle_timeout_s=60, vllm_server="vllm-serve")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(record))
    monkeypatch.setenv(SERVE_ENV, settings.as_json())
    spec = {
        "backend": "vllm",
        "model": "org/model-7b",
        "tensor_parallel_size": 2,
        "max_model_len": 4096,
        "enable_prefix_caching": False,
    }
    requests = [
        Request(prompt="raw prompt", payload={"row": 1}),
        Request(messages=({"role": "user", "content": "chat prompt"},)),
    ]
    try:
        with load_model("big", {"big": spec}, cache_path=tmp_path / "c.sqlite") as model:
            answers = model.generate(requests)
            assert model.stats.engine_builds == 1
        # vLLM's server never gets the payload (it is for the package's own server only)
        assert [a.text for a in answers] == ["echo raw prompt", "echo chat prompt"]
        endpoint = read_endpoint(folder, "big")
        assert endpoint["server"] == "vllm"
        recorded = json.loads(record.read_text())
        argv = recorded["argv"]
        port = str(endpoint["port"])
        assert argv[:6] == ["serve", "org/model-7b", "--host", "127.0.0.1", "--port", port]
        flags = argv[6:]
        for flag, value in (
            ("--served-model-name", "big"),
            ("--tensor-parallel-size", "2"),
            ("--max-model-len", "4096"),
            ("--seed", "0"),
        ):
            assert flags[flags.index(flag) + 1] == value
        assert "--no-enable-prefix-caching" in flags
    finally:
        stop_servers(folder)
    assert not _alive(recorded["pid"], wait_s=30), "vllm serve outlived its server"


# --------------------------------------------------------------------------- the workflow


def _snakemake(workdir: Path, env: dict, *args: str) -> str:
    proc = snakemake_fork.run(["--cores", "2", *args], workdir, env, 1200)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


def test_served_workflow_builds_one_engine_per_model(default_run, tmp_path):
    """The sample run's LLM stages in served mode: ``dual`` is the oracle-lexical TM, the
    lexical CM and the self-ID verifier (a stand-in answering each role as that builtin), ``tm2``
    the no-theory TM; batch mode would build dual's engine for its TM batch, its CM batch and
    each demographic's self-ID job."""
    workdir = tmp_path / "repo"
    shutil.copytree(default_run, workdir, symlinks=True)
    config_path = workdir / "config" / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["models"]["dual"] = {"backend": "vllm", "model": "dual"}
    config["models"]["tm2"] = {"backend": "vllm", "model": "builtin:no-theory"}
    config["evaluation"]["experiments"]["sample"].update(tms=["dual", "tm2"], cms=["dual"])
    config["demographics"].update(verifier="llm", verifier_model="dual")
    config["hypotheses"]["theories"] = []
    config["llm"] = {"serve": {"enabled": True, "idle_timeout_s": 600}}
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    builds = tmp_path / "builds.jsonl"
    site = standin_engine.write_sitecustomize(tmp_path / "site", builds, 0.2)
    pythonpath = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**_env(None), "PYTHONHASHSEED": "0", "PYTHONPATH": pythonpath}
    # the outputs of the LLM stages (the self-ID verifier's thresholds, the evaluation's
    # accuracies) and what they need; the rest of the default target (hypotheses, probes,
    # report pages) uses no model of this config
    experiment = "results/evaluation/experiments/sample/summary.csv"
    thresholds = "results/demographics/thresholds.json"
    _snakemake(workdir, env, experiment, thresholds, "--quiet", "rules")
    records = standin_engine.read_builds(builds)
    # one build per model, each in its server
    assert sorted((r["model"], r["argv"][0]) for r in records) == [
        ("dual", "serve"),
        ("tm2", "serve"),
    ]
    # every LLM job was a client: selfid (6 demographics), TM and CM batches
    logs = workdir / "logs"
    selfid_logs = list((logs / "selfid").glob("*.log"))
    assert len(selfid_logs) == len(list((default_run / "logs" / "selfid").glob("*.log")))
    for log in [*selfid_logs, *(logs / "evaluation_tm_batch").glob("*.log")]:
        assert "server pid" in log.read_text(), log
    # the run stopped its servers when it ended
    assert not list((workdir / "results/llm/servers").glob("*.json"))
    # the stand-ins answer as the builtin models: the default run's accuracies, renamed
    renamed = {"oracle-lexical": "dual", "no-theory": "tm2", "lexical": "dual"}
    expected = pl.read_csv(default_run / experiment).with_columns(
        pl.col("tm").replace(renamed), pl.col("cm").replace(renamed)
    )
    got = pl.read_csv(workdir / experiment)
    assert got.sort("tm", "cm", "k").equals(expected.sort("tm", "cm", "k"))
    assert json.loads((workdir / thresholds).read_text()) == json.loads(
        (default_run / thresholds).read_text()
    )
