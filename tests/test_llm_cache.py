"""The response cache across real processes: a run killed with SIGKILL halfway through a batch
repeats no finished call when rerun, and two processes writing at once lose nothing."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

from splits.llm import Request, load_model
from splits.testing.fake_openai_server import FakeOpenAIServer

N_ITEMS = 40

RUNNER = textwrap.dedent(
    """
    import sys
    from splits.llm import Request, load_model

    base_url, cache, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    registry = {"api": {"backend": "openai", "base_url": base_url, "model": "m", "concurrency": 1}}
    with load_model("api", registry, cache_path=cache) as model:
        out = model.generate([Request(prompt=f"item{i}") for i in range(n)], progress=False)
    assert [c.text for c in out] == [f"reply: item{i}" for i in range(n)]
    print("cached", sum(c.cached for c in out))
    """
)

WRITER = textwrap.dedent(
    """
    import sys, time
    from splits.llm import Backend, Completion, Request, load_model, register_builtin

    @register_builtin("cache_test_echo")
    class Echo(Backend):
        stream_chunk_size = 1  # one committed write per request: maximal interleaving
        def __init__(self, name, spec):
            self.name = name
        def identity(self):
            return {"kind": "cache_test_echo"}
        def generate(self, requests):
            return [Completion("echo " + r.prompt, "stop", 1, 1, 0.0) for r in requests]

    from pathlib import Path

    cache, who, n, shared, barrier = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5])
    requests = [Request(prompt=f"{who}-{i}") for i in range(n)]
    requests += [Request(prompt=f"shared-{i}") for i in range(shared)]
    model = load_model("e", {"e": {"backend": "builtin", "kind": "cache_test_echo"}}, cache_path=cache)
    (barrier / who).touch()
    while len(list(barrier.iterdir())) < 2:  # start writing together
        time.sleep(0.001)
    started = time.time()
    out = model.generate(requests, progress=False)
    assert [c.text for c in out] == ["echo " + r.prompt for r in requests]
    print("done", model.calls, started, time.time())
    """
)


def _cached_keys(path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {row[0] for row in conn.execute("SELECT key FROM completions")}


def test_killed_run_repeats_no_finished_call(tmp_path):
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    cache = tmp_path / "cache.sqlite"
    prompts = [f"item{i}" for i in range(N_ITEMS)]
    with FakeOpenAIServer(latency_s=0.05) as server:
        proc = subprocess.Popen(
            [sys.executable, str(script), server.base_url, str(cache), str(N_ITEMS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        deadline = time.time() + 60
        while len(server.calls()) < N_ITEMS // 2 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        answered_before_kill = len(server.calls())
        assert N_ITEMS // 2 <= answered_before_kill < N_ITEMS

        # which requests did the killed run finish? map cache keys back to prompts
        keyer = load_model(
            "api", {"api": {"backend": "openai", "base_url": server.base_url, "model": "m"}}
        )
        key_of = {p: keyer.key(Request(prompt=p)) for p in prompts}
        finished = {p for p in prompts if key_of[p] in _cached_keys(cache)}
        # all but the (at most one, concurrency 1) request in flight at the kill were kept
        assert answered_before_kill - 1 <= len(finished) <= answered_before_kill
        # requests go out in prefix order (sorted by prompt), one at a time: the finished ones
        # are the first of that order
        assert finished == set(sorted(prompts)[: len(finished)])

        rerun = subprocess.run(
            [sys.executable, str(script), server.base_url, str(cache), str(N_ITEMS)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert rerun.returncode == 0, rerun.stderr[-2000:]
        assert f"cached {len(finished)}" in rerun.stdout
        repeated = [c["body"]["prompt"] for c in server.calls()[answered_before_kill:]]
        assert not finished & set(repeated), "a finished call was sent again"
        assert sorted(repeated) == sorted(set(prompts) - finished)  # each missing one exactly once
    assert _cached_keys(cache) == set(key_of.values())


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    cache = tmp_path / "cache.sqlite"
    n, shared = 300, 100
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(cache), who, str(n), str(shared), str(barrier)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in ("alpha", "beta")
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    spans = []
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-2000:]
        _, calls, started, ended = out.split()
        assert int(calls) <= n + shared
        spans.append((float(started), float(ended)))
    assert max(s for s, _ in spans) < min(e for _, e in spans), f"writes did not overlap: {spans}"
    with sqlite3.connect(cache) as conn:
        rows = dict(conn.execute("SELECT key, text FROM completions").fetchall())
    assert len(rows) == 2 * n + shared
    assert sorted(rows.values()) == sorted(
        [f"echo alpha-{i}" for i in range(n)]
        + [f"echo beta-{i}" for i in range(n)]
        + [f"echo shared-{i}" for i in range(shared)]
    )
