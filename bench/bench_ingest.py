"""Ingest benchmark: a generated ConvoKit corpus of a given utterances.jsonl size, ingested by
`splits ingest` and loaded by `convokit.Corpus(filename=...)`, side by side in one run.

    python bench/bench_ingest.py --mb 50            # quick check
    python bench/bench_ingest.py --mb 1000 4000     # the issue's sizes (needs ~2x that on disk)

Prints, per size: MB/s and peak RSS of the ingest (its own subprocess, max RSS from wait4), the
same for ConvoKit (skipped with --no-convokit or past --convokit-timeout), and the ratio.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BYTES_PER_POST = 470  # what the generator writes per utterance, measured


def run_measured(cmd: list[str], timeout: float | None = None) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB, return code) of a subprocess."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = None if timeout is None else start + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if deadline and time.perf_counter() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            return float("inf"), usage.ru_maxrss / 1024, -9
        time.sleep(0.05)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        print(proc.stderr.read().decode()[-2000:], file=sys.stderr)
    return wall, usage.ru_maxrss / 1024, code


def make_corpus(root: Path, mb: float) -> Path:
    posts = max(int(mb * 1e6 / BYTES_PER_POST), 2000)
    cmd = [
        sys.executable, "-m", "splits.cli", "synth",
        "--demographics", str(REPO / "config/demographics.sample.yaml"),
        "--topics", str(REPO / "config/topics.yaml"),
        "--out", str(root / "corpus"), "--truth-dir", str(root / "truth"),
        "--posts", str(posts), "--shards", "1",
    ]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return root / "corpus" / "sample-0"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--mb", type=float, nargs="+", default=[50.0], help="utterances.jsonl sizes"
    )
    parser.add_argument("--chunk-mb", type=float, default=16)
    parser.add_argument("--no-convokit", action="store_true")
    parser.add_argument("--convokit-timeout", type=float, default=3600)
    parser.add_argument("--workdir", default=None, help="where corpora go (default: a temp dir)")
    args = parser.parse_args()
    base = Path(args.workdir or tempfile.mkdtemp(prefix="bench_ingest."))
    print(
        f"{'MB':>8} {'ingest s':>9} {'MB/s':>7} {'RSS MiB':>8} {'convokit s':>10} {'RSS MiB':>8} {'ratio':>7}"
    )
    for mb in args.mb:
        root = base / f"mb{mb:g}"
        corpus = make_corpus(root, mb)
        size = (corpus / "utterances.jsonl").stat().st_size / 1e6
        out = root / "posts.parquet"
        ingest = [
            sys.executable, "-m", "splits.cli", "ingest", "--input", str(corpus),
            "--out", str(out), "--report", str(root / "report.json"), "--chunk-mb", str(args.chunk_mb),
        ]  # fmt: skip
        t_ing, rss_ing, code = run_measured(ingest)
        if code != 0:
            print(f"ingest failed ({code})", file=sys.stderr)
            return 1
        t_ck = rss_ck = float("nan")
        if not args.no_convokit:
            load = f"from convokit import Corpus; Corpus(filename={str(corpus)!r})"
            t_ck, rss_ck, code = run_measured(
                [sys.executable, "-c", load], timeout=args.convokit_timeout
            )
        ratio = t_ck / t_ing
        print(
            f"{size:8.1f} {t_ing:9.2f} {size / t_ing:7.1f} {rss_ing:8.0f} {t_ck:10.2f} {rss_ck:8.0f} {ratio:7.1f}x"
        )
        if not args.workdir:
            shutil.rmtree(root)
    if not args.workdir:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
