"""Ingest benchmark: a generated ConvoKit corpus of a given utterances.jsonl size, ingested by
`splits ingest` and loaded by `convokit.Corpus(filename=...)`, side by side in one run.

    python bench/bench_ingest.py --mb 50            # quick check
    python bench/bench_ingest.py --mb 1000 4000     # the issue's sizes (needs ~2x that on disk)

Prints, per size: wall seconds, MB/s, CPU seconds (user+sys), cores busy on average (CPU / wall)
and peak RSS of the ingest (its own subprocess; max RSS and CPU from wait4), the same for
ConvoKit, and the ratio (wall and CPU); the load average before and after.
The CPU columns matter on a shared machine: under load the wall time says more about the other
users than about the code. ConvoKit needs about 14x the file size in memory, so above
--convokit-max-mb (default: what fits in a third of the available memory) it loads a smaller
corpus made by the same generator instead (--convokit-mb) and its time is scaled linearly by
size (ConvoKit's load is linear in the number of utterances; its import time, measured alone,
is not scaled); such rows are marked "~" and their RSS is that of the smaller corpus.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from splits.config.settings import schema_defaults
from splits.ingest.settings import IngestSettings, SynthSettings

REPO = Path(__file__).resolve().parents[1]
BYTES_PER_POST = 470  # what the generator writes per utterance, measured


def settings(cls: type, **overrides) -> str:
    """A stage's ``--settings`` value: the schema's defaults, the given values replaced (None
    keeps the default)."""
    values = {k: v for k, v in overrides.items() if v is not None}
    return json.dumps(dataclasses.asdict(schema_defaults(cls, **values)))


def run_measured(cmd: list[str], timeout: float | None = None) -> tuple[float, float, int, float]:
    """(wall seconds, peak RSS MiB, return code, CPU seconds) of a subprocess."""
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
            return float("inf"), usage.ru_maxrss / 1024, -9, float("inf")
        time.sleep(0.05)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        print(proc.stderr.read().decode()[-2000:], file=sys.stderr)
    return wall, usage.ru_maxrss / 1024, code, usage.ru_utime + usage.ru_stime


def available_mb() -> float:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return 4096.0


def load_convokit(corpus: Path, timeout: float) -> tuple[float, float, float]:
    load = f"from convokit import Corpus; Corpus(filename={str(corpus)!r})"
    wall, rss, code, cpu = run_measured([sys.executable, "-c", load], timeout=timeout)
    if code != 0:
        return float("nan"), rss, float("nan")
    return wall, rss, cpu


def make_corpus(root: Path, mb: float) -> Path:
    posts = max(int(mb * 1e6 / BYTES_PER_POST), 2000)
    cmd = [
        sys.executable, "-m", "splits.cli", "synth",
        "--demographics", str(REPO / "config/demographics.sample.yaml"),
        "--topics", str(REPO / "config/topics.yaml"),
        "--out", str(root / "corpus"), "--truth-dir", str(root / "truth"),
        "--settings", settings(SynthSettings, posts=posts, shards=1),
    ]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return root / "corpus" / "sample-0"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--mb", type=float, nargs="+", default=[50.0], help="utterances.jsonl sizes"
    )
    parser.add_argument(
        "--chunk-mb", type=float, help="bytes parsed per chunk (default: ingest.chunk_mb)"
    )
    parser.add_argument("--no-convokit", action="store_true")
    parser.add_argument("--convokit-timeout", type=float, default=3600)
    parser.add_argument(
        "--convokit-max-mb",
        type=float,
        default=None,
        help="largest corpus ConvoKit loads itself (default: available memory / 3 / 14)",
    )
    parser.add_argument(
        "--convokit-mb", type=float, default=100, help="size ConvoKit loads above that"
    )
    parser.add_argument("--workdir", default=None, help="where corpora go (default: a temp dir)")
    args = parser.parse_args()
    base = Path(args.workdir or tempfile.mkdtemp(prefix="bench_ingest."))
    max_ck = args.convokit_max_mb or available_mb() / 3 / 14
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(
        f"{'MB':>7} {'ingest s':>8} {'MB/s':>6} {'cpu s':>6} {'MB/cpu-s':>8} {'cores':>5}"
        f" {'RSS MiB':>7} |"
        f" {'convokit s':>10} {'cpu s':>7} {'RSS MiB':>7} | {'ratio':>6} {'cpu ratio':>9}"
    )
    ck_cache: dict[float, tuple[float, ...]] = {}
    for mb in args.mb:
        root = base / f"mb{mb:g}"
        corpus = make_corpus(root, mb)
        size = (corpus / "utterances.jsonl").stat().st_size / 1e6
        out = root / "posts.parquet"
        ingest = [
            sys.executable, "-m", "splits.cli", "ingest", "--input", str(corpus),
            "--out", str(out), "--report", str(root / "report.json"),
            "--settings", settings(IngestSettings, chunk_mb=args.chunk_mb),
        ]  # fmt: skip
        t_ing, rss_ing, code, cpu_ing = run_measured(ingest)
        if code != 0:
            print(f"ingest failed ({code})", file=sys.stderr)
            return 1
        t_ck = rss_ck = cpu_ck = float("nan")
        mark = " "
        if not args.no_convokit:
            if size <= max_ck:
                t_ck, rss_ck, cpu_ck = load_convokit(corpus, args.convokit_timeout)
            else:
                if args.convokit_mb not in ck_cache:
                    small = make_corpus(base / f"convokit{args.convokit_mb:g}", args.convokit_mb)
                    small_size = (small / "utterances.jsonl").stat().st_size / 1e6
                    t_imp, _, _, cpu_imp = run_measured([sys.executable, "-c", "import convokit"])
                    ck_cache[args.convokit_mb] = (
                        small_size,
                        *load_convokit(small, args.convokit_timeout),
                        t_imp,
                        cpu_imp,
                    )
                    if not args.workdir:
                        shutil.rmtree(base / f"convokit{args.convokit_mb:g}")
                small_size, t_small, rss_ck, cpu_small, t_imp, cpu_imp = ck_cache[args.convokit_mb]
                t_ck = t_imp + (t_small - t_imp) * size / small_size
                cpu_ck = cpu_imp + (cpu_small - cpu_imp) * size / small_size
                mark = "~"
        print(
            f"{size:7.1f} {t_ing:8.2f} {size / t_ing:6.1f} {cpu_ing:6.2f} {size / cpu_ing:8.1f}"
            f" {cpu_ing / t_ing:5.2f} {rss_ing:7.0f} | {mark}{t_ck:9.2f} {cpu_ck:7.2f} {rss_ck:7.0f} |"
            f" {t_ck / t_ing:5.1f}x {cpu_ck / cpu_ing:8.1f}x",
            flush=True,
        )
        if not args.workdir:
            shutil.rmtree(root)
    if not args.workdir:
        shutil.rmtree(base, ignore_errors=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
