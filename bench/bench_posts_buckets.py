"""The posts table in one job (``ingest`` of each shard into one file, ``merge-posts``) against
the bucketed one (``ingest.buckets``: ``ingest --out-dir`` of each shard into its P bucket
files, ``merge-bucket`` per bucket, ``ingest-report``) on a generated Pushshift corpus: wall
time and peak memory of every job (each shard's two ingests side by side), and the two reports
compared.

    python bench/bench_posts_buckets.py --posts 2000000 --buckets 4
    python bench/bench_posts_buckets.py --posts 6000000 --buckets 12   # same bucket size

Every job is a process of its own, as Snakemake runs it; the corpus is generated first (not
timed)."""

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
        shards, reports, rows = [], [], []
        settings = json.dumps({"buckets": args.buckets, "chunk_mb": 16})
        for path in sorted((work / "synth" / "corpus").glob("*.ndjson")):
            out = work / f"{path.stem}.parquet"
            rows.append((f"ingest {path.stem}", *measure(
                [*cli, "ingest", "--input", str(path), "--shard", path.stem, "--out", str(out),
                 "--report", str(out.with_suffix(".json")), "--settings", '{"chunk_mb": 16}']
            )))  # fmt: skip
            rows.append((f"ingest into buckets {path.stem}", *measure(
                [*cli, "ingest", "--input", str(path), "--shard", path.stem, "--out-dir",
                 str(work / "split" / path.stem), "--report", str(work / f"{path.stem}.b.json"),
                 "--settings", settings]
            )))  # fmt: skip
            if json.loads((work / f"{path.stem}.b.json").read_text()) != json.loads(
                out.with_suffix(".json").read_text()
            ):
                raise SystemExit(f"{path.name}: the bucketed ingest's report differs")
            shards.append(str(out))
            reports.append(str(out.with_suffix(".json")))
        one = work / "one"
        rows.append(("merge-posts", *measure(
            [*cli, "merge-posts", "--posts", *shards, "--reports", *reports,
             "--out", str(one / "posts.parquet"), "--report", str(one / "report.json")]
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
    merge_peak = next(peak for name, _, peak in rows if name == "merge-posts")
    print(f"{'job':<40} {'wall s':>8} {'peak MiB':>9}")
    for name, wall, peak in rows:
        print(f"{name:<40} {wall:>8.2f} {peak:>9.0f}")
    bucket_peaks = [peak for name, _, peak in rows if name.startswith("merge-bucket")]
    split_peaks = [peak for name, _, peak in rows if name.startswith("ingest into buckets")]
    one_walls = [
        wall for name, wall, _ in rows if name.startswith("ingest ") and "buckets" not in name
    ]
    split_walls = [wall for name, wall, _ in rows if name.startswith("ingest into buckets")]
    print(
        f"posts {single['posts']:,} of {single['records']:,} records; buckets {sizes}; "
        f"reports equal: {single == bucketed}"
    )
    print(
        f"summary: ingest into one file {sum(one_walls):.2f} s, into {args.buckets} bucket files "
        f"{sum(split_walls):.2f} s ({sum(split_walls) / sum(one_walls):.2f}x); merge-posts "
        f"{merge_peak:.0f} MiB; largest bucketed ingest {max(split_peaks):.0f} MiB; largest "
        f"merge-bucket {max(bucket_peaks):.0f} MiB; load {os.getloadavg()[0]:.1f}"
    )
    if single != bucketed:
        raise SystemExit("the bucketed ingest report differs from the single merge's")


if __name__ == "__main__":
    main()
