"""Benchmark of the subreddit graph stage (docs/method.md §2.2) against a bare blocked scipy product.

Generates a users x subreddits graph (Zipf subreddit popularity, heavy-tailed user activity),
writes it as a posts Parquet file (1-3 posts per membership), then measures in separate
processes, side by side:
- the stage: ``splits graph`` end to end (read posts, memberships, top-N, incidence matrix,
  blocked product, exact top-K for both measures, Parquet output);
- the peer: the bare blocked product ``At[block] @ A`` over the same incidence matrix (loaded
  from .npz, so its load time is not counted), same block height and threads, no top-K.
Wall time, CPU time (user + system, less sensitive to a shared machine's load) and peak memory
(max RSS of the process) of each, their ratios, and an extrapolation to 50,000 subreddits from a
log-log fit over the measured sizes (``--scales``).

    python bench/bench_graph.py --subreddits 2000 --users 200000 --memberships 2000000
    python bench/bench_graph.py            # the issue's size: 20k subreddits, 2M users, 20M
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tiny import parse_args  # bench/, the script's folder

REPO = Path(__file__).resolve().parents[1]
DEFAULT_BLOCK_MB = 256  # splits.graph.build.DEFAULT_BLOCK_MB (not imported: see measure())


def generate(n_subreddits: int, n_users: int, n_memberships: int, seed: int, out: Path):
    """Posts Parquet + incidence .npz; returns (posts path, npz path, memberships, posts)."""
    import numpy as np
    import polars as pl
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    # heavy-tailed activity: Pareto degrees, rescaled to the target number of memberships
    raw = rng.pareto(1.5, n_users) + 1.0
    # draw 1.5x the target: repeated draws of a subreddit by one user collapse into one
    # membership; the surplus is dropped at random below
    degrees = np.maximum(1, np.round(raw * (1.5 * n_memberships / raw.sum()))).astype(np.int64)
    degrees = np.minimum(degrees, n_subreddits // 2)
    users = np.repeat(np.arange(n_users, dtype=np.int64), degrees)
    popularity = 1.0 / np.arange(1, n_subreddits + 1) ** 1.0
    popularity /= popularity.sum()
    subs = rng.choice(n_subreddits, size=len(users), p=popularity)
    # every subreddit gets at least 25 members, so the min-posts rule keeps all of them
    floor_subs = np.repeat(np.arange(n_subreddits), 25)
    floor_users = rng.integers(0, n_users, len(floor_subs))
    pairs = pl.DataFrame(
        {
            "u": np.concatenate([users, floor_users]).astype(np.int32),
            "s": np.concatenate([subs, floor_subs]).astype(np.int32),
        }
    ).unique()
    if pairs.height > n_memberships:
        pairs = pairs.sample(n_memberships, seed=seed)
    pairs = pairs.sort("s", "u")
    del users, subs
    matrix = sp.csr_matrix(
        (
            np.ones(pairs.height, dtype=np.int32),
            (pairs["u"].to_numpy(), pairs["s"].to_numpy()),
        ),
        shape=(n_users, n_subreddits),
    )
    npz = out / "incidence.npz"
    sp.save_npz(npz, matrix, compressed=False)
    del matrix
    repeats = rng.integers(1, 4, pairs.height)
    posts = pairs.select(
        subreddit=pl.format("sub{}", pl.col("s")),
        author=pl.format("user{}", pl.col("u")),
    ).select(pl.all().repeat_by(pl.Series(repeats)).list.explode(keep_nulls=False))
    path = out / "posts.parquet"
    posts.write_parquet(path, compression="zstd")
    return path, npz, pairs.height, posts.height


PEER = r"""
import sys, time
from concurrent.futures import ThreadPoolExecutor
import scipy.sparse as sp
from splits.graph.build import rows_per_block
npz, block_mb, threads = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
A = sp.load_npz(npz).tocsr()
rows = rows_per_block(A.shape[1], block_mb)
t0 = time.perf_counter()
At = A.T.tocsr()
blocks = [(i, min(i + rows, A.shape[1])) for i in range(0, A.shape[1], rows)]
def block(b):
    return (At[b[0]:b[1]] @ A).nnz
