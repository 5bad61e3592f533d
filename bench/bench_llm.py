"""Benchmark of the LLM layer (run: python bench/bench_llm.py [--requests N] [--latency-ms L]).

1. Requests/s of the openai backend against the local scripted server (fixed per-request
   latency) at concurrency 1, 8 and 32, with the speed-up against concurrency 1 (the peer
   measured in the same run) and against the ideal ``concurrency / latency``.
2. The response cache's overhead per request: a trivial builtin backend without a cache, with a
   cold cache (lookups + one committed write per request) and with a warm cache (all hits).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from splits.llm import Backend, Completion, Request, load_model, register_builtin
from tiny import parse_args  # bench/, the script's folder


@register_builtin("bench_echo")
class Echo(Backend):
    def __init__(self, name, spec):
        self.name = name

    def identity(self):
        return {"kind": "bench_echo"}

    def generate(self, requests):
        return [Completion(r.prompt, "stop", 1, 1, 0.0) for r in requests]


def bench_openai(n_requests: int, latency_s: float, levels: list[int]) -> None:
    print(f"openai backend, {n_requests} requests, server latency {latency_s * 1000:.0f} ms")
    base = None
    # the server runs in its own process, so it does not share the client's GIL
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "splits.testing.fake_openai_server",
            "--latency-ms",
            str(latency_s * 1000),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        base_url = server.stdout.readline().strip()
        for concurrency in levels:
            registry = {
                "api": {
                    "backend": "openai",
                    "base_url": base_url,
                    "model": "m",
                    "concurrency": concurrency,
                }
            }
            with load_model("api", registry, cache_path=None) as model:
                requests = [Request(prompt=f"c{concurrency} r{i}") for i in range(n_requests)]
                started = time.perf_counter()
                model.generate(requests, progress=False)
                elapsed = time.perf_counter() - started
            with urllib.request.urlopen(base_url + "/stats") as response:
                stats = json.load(response)
            rate = n_requests / elapsed
            base = base or rate
            ideal = concurrency / latency_s
            print(
                f"  concurrency {concurrency:3d}: {rate:8.1f} requests/s  "
                f"x{rate / base:5.2f} vs concurrency {levels[0]}  "
                f"({rate / ideal:5.1%} of ideal {ideal:.0f}/s; max in flight {stats['max_in_flight']})"
            )
    finally:
        server.terminate()
        server.wait()


def bench_cache(n_requests: int) -> None:
    print(f"response cache, {n_requests} requests (trivial builtin backend)")
    registry = {"echo": {"backend": "builtin", "kind": "bench_echo"}}
    requests = [Request(prompt=f"prompt number {i} " + "x" * 200) for i in range(n_requests)]
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache.sqlite"
        timings = {}
        for label, path in (("no cache", None), ("cold cache", cache), ("warm cache", cache)):
            with load_model("echo", registry, cache_path=path) as model:
                started = time.perf_counter()
                out = model.generate(requests, progress=False)
                timings[label] = time.perf_counter() - started
            if label == "warm cache":
                assert all(c.cached for c in out)
    peer = timings["no cache"]
    for label, elapsed in timings.items():
        per = elapsed / n_requests * 1e6
        overhead = (elapsed - peer) / n_requests * 1e6
        print(
            f"  {label:10s}: {per:8.1f} us/request (overhead vs no cache {overhead:+8.1f} us; x{elapsed / peer:.1f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=256, help="requests per openai measurement")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="server latency per request")
    parser.add_argument(
        "--levels", type=int, nargs="+", default=[1, 8, 32], help="concurrency levels"
    )
    parser.add_argument(
        "--cache-requests", type=int, default=2000, help="requests for the cache benchmark"
    )
    args = parse_args(parser, requests=16, latency_ms=1.0, levels=[1, 4], cache_requests=100)
    bench_openai(args.requests, args.latency_ms / 1000, args.levels)
    bench_cache(args.cache_requests)


if __name__ == "__main__":
    main()
