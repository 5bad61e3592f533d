"""Compressed-input benchmark: one generated Pushshift RC_ file ingested plain and compressed
with zstd, gzip, bzip2 and xz (decompressed by content in the ingest), each next to its peer in
the same run: the format's own command-line decompressor writing to /dev/null (`zstd -dc`,
`gzip -dc`, `bzip2 -dc`, `xz -dc`), the floor any reader of that file pays.

    python bench/bench_ingest_compressed.py --mb 20          # quick check
    python bench/bench_ingest_compressed.py --mb 500         # the figures for the README

Prints, per format: compressed MB, ingest wall and CPU seconds and peak RSS, the decompressor's
wall and CPU seconds, and the ingest's wall time over the decompressor's; the load average before
and after (the machine may be shared: CPU seconds say more than wall seconds then).
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ingest import run_measured, settings  # noqa: E402
from splits.ingest.settings import IngestSettings, SynthSettings  # noqa: E402
from tiny import parse_args  # bench/, the script's folder

REPO = Path(__file__).resolve().parents[1]
BYTES_PER_POST = 260  # what the generator writes per post in the RC_ file, measured
FORMATS = {
    "plain": ("", None, None),
    "zstd": (".zst", lambda d: zstandard.ZstdCompressor(level=3).compress(d), ["zstd", "-dc"]),
    "gzip": (".gz", lambda d: gzip.compress(d, compresslevel=6), ["gzip", "-dc"]),
    "bzip2": (".bz2", lambda d: bz2.compress(d, compresslevel=9), ["bzip2", "-dc"]),
    "xz": (".xz", lambda d: lzma.compress(d, preset=6), ["xz", "-dc"]),
}


def make_rc(root: Path, mb: float) -> Path:
    posts = max(int(mb * 1e6 / BYTES_PER_POST), 2000)
    cmd = [
        sys.executable, "-m", "splits.cli", "synth",
        "--demographics", str(REPO / "config/demographics.sample.yaml"),
        "--topics", str(REPO / "config/topics.yaml"),
        "--out", str(root / "corpus"), "--truth-dir", str(root / "truth"),
        "--settings", settings(SynthSettings, posts=posts, shards=1, format="pushshift"),
    ]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return root / "corpus" / "RC_sample-0.ndjson"


def peer_seconds(cmd: list[str], path: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of the decompressor writing the file's content to /dev/null."""
    if shutil.which(cmd[0]) is None:
        return float("nan"), float("nan")
    shell = ["sh", "-c", f"{' '.join(cmd)} {path} > /dev/null"]
    wall, _, code, cpu = run_measured(shell)
    return (wall, cpu) if code == 0 else (float("nan"), float("nan"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=20.0, help="size of the plain RC_ file")
    parser.add_argument(
        "--chunk-mb", type=float, help="bytes parsed per chunk (default: ingest.chunk_mb)"
    )
    parser.add_argument("--workdir", default=None)
    args = parse_args(parser, mb=1.0)
    base = Path(args.workdir or tempfile.mkdtemp(prefix="bench_ingest_compressed."))
    plain = make_rc(base, args.mb)
    data = plain.read_bytes()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"plain file {len(data) / 1e6:.1f} MB")
    print(
        f"{'format':>6} {'MB':>7} {'ingest s':>8} {'cpu s':>6} {'RSS MiB':>7} |"
        f" {'decompressor s':>14} {'cpu s':>6} | {'ingest / decompressor':>21}"
    )
    for name, (suffix, compress, peer) in FORMATS.items():
        path = plain if compress is None else base / f"RC_bench.ndjson{suffix}"
        if compress is not None:
            path.write_bytes(compress(data))
        out = base / f"{name}.parquet"
        cmd = [
            sys.executable, "-m", "splits.cli", "ingest", "--input", str(path),
            "--out", str(out), "--report", str(base / f"{name}.json"),
            "--settings", settings(IngestSettings, chunk_mb=args.chunk_mb),
        ]  # fmt: skip
        wall, rss, code, cpu = run_measured(cmd)
        if code != 0:
            print(f"{name}: ingest failed ({code})", file=sys.stderr)
            return 1
        p_wall, p_cpu = peer_seconds(peer, path) if peer else (float("nan"), float("nan"))
        ratio = wall / p_wall if p_wall == p_wall and p_wall > 0 else float("nan")
        print(
            f"{name:>6} {path.stat().st_size / 1e6:7.1f} {wall:8.2f} {cpu:6.2f} {rss:7.0f} |"
            f" {p_wall:14.2f} {p_cpu:6.2f} | {ratio:20.1f}x",
            flush=True,
        )
    if not args.workdir:
        shutil.rmtree(base, ignore_errors=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