with ThreadPoolExecutor(threads) as pool:
    nnz = sum(pool.map(block, blocks))
print(f"PRODUCT {time.perf_counter() - t0:.3f} {nnz} {rows}")
"""


def measure(argv: list[str]) -> tuple[float, float, str, str, float]:
    """(wall seconds, peak RSS in MiB, stdout, stderr, CPU seconds) of one child process.

    The peak is the child's ru_maxrss, which on Linux includes the RSS of the forked parent
    before exec: this process therefore imports nothing heavy and generates data in a child."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    stdout, stderr = proc.stdout.read(), proc.stderr.read()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:4]} failed:\n{stderr[-3000:]}")
    return wall, usage.ru_maxrss / 1024, stdout, stderr, usage.ru_utime + usage.ru_stime


def bench_one(args, scale: float, workdir: Path) -> dict:
    n_subs = max(50, int(args.subreddits * scale))
    n_users = max(100, int(args.users * scale))
    n_memb = max(1000, int(args.memberships * scale))
    gen_argv = [sys.executable, __file__, "--generate", str(workdir), str(n_subs), str(n_users)]
    gen_argv += [str(n_memb), str(args.seed)]
    gen, _, out, _, _ = measure(gen_argv)
    memberships, n_posts = (int(x) for x in out.split()[-2:])
    posts, npz = workdir / "posts.parquet", workdir / "incidence.npz"
    stage_argv = [sys.executable, "-m", "splits.cli", "graph", "--posts", str(posts)]
    # the graph section's settings, as the workflow's rule passes them (splits.graph.settings)
    graph = {"top_n": n_subs, "min_posts": 20, "k": args.k, "block_mb": args.block_mb}
    stage_argv += ["--threads", str(args.threads), "--settings", json.dumps(graph)]
    stage_argv += ["--out-dir", str(workdir / "graph")]
    stage_wall, stage_mem, _, stage_log, stage_cpu = measure(stage_argv)
    for line in stage_log.splitlines():
        print("    stage:", line.split(": ", 1)[-1], flush=True)
    peer_argv = [sys.executable, "-c", PEER, str(npz), str(args.block_mb), str(args.threads)]
    peer_wall, peer_mem, out, _, peer_cpu = measure(peer_argv)
    product_s, rows = float(out.split()[1]), int(out.split()[3])
    summary = json.loads((workdir / "graph" / "summary.json").read_text())
    kept = summary["subreddits_kept"]
    return {
        "subreddits": n_subs,
        "kept": int(kept),
        "users": n_users,
        "memberships": memberships,
        "posts": n_posts,
        "generate_s": gen,
        "stage_s": stage_wall,
        "stage_mib": stage_mem,
        "stage_cpu_s": stage_cpu,
        "peer_cpu_s": peer_cpu,
        "peer_product_s": product_s,
        "peer_process_s": peer_wall,
        "peer_mib": peer_mem,
        "block_rows": rows,
    }


