"""The posts merge in one job (``merge-posts``) against the bucketed one (``ingest.buckets``:
``split-posts`` per shard, ``merge-bucket`` per bucket, ``ingest-report``) on a generated
Pushshift corpus: wall time and peak memory of every job, and the two reports compared.

    python bench/bench_posts_buckets.py --posts 2000000 --buckets 4
    python bench/bench_posts_buckets.py --posts 6000000 --buckets 12   # same bucket size

Every job is a process of its own, as Snakemake runs it; the corpus is generated and ingested
first (not timed)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tiny import parse_args

REPO = Path(__file__).resolve().parents[1]


def measure(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MiB) of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    stderr = proc.stderr.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv[:4]} failed:\n{stderr[-3000:]}")
    return wall, usage.ru_maxrss / 1024


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=2_000_000, help="generated posts")
    parser.add_argument("--buckets", type=int, default=4, help="ingest.buckets")
    args = parse_args(parser, argv, posts=3_000, buckets=3)
    cli = [sys.executable, "-m", "splits.cli"]
    with tempfile.TemporaryDirectory(prefix="bench_posts_buckets.") as tmp:
        work = Path(tmp)
        generate = (
            "import sys; sys.path.insert(0, 'tests'); from pathlib import Path;"
            "from test_synth import _generate;"
            f"_generate(Path({str(work / 'synth')!r}), format='pushshift', posts={args.posts})"
        )
        subprocess.run([sys.executable, "-c", generate], cwd=REPO, check=True)
        shards, reports = [], []
        for path in sorted((work / "synth" / "corpus").glob("*.ndjson")):
            out = work / f"{path.stem}.parquet"
            subprocess.run(
                [*cli, "ingest", "--input", str(path), "--shard", path.stem, "--out", str(out),
                 "--report", str(out.with_suffix(".json")), "--settings", '{"chunk_mb": 16}'],
                check=True, capture_output=True,
            )  # fmt: skip
            shards.append(str(out))
            reports.append(str(out.with_suffix(".json")))
        rows = []
        one = work / "one"
        rows.append(("merge-posts", *measure(
            [*cli, "merge-posts", "--posts", *shards, "--reports", *reports,
             "--out", str(one / "posts.parquet"), "--report", str(one / "report.json")]
        )))  # fmt: skip
        settings = json.dumps({"buckets": args.buckets})
        for shard in shards:
            name = Path(shard).stem
            rows.append((f"split-posts {name}", *measure(
                [*cli, "split-posts", "--posts", shard, "--out-dir", str(work / "split" / name),
                 "--settings", settings]
            )))  # fmt: skip
        bucket_reports = []
        for b in range(args.buckets):
            parts = [str(work / "split" / Path(s).stem / f"{b}.parquet") for s in shards]
            out = work / "buckets" / f"{b}.parquet"
            rows.append((f"merge-bucket {b}", *measure(
                [*cli, "merge-bucket", "--posts", *parts, "--out", str(out),
                 "--report", str(out.with_suffix(".json"))]
            )))  # fmt: skip
            bucket_reports.append(str(out.with_suffix(".json")))
        rows.append(("ingest-report", *measure(
            [*cli, "ingest-report", "--shard-reports", *reports, "--bucket-reports",
             *bucket_reports, "--report", str(work / "report.json")]
        )))  # fmt: skip
        single = json.loads((one / "report.json").read_text())
        bucketed = json.loads((work / "report.json").read_text())
        sizes = bucketed.pop("buckets")
    print(f"{'job':<28} {'wall s':>8} {'peak MiB':>9}")
    for name, wall, peak in rows:
        print(f"{name:<28} {wall:>8.2f} {peak:>9.0f}")
    bucket_peaks = [peak for name, _, peak in rows if name.startswith("merge-bucket")]
    split_peaks = [peak for name, _, peak in rows if name.startswith("split-posts")]
    print(
        f"posts {single['posts']:,} of {single['records']:,} records; buckets {sizes}; "
        f"reports equal: {single == bucketed}"
    )
    print(
        f"summary: merge-posts {rows[0][2]:.0f} MiB; largest split-posts {max(split_peaks):.0f} "
        f"MiB; largest merge-bucket {max(bucket_peaks):.0f} MiB; load {os.getloadavg()[0]:.1f}"
    )
    if single != bucketed:
        raise SystemExit("the bucketed ingest report differs from the single merge's")


if __name__ == "__main__":
    main()
