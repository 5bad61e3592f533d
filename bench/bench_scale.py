"""Scaling benchmark of the whole DAG, from ingest to the dataset export (issue 12).

For each corpus size (posts of the generated corpus, ``synth.posts``) it copies the repository,
writes a config (the default one with the paper's ``topics.top_k`` 3,000 and ``sampling.k`` 42,
``synth.shards`` one per million posts), generates the corpus (the ``synth`` rule, timed apart),
then runs ``snakemake --cores N`` for the targets of ingest, the graph, the demographics, the
topic splits and the dataset export (no evaluation or probes: they depend on the number of
quadruplets, not on the corpus). For every rule it reads each job's wall time and peak RSS from
Snakemake's ``benchmark:`` files (which sample the job's processes: every 0.5 s for the first
15 s, then every 30 s) and the kernel's exact high-water mark that every ``splits`` command logs
at exit ("peak memory ... MiB"), and keeps the larger of the two.

It prints one table (rule x size: seconds summed over the rule's jobs, the largest job's peak
MiB), fits the growth exponent of each rule's seconds and peak over the measured sizes (log-log
least squares), extrapolates both to 89M posts, writes a log-log plot, and ends with one line:
``scale: <posts> posts, total <s> s, largest job peak <MiB> MiB (<rule>)`` for the largest size.

Sizes can be run one at a time: every size's figures go into ``--results`` (JSON, kept between
runs), and the table, fits and plot cover every size recorded there.

    python bench/bench_scale.py --posts 1000000            # one size, minutes
    python bench/bench_scale.py                            # 1M, 3M, 10M and 30M posts
    python bench/bench_scale.py --posts 30000000 --workdir /data/scale --results scale.json
    python bench/bench_scale.py --tiny                     # the sample's size, a temp folder

Disk: the corpus, posts table, D_d and shards take about 1.2 KB per post (checked before each
size; corpora and results are deleted after a size unless ``--keep``).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from tiny import parse_args  # bench/, the script's folder

REPO = Path(__file__).resolve().parents[1]
IGNORE = shutil.ignore_patterns(
    "results", "logs", "benchmarks", ".snakemake", ".git", "__pycache__", "*.egg-info"
)
DEFAULT_SIZES = [1_000_000, 3_000_000, 10_000_000, 30_000_000]
PAPER_POSTS = 89_000_000
BYTES_PER_POST = 1200  # disk per post (corpus + every table); checked before each size
TARGETS = [
    "results/posts/ingest_report.json",
    "results/graph/summary.json",
    "results/demographics/thresholds.json",
    "results/demographics/formula_comparison.md",
    "results/topics/topic_counts.csv",
    "results/dataset/export/README.md",
]
TINY_POSTS = 52_000
SYNTH_TARGET = "results/sample/synth_meta.json"
PEAK_LINE = re.compile(r"peak memory (\d+(?:\.\d+)?) MiB")


def bench_config(workdir: Path, posts: int) -> Path:
    config = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
    config["synth"]["posts"] = posts
    config["synth"]["shards"] = max(2, math.ceil(posts / 1_000_000))
    config["topics"]["top_k"] = 3000
    config["sampling"]["k"] = 42
    path = workdir / "config" / "bench_scale.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def snakemake(workdir: Path, config: Path, targets: list[str], args) -> float:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    # targets first: --configfile, --resources and --quiet each take several values
    cmd = [sys.executable, "-m", "snakemake", "--cores", str(args.cores), *targets]
    cmd += ["--configfile", str(config), "--resources", f"mem_mb={args.mem_mb}"]
    cmd += ["--quiet", "rules"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return seconds


def job_records(workdir: Path) -> list[dict]:
    """One record per job: rule, seconds and peak MiB (benchmark file and log line)."""
    records = []
    for tsv in sorted((workdir / "results" / "benchmarks").glob("*/*.tsv")):
        with tsv.open() as fh:
            row = next(csv.DictReader(fh, delimiter="\t"))
        rule = tsv.parent.name
        rss = float(row["max_rss"]) if row["max_rss"] not in ("", "NA", "-") else 0.0
        log = workdir / "logs" / rule / f"{tsv.stem}.log"
        logged = [float(m) for m in PEAK_LINE.findall(log.read_text())] if log.is_file() else []
        records.append(
            {
                "rule": rule,
                "job": tsv.stem,
                "s": float(row["s"]),
                "benchmark_mib": rss,
                "logged_mib": max(logged, default=0.0),
                "mib": max([rss, *logged]),
            }
        )
    return records


def run_size(posts: int, args) -> dict:
    root = Path(args.workdir) / f"posts-{posts}"
    need = posts * BYTES_PER_POST
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(args.workdir).free
    if free < need:
        sys.exit(
            f"bench_scale: {posts:,} posts need about {need / 2**30:.0f} GiB of disk in "
            f"{args.workdir}, {free / 2**30:.0f} GiB free"
        )
    if root.exists():
        shutil.rmtree(root)
    workdir = root / "repo"
    shutil.copytree(REPO, workdir, ignore=IGNORE)
    config = bench_config(workdir, posts)
    synth_s = snakemake(workdir, config, [SYNTH_TARGET], args)
    print(f"  {posts:,} posts: corpus generated in {synth_s:.0f} s", flush=True)
    total_s = snakemake(workdir, config, TARGETS, args)
    records = [r for r in job_records(workdir) if r["rule"] != "synth"]
    disk = sum(f.stat().st_size for f in (workdir / "results").rglob("*") if f.is_file())
    kept_posts = json.loads((workdir / "results/posts/ingest_report.json").read_text())
    result = {
        "posts": posts,
        "synth_s": synth_s,
        "total_s": total_s,
        "disk_bytes": disk,
        "ingested_posts": kept_posts["posts"],
        "jobs": records,
    }
    if not args.keep:
        shutil.rmtree(workdir / "results")
    return result


def per_rule(result: dict) -> dict[str, dict]:
    rules: dict[str, dict] = {}
    for job in result["jobs"]:
        entry = rules.setdefault(job["rule"], {"s": 0.0, "mib": 0.0, "jobs": 0, "max_job_s": 0.0})
        entry["s"] += job["s"]
        entry["mib"] = max(entry["mib"], job["mib"])
        entry["jobs"] += 1
        entry["max_job_s"] = max(entry["max_job_s"], job["s"])
    return rules


def fit(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """Least-squares slope and intercept of log y on log x (None with fewer than 2 sizes)."""
    points = [(math.log(x), math.log(max(y, 1e-3))) for x, y in zip(xs, ys, strict=True)]
    if len(points) < 2:
        return None
    mx = sum(p[0] for p in points) / len(points)
    my = sum(p[1] for p in points) / len(points)
    var = sum((p[0] - mx) ** 2 for p in points)
    slope = sum((p[0] - mx) * (p[1] - my) for p in points) / var
    return slope, my - slope * mx


def report(results: dict[int, dict], plot_path: Path) -> None:
    sizes = sorted(results)
    tables = {n: per_rule(results[n]) for n in sizes}
    rules = sorted({r for t in tables.values() for r in t}, key=_order)
    head = f"{'rule':<22}" + "".join(f"{f'{n / 1e6:g}M posts':>22}" for n in sizes)
    head += f"{'exp s':>7}{'exp MiB':>8}{'89M: s':>10}{'89M: MiB':>10}"
    print("\n" + head)
    print(" " * 22 + "".join(f"{'s':>12}{'MiB':>10}" for _ in sizes))
    fits = {}
    for rule in rules:
        present = [n for n in sizes if rule in tables[n]]
        cells = "".join(
            f"{tables[n][rule]['s']:>12.1f}{tables[n][rule]['mib']:>10.0f}"
            if rule in tables[n]
            else f"{'-':>12}{'-':>10}"
            for n in sizes
        )
        time_fit = fit(present, [tables[n][rule]["s"] for n in present])
        mem_fit = fit(present, [tables[n][rule]["mib"] for n in present])
        fits[rule] = (time_fit, mem_fit)
        extra = ""
        if time_fit and mem_fit:
            at_s = math.exp(time_fit[1] + time_fit[0] * math.log(PAPER_POSTS))
            at_mib = math.exp(mem_fit[1] + mem_fit[0] * math.log(PAPER_POSTS))
            extra = f"{time_fit[0]:>7.2f}{mem_fit[0]:>8.2f}{at_s:>10.0f}{at_mib:>10.0f}"
        print(f"{rule:<22}{cells}{extra}")
    totals = "".join(f"{results[n]['total_s']:>12.1f}{'':>10}" for n in sizes)
    print(f"{'total (wall, DAG)':<22}{totals}")
    generator = "".join(f"{results[n]['synth_s']:>12.1f}{'':>10}" for n in sizes)
    print(f"{'corpus generator':<22}{generator}   (not in the total)")
    total_fit = fit(sizes, [results[n]["total_s"] for n in sizes])
    if total_fit:
        at = math.exp(total_fit[1] + total_fit[0] * math.log(PAPER_POSTS))
        print(f"total: exponent {total_fit[0]:.2f}, extrapolated to 89M posts: {at:.0f} s")
    steep = [r for r, (t, _) in fits.items() if t and t[0] > 1.1]
    if len(sizes) >= 2:
        print(f"rules with a time exponent above 1.1: {', '.join(steep) if steep else 'none'}")
    _plot(sizes, tables, rules, plot_path)
    largest = sizes[-1]
    peak_rule, peak = max(tables[largest].items(), key=lambda item: item[1]["mib"])
    print(f"plot: {plot_path}")
    print(
        f"scale: {largest} posts, total {results[largest]['total_s']:.0f} s, largest job peak "
        f"{peak['mib']:.0f} MiB ({peak_rule})"
    )


PIPELINE_ORDER = [
    "ingest",
    "merge_posts",
    "graph",
    "groupness",
    "selfid",
    "selfid_summary",
    "topic_shards",
    "topic_shard_stats",
    "topic_global_stats",
    "topic_shard_score",
    "topic_splits",
    "sample_quadruplets",
    "export_dataset",
]


def _order(rule: str) -> tuple[int, str]:
    return (PIPELINE_ORDER.index(rule) if rule in PIPELINE_ORDER else len(PIPELINE_ORDER), rule)


def _plot(sizes, tables, rules, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_s, ax_m) = plt.subplots(1, 2, figsize=(13, 5.5))
    for i, rule in enumerate(rules):
        xs = [n for n in sizes if rule in tables[n]]
        style = {"marker": "o", "label": rule, "linestyle": ("-", "--", ":")[i // 10 % 3]}
        ax_s.plot(xs, [tables[n][rule]["s"] for n in xs], **style)
        ax_m.plot(xs, [tables[n][rule]["mib"] for n in xs], **style)
    for ax, label in (
        (ax_s, "seconds (sum over the rule's jobs)"),
        (ax_m, "largest job peak (MiB)"),
    ):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("posts in the corpus")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    ax_m.axhline(4096, color="grey", linestyle="--", linewidth=1)
    ax_s.legend(fontsize=7, ncol=2)
    fig.suptitle("Splits DAG from ingest to export: growth with corpus size")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--posts", type=int, nargs="+", help="sizes to run (default: 1M 3M 10M 30M)"
    )
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument(
        "--mem-mb", type=int, default=20000, help="Snakemake's memory budget (--resources mem_mb)"
    )
    default_dir = Path(tempfile.gettempdir()) / "splits-bench-scale"
    parser.add_argument("--workdir", type=Path, default=default_dir, help="where sizes run")
    parser.add_argument(
        "--results", type=Path, help="JSON of every size measured (default: WORKDIR/results.json)"
    )
    parser.add_argument("--plot", type=Path, help="log-log plot (default: WORKDIR/scale.png)")
    parser.add_argument("--keep", action="store_true", help="keep each size's results/ folder")
    parser.add_argument("--report-only", action="store_true", help="print the recorded sizes")
    # --tiny: the sample corpus's size (about 52,000 posts) in a folder of its own, removed after
    tiny_dir = Path(tempfile.mkdtemp(prefix="bench_scale_tiny.")) if "--tiny" in sys.argv else None
    args = parse_args(parser, posts=[TINY_POSTS], workdir=tiny_dir)
    try:
        return measure_and_report(args)
    finally:
        if tiny_dir is not None:
            shutil.rmtree(tiny_dir, ignore_errors=True)


def measure_and_report(args) -> int:
    results_path = args.results or args.workdir / "results.json"
    recorded = {}
    if results_path.is_file():
        recorded = {int(k): v for k, v in json.loads(results_path.read_text()).items()}
    if not args.report_only:
        for posts in args.posts or DEFAULT_SIZES:
            recorded[posts] = run_size(posts, args)
            results_path.parent.mkdir(parents=True, exist_ok=True)
            results_path.write_text(json.dumps(recorded, indent=1, sort_keys=True))
    if not recorded:
        sys.exit(f"bench_scale: no sizes recorded in {results_path}")
    report(recorded, args.plot or args.workdir / "scale.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