def bench_buckets(args, scale: float, workdir: Path) -> dict:
    """The map+reduce path of ``ingest.buckets`` = ``args.buckets`` (every step a process, run one
    after another), the one-job stage and the bare blocked product, on one generated graph; the
    two paths' outputs must be byte-identical."""
    n_subs = max(50, int(args.subreddits * scale))
    n_users = max(100, int(args.users * scale))
    n_memb = max(1000, int(args.memberships * scale))
    gen_argv = [sys.executable, __file__, "--generate", str(workdir), str(n_subs), str(n_users)]
    measure([*gen_argv, str(n_memb), str(args.seed)])
    posts, npz = workdir / "posts.parquet", workdir / "incidence.npz"
    top = {"top_n": n_subs, "min_posts": 20}
    full = json.dumps({**top, "k": args.k, "block_mb": args.block_mb})
    cli = [sys.executable, "-m", "splits.cli"]
    threads = ["--threads", str(args.threads)]
    one = measure([*cli, "graph", "--posts", str(posts), "--settings", full, *threads,
                   "--out-dir", str(workdir / "one")])  # fmt: skip
    steps: dict[str, list[tuple]] = {"bucket": [], "subreddits": [], "overlaps": [], "reduce": []}
    dirs = [workdir / "buckets" / str(b) for b in range(args.buckets)]
    for b, folder in enumerate(dirs):
        steps["bucket"].append(measure([*cli, "graph-bucket", "--posts", str(posts), "--bucket",
            str(b), "--settings", json.dumps({"buckets": args.buckets}), "--out-dir",
            str(folder)]))  # fmt: skip
    subs = workdir / "buckets" / "subreddits.parquet"
    steps["subreddits"].append(measure([*cli, "graph-subreddits", "--counts",
        *[str(d / "counts.parquet") for d in dirs], "--settings", json.dumps(top), "--out",
        str(subs)]))  # fmt: skip
    for folder in dirs:
        steps["overlaps"].append(measure([*cli, "graph-overlaps", "--bucket-dir", str(folder),
            "--subreddits", str(subs), "--settings", json.dumps({"block_mb": args.block_mb}),
            "--out-dir", str(folder)]))  # fmt: skip
    steps["reduce"].append(measure([*cli, "graph", "--subreddits", str(subs), "--overlaps",
        *[str(d / "overlaps.parquet") for d in dirs], "--bucket-stats",
        *[str(d / "overlaps.json") for d in dirs], "--settings", full, *threads, "--out-dir",
        str(workdir / "sum")]))  # fmt: skip
    for name in ("subreddits.parquet", "neighbours.parquet", "summary.json"):
        if (workdir / "one" / name).read_bytes() != (workdir / "sum" / name).read_bytes():
            raise SystemExit(f"{name}: the bucketed graph differs from the one-job graph")
    peer = measure([sys.executable, "-c", PEER, str(npz), str(args.block_mb), str(args.threads)])
    return {
        "subreddits": n_subs,
        "users": n_users,
        "memberships": n_memb,
        "one_s": one[0],
        "one_cpu_s": one[4],
        "one_mib": one[1],
        "steps": {k: [(m[0], m[4], m[1]) for m in v] for k, v in steps.items()},
        "peer_product_s": float(peer[2].split()[1]),
        "peer_cpu_s": peer[4],
    }


def print_buckets(r: dict, buckets: int) -> None:
    steps = r["steps"]
    total = sum(w for v in steps.values() for w, _, _ in v)
    cpu = sum(c for v in steps.values() for _, c, _ in v)
    critical = sum(max(w for w, _, _ in v) for v in steps.values())
    print(
        f"S={r['subreddits']} users={r['users']} memberships<={r['memberships']} P={buckets} | "
        f"one job {r['one_s']:.2f} s (cpu {r['one_cpu_s']:.1f} s) {r['one_mib']:.0f} MiB | "
        f"buckets: all jobs {total:.2f} s (cpu {cpu:.1f} s), critical path {critical:.2f} s | "
        + " | ".join(
            f"{name} max {max(w for w, _, _ in v):.2f} s {max(m for _, _, m in v):.0f} MiB"
            for name, v in steps.items()
        )
        + f" | peer product {r['peer_product_s']:.2f} s (cpu {r['peer_cpu_s']:.1f} s) | "
        f"ratio all bucket jobs / peer product {total / max(r['peer_product_s'], 1e-9):.2f}, "
        f"one job / peer product {r['one_s'] / max(r['peer_product_s'], 1e-9):.2f} | "
        "outputs byte-identical",
        flush=True,
    )


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares slope and intercept."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return slope, my - slope * mx


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subreddits", type=int, default=20000)
    parser.add_argument("--users", type=int, default=2_000_000)
    parser.add_argument("--memberships", type=int, default=20_000_000)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--block-mb", type=float, default=DEFAULT_BLOCK_MB)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--scales",
        type=float,
        nargs="+",
        default=[0.5, 1.0],
        help="fractions of the size to measure (subreddits, users, memberships scaled together); "
        "two or more give the log-log extrapolation",
    )
    parser.add_argument("--target-s", type=float, default=60.0)
    parser.add_argument("--target-mib", type=float, default=3072.0)
    parser.add_argument(
        "--buckets",
        type=int,
        default=0,
        help="also time the graph as a sum over this many user buckets (ingest.buckets): each "
        "step a process, next to the one-job stage and the bare product",
    )
    parser.add_argument("--generate", nargs=5, help=argparse.SUPPRESS)
    args = parse_args(parser, subreddits=100, users=3000, memberships=30000, scales=[0.5, 1.0], k=5)
    if args.generate:
        out, n_subs, n_users, n_memb, seed = args.generate
        _, _, memberships, n_posts = generate(
            int(n_subs), int(n_users), int(n_memb), int(seed), Path(out)
        )
        print(memberships, n_posts)
        return 0

    if args.buckets:
        for scale in sorted(args.scales):
            with tempfile.TemporaryDirectory(prefix="bench_graph_") as tmp:
                print_buckets(bench_buckets(args, scale, Path(tmp)), args.buckets)
        return 0
    results = []
    for scale in sorted(args.scales):
        with tempfile.TemporaryDirectory(prefix="bench_graph_") as tmp:
            r = bench_one(args, scale, Path(tmp))
        results.append(r)
        print(
            f"S={r['subreddits']:>6} kept={r['kept']:>6} users={r['users']:>8} "
            f"memberships={r['memberships']:>9} posts={r['posts']:>9} | "
            f"stage {r['stage_s']:7.2f} s (cpu {r['stage_cpu_s']:.1f} s) {r['stage_mib']:7.0f} MiB | "
            f"peer product {r['peer_product_s']:7.2f} s (process {r['peer_process_s']:.2f} s, "
            f"cpu {r['peer_cpu_s']:.1f} s, "
            f"{r['peer_mib']:.0f} MiB) | ratio stage/peer product "
            f"{r['stage_s'] / max(r['peer_product_s'], 1e-9):.2f}, stage/peer cpu "
            f"{r['stage_cpu_s'] / max(r['peer_cpu_s'], 1e-9):.2f} | block rows {r['block_rows']}",
            flush=True,
        )
    last = results[-1]
    ok_time = last["stage_s"] <= args.target_s
    ok_mem = last["stage_mib"] <= args.target_mib
    print(
        f"targets at S={last['subreddits']}: time {last['stage_s']:.1f} s <= {args.target_s} "
        f"{'OK' if ok_time else 'MISSED'}; memory {last['stage_mib']:.0f} MiB <= "
        f"{args.target_mib:.0f} {'OK' if ok_mem else 'MISSED'}"
    )
    if len(results) >= 2:
        xs = [math.log(r["subreddits"]) for r in results]
        for key, unit in (
            ("stage_s", "s"),
            ("stage_cpu_s", "s"),
            ("stage_mib", "MiB"),
            ("peer_product_s", "s"),
            ("peer_cpu_s", "s"),
        ):
            slope, intercept = fit_line(xs, [math.log(max(r[key], 1e-6)) for r in results])
            at = math.exp(intercept + slope * math.log(50000))
            print(
                f"extrapolation to 50,000 subreddits (users and memberships scaled alike): "
                f"{key} ~ S^{slope:.2f} -> {at:.1f} {unit}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
