"""Scaling benchmark of the whole DAG, from ingest to the dataset export (issues 12 and 37).

For each corpus size (posts of the generated corpus, ``synth.posts``) it copies the repository,
writes a config (the default one with the paper's ``topics.top_k`` 3,000 and ``sampling.k`` 42,
``synth.shards`` one per million posts, ``ingest.buckets`` P = posts / ``--posts-per-bucket``
and ``topics.shard_posts`` = ``--posts-per-bucket``, so that every user bucket and every BM25
shard holds about the same posts at every size; with ``--one-machine``, P = 1 and the BM25
shards at the config's own ``topics.shard_posts``: the shape a researcher gets on one
workstation from the shipped config), generates the corpus (the
``synth`` rule, timed apart), then runs ``snakemake --cores N`` for the targets of ingest, the
graph, the demographics, the topic splits and the dataset export (no evaluation or probes: they
depend on the number of quadruplets, not on the corpus).

The jobs, their rules and the DAG's edges come from the run's own job log (bench/dag_jobs.py):
no rule is named here, so a per-bucket job added to the pipeline is measured without a change.
Each job's wall time and peak RSS come from its Snakemake ``benchmark:`` file (which samples the
job's processes: every 0.5 s for the first 15 s, then every 30 s) and the kernel's exact
high-water mark that every ``splits`` command logs at exit ("peak memory ... MiB"), the larger
of the two.

It prints, per rule and size: the number of jobs, the sum of their seconds, the slowest job and
the largest job's peak MiB; per size: the sum of all job times, the critical path (the longest
path through the DAG, a path's length being its jobs' seconds: the wall time given unlimited
machines) and the run's wall time. Then the flatness check (each rule's largest job's peak at
the largest size over the smallest: at a fixed bucket size a partitioned rule stays within
1.2x), the growth exponents (log-log least squares over the sizes) and their extrapolation to
89M posts on this machine, and a projection to 1B and 5B posts on a cluster of N nodes
(sum of job times / N + critical path, each rule's job memory), written with every job's figures
to ``--report-json``. It ends with one line ``scale: <posts> posts, total <s> s, largest job peak
<MiB> MiB (<rule>)`` for the largest size.

Sizes can be run one at a time: every size's figures go into ``--results`` (JSON, kept between
runs), and the tables, fits and plot cover every size recorded there.

    python bench/bench_scale.py --posts 1000000            # one size, minutes
    python bench/bench_scale.py --posts 300000 1000000 3000000 --posts-per-bucket 100000
    python bench/bench_scale.py --posts 30000000 --workdir /data/scale --results scale.json
    python bench/bench_scale.py --posts 3000000 --one-machine   # the shipped config's shape, P = 1
    python bench/bench_scale.py --tiny                     # two small sizes, a temp folder

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
from dag_jobs import critical_path, edges, job_key, parse_jobs, topological_rules  # bench/
from tiny import parse_args  # bench/, the script's folder

REPO = Path(__file__).resolve().parents[1]
IGNORE = shutil.ignore_patterns(
    "results", "logs", "benchmarks", ".snakemake", ".git", "__pycache__", "*.egg-info"
)
DEFAULT_SIZES = [1_000_000, 3_000_000, 10_000_000, 30_000_000]
PAPER_POSTS = 89_000_000
CLUSTER_POSTS = [1_000_000_000, 5_000_000_000]
DEFAULT_NODES = [10, 100, 1000]
POSTS_PER_BUCKET = 100_000
# the one setting of the number of user buckets (P) of the partitioned stages
BUCKETS_KEY = ("ingest", "buckets")
FLAT_RATIO = 1.2  # the largest job's peak, largest size over smallest, of a partitioned rule
BYTES_PER_POST = 1200  # disk per post (corpus + every table); checked before each size
TARGETS = [
    "results/posts/ingest_report.json",
    "results/graph/summary.json",
    "results/demographics/thresholds.json",
    "results/demographics/formula_comparison.md",
    "results/topics/topic_counts.csv",
    "results/dataset/export/README.md",
]
# --tiny: two sizes a factor 2 apart, two and four buckets (P > 1: the partitioned rules run).
# A quarter and half the sample corpus: the smallest at which every demographic's self-ID
# threshold is still supported (6,500 posts stop at one that is not). The run's cost is its ~66
# process starts per size, not its posts: 141 CPU s in the suite against 145 at 26k + 52k
TINY_POSTS = [13_000, 26_000]
TINY_POSTS_PER_BUCKET = 6_500
SYNTH_TARGET = "results/sample/synth_meta.json"
PEAK_LINE = re.compile(r"peak memory (\d+(?:\.\d+)?) MiB")


def buckets_for(posts: int, posts_per_bucket: int) -> int:
    return max(1, round(posts / posts_per_bucket))


def bench_config(workdir: Path, posts: int, buckets: int, shard_posts: int | None) -> Path:
    config = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
    config["synth"]["posts"] = posts
    config["synth"]["shards"] = max(2, math.ceil(posts / 1_000_000))
    config["topics"]["top_k"] = 3000
    config["sampling"]["k"] = 42
    section, key = BUCKETS_KEY
    config.setdefault(section, {})[key] = buckets
    # the BM25 stage's shards (of the demographics' posts, a part of the corpus) at the same
    # fixed size: every partitioned stage does the same work per job at every corpus size
    # (None: the config's own, as a run of the shipped config cuts them)
    if shard_posts is not None:
        config["topics"]["shard_posts"] = shard_posts
    path = workdir / "config" / "bench_scale.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def snakemake(workdir: Path, config: Path, targets: list[str], args) -> tuple[float, str]:
    """Runs Snakemake; returns its wall seconds and its log (stdout and stderr: the job blocks)."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    # targets first: --configfile and --resources each take several values
    cmd = [sys.executable, "-m", "snakemake", "--cores", str(args.cores), *targets]
    cmd += ["--configfile", str(config), "--resources", f"mem_mb={args.mem_mb}"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return seconds, proc.stdout + "\n" + proc.stderr


def job_records(workdir: Path, jobs: list[dict]) -> list[dict]:
    """One record per job of the run: rule, seconds and peak MiB (benchmark file and log line).
    A job without a benchmark file counts 0 s and 0 MiB and is named by its rule and id."""
    records = []
    for job in jobs:
        record = {"rule": job["rule"], "job": job_key(job), "s": 0.0, "mib": 0.0}
        record.update(benchmark_mib=0.0, logged_mib=0.0, benchmarked=False)
        tsv = workdir / job["benchmark"] if job["benchmark"] else None
        if tsv is not None and tsv.is_file():
            with tsv.open() as fh:
                row = next(csv.DictReader(fh, delimiter="\t"))
            rss = float(row["max_rss"]) if row["max_rss"] not in ("", "NA", "-") else 0.0
            record.update(s=float(row["s"]), benchmark_mib=rss, benchmarked=True)
        logged = []
        for log in job.get("log", []):
            if (workdir / log).is_file():
                logged += [float(m) for m in PEAK_LINE.findall((workdir / log).read_text())]
        record["logged_mib"] = max(logged, default=0.0)
        record["mib"] = max(record["benchmark_mib"], record["logged_mib"])
        records.append(record)
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
    if args.one_machine:
        buckets, shard_posts = 1, None
    else:
        buckets, shard_posts = buckets_for(posts, args.posts_per_bucket), args.posts_per_bucket
    config = bench_config(workdir, posts, buckets, shard_posts)
    synth_s, _ = snakemake(workdir, config, [SYNTH_TARGET], args)
    print(f"  {posts:,} posts: corpus generated in {synth_s:.0f} s, P = {buckets}", flush=True)
    load_before = os.getloadavg()
    total_s, log = snakemake(workdir, config, TARGETS, args)
    jobs = parse_jobs(log)
    if not jobs:
        sys.exit(
            f"bench_scale: no job blocks in the Snakemake log of {posts:,} posts:\n{log[-2000:]}"
        )
    disk = sum(f.stat().st_size for f in (workdir / "results").rglob("*") if f.is_file())
    kept_posts = json.loads((workdir / "results/posts/ingest_report.json").read_text())
    result = {
        "posts": posts,
        "buckets": buckets,
        "shape": run_shape(args),
        "synth_s": synth_s,
        "total_s": total_s,
        "load": [round(v, 2) for v in (*load_before, *os.getloadavg())],
        "disk_bytes": disk,
        "ingested_posts": kept_posts["posts"],
        "jobs": job_records(workdir, jobs),
        "edges": edges(jobs),
        "rule_order": topological_rules(jobs, edges(jobs)),
    }
    if not args.keep:
        shutil.rmtree(workdir / "results")
    return result


def per_rule(result: dict) -> dict[str, dict]:
    rules: dict[str, dict] = {}
    for job in result["jobs"]:
        entry = rules.setdefault(job["rule"], {"jobs": 0, "s": 0.0, "job_s": [], "job_mib": []})
        entry["jobs"] += 1
        entry["s"] += job["s"]
        entry["job_s"].append(job["s"])
        entry["job_mib"].append(job["mib"])
    for entry in rules.values():
        entry["max_job_s"] = max(entry["job_s"])
        entry["mib"] = max(entry["job_mib"])
    return rules


def dag_totals(result: dict) -> dict:
    """Sum of the jobs' seconds, and the critical path (seconds and the rules along it)."""
    seconds = {job["job"]: job["s"] for job in result["jobs"]}
    rule_of = {job["job"]: job["rule"] for job in result["jobs"]}
    length, path = critical_path(seconds, [tuple(edge) for edge in result["edges"]])
    return {
        "sum_job_s": sum(seconds.values()),
        "critical_path_s": length,
        "critical_path": [rule_of.get(key, key) for key in path],
    }


def rule_edges(result: dict) -> list[tuple[str, str]]:
    """The edges between rules: rule A before rule B where a job of B reads a job of A's output
    (a rule's jobs among themselves give none)."""
    rule_of = {job["job"]: job["rule"] for job in result["jobs"]}
    links = {(rule_of.get(a, a), rule_of.get(b, b)) for a, b in result["edges"]}
    return sorted((a, b) for a, b in links if a != b)


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


def at(line: tuple[float, float] | None, posts: float) -> float | None:
    return None if line is None else math.exp(line[1] + line[0] * math.log(posts))


def _size(posts: float) -> str:
    return f"{posts / 1e9:g}B" if posts >= 1e9 else f"{posts / 1e6:g}M"


def _fmt(value: float | None, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def report(results: dict[int, dict], plot_path: Path, json_path: Path, nodes: list[int]) -> None:
    sizes = sorted(results)
    for n in sizes:
        if "edges" not in results[n]:
            sys.exit(
                f"bench_scale: the {n:,}-post size was recorded by an older bench_scale "
                "(no DAG edges): run that size again"
            )
    tables = {n: per_rule(results[n]) for n in sizes}
    totals = {n: dag_totals(results[n]) for n in sizes}
    order = list(results[sizes[-1]]["rule_order"])
    rules = order + sorted({r for t in tables.values() for r in t} - set(order))
    out: dict = {"sizes": {}, "posts_per_bucket": {}}

    print(
        "\nper rule and size: jobs, seconds summed over the jobs, slowest job (s), largest job "
        "peak (MiB)"
    )
    labels = [f"{_size(n)} posts, P={results[n]['buckets']}" for n in sizes]
    print(f"{'rule':<20}" + "".join(f"{label:>32}" for label in labels))
    print(" " * 20 + "".join(f"{'jobs':>6}{'sum s':>9}{'max s':>8}{'MiB':>9}" for _ in sizes))
    for rule in rules:
        cells = "".join(
            f"{tables[n][rule]['jobs']:>6}{tables[n][rule]['s']:>9.1f}"
            f"{tables[n][rule]['max_job_s']:>8.1f}{tables[n][rule]['mib']:>9.0f}"
            if rule in tables[n]
            else f"{'-':>6}{'-':>9}{'-':>8}{'-':>9}"
            for n in sizes
        )
        print(f"{rule:<20}{cells}")
    for label, values in (
        ("sum of job times", [totals[n]["sum_job_s"] for n in sizes]),
        ("critical path", [totals[n]["critical_path_s"] for n in sizes]),
        ("wall (the DAG run)", [results[n]["total_s"] for n in sizes]),
        ("corpus generator", [results[n]["synth_s"] for n in sizes]),
    ):
        print(f"{label:<20}" + "".join(f"{'':>6}{v:>9.1f}{'':>17}" for v in values))
    print("critical path at the largest size: " + " -> ".join(totals[sizes[-1]]["critical_path"]))
    for n in sizes:
        load = results[n].get("load")
        out["posts_per_bucket"][n] = n / results[n]["buckets"]
        out["sizes"][n] = {
            "buckets": results[n]["buckets"],
            "wall_s": results[n]["total_s"],
            "synth_s": results[n]["synth_s"],
            "load_before_after": load,
            **totals[n],
            "rules": tables[n],
            "jobs": results[n]["jobs"],
        }
        if load:
            print(f"  {n:,} posts: load average before the run {load[0]:.1f}, after {load[3]:.1f}")

    fits = {}
    for rule in rules:
        present = [n for n in sizes if rule in tables[n]]
        fits[rule] = {
            key: fit(present, [tables[n][rule][field] for n in present])
            for key, field in (("s", "s"), ("mib", "mib"), ("jobs", "jobs"), ("max_s", "max_job_s"))
        }
    flatness(sizes, tables, rules, out)
    extrapolate(sizes, results, tables, totals, rules, fits, nodes, out)
    _plot(sizes, tables, rules, plot_path)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(out, indent=1, default=str))
    largest = sizes[-1]
    peak_rule, peak = max(tables[largest].items(), key=lambda item: item[1]["mib"])
    print(f"plot: {plot_path}\nreport: {json_path}")
    print(
        f"scale: {largest} posts, total {results[largest]['total_s']:.0f} s, largest job peak "
        f"{peak['mib']:.0f} MiB ({peak_rule})"
    )


def flatness(sizes, tables, rules, out: dict) -> None:
    """Each rule's largest job's peak, largest size over smallest. A rule whose number of jobs
    grows with the corpus is partitioned: at a fixed bucket size its jobs should stay flat."""
    small, large = sizes[0], sizes[-1]
    out["flatness"] = {}
    if small == large:
        return
    print(
        f"\nflatness, {_size(small)} -> {_size(large)} posts (target <= {FLAT_RATIO}x for "
        "the partitioned rules):"
    )
    print(f"{'rule':<20}{'jobs':>12}{'MiB':>16}{'ratio':>8}  verdict")
    for rule in rules:
        if rule not in tables[small] or rule not in tables[large]:
            continue
        a, b = tables[small][rule], tables[large][rule]
        ratio = b["mib"] / a["mib"] if a["mib"] else None
        partitioned = b["jobs"] > a["jobs"]
        flat = ratio is not None and ratio <= FLAT_RATIO
        verdict = ("flat" if flat else "GROWS") + (", partitioned" if partitioned else ", one job")
        if not partitioned and b["jobs"] > 1:
            verdict = verdict.replace("one job", f"{b['jobs']} jobs at every size")
        out["flatness"][rule] = {
            "jobs": [a["jobs"], b["jobs"]],
            "mib": [a["mib"], b["mib"]],
            "ratio": ratio,
            "partitioned": partitioned,
            "flat": flat,
        }
        jobs = f"{a['jobs']} -> {b['jobs']}"
        mib = f"{a['mib']:.0f} -> {b['mib']:.0f}"
        print(f"{rule:<20}{jobs:>12}{mib:>16}{_fmt(ratio, '.2f'):>8}  {verdict}")


def extrapolate(sizes, results, tables, totals, rules, fits, nodes, out: dict) -> None:
    """The growth exponents, 89M posts on this machine, and 1B / 5B posts on N nodes."""
    if len(sizes) < 2:
        return
    # P at a size extrapolated to: the fixed bucket size of the largest run, or 1 at every size
    # where every run had one bucket (--one-machine: the shipped config's shape)
    one_machine = all(results[n]["buckets"] == 1 for n in sizes)
    ppb = sizes[-1] / results[sizes[-1]]["buckets"]

    def buckets_at(posts: int) -> float:
        return 1.0 if one_machine else posts / ppb

    shape = "P = 1 at every size" if one_machine else f"P = posts / {ppb:,.0f}"
    print(f"\ngrowth (log-log fit over {len(sizes)} sizes) and extrapolation; {shape}")
    targets = [PAPER_POSTS, *CLUSTER_POSTS]
    head = f"{'rule':<20}{'exp s':>7}{'exp MiB':>8}"
    head += "".join(f"{f'{_size(t)}: jobs':>12}{'sum s':>12}{'MiB':>8}" for t in targets)
    print(head)
    out["fits"], out["extrapolation"] = {}, {t: {"rules": {}} for t in targets}
    for rule in rules:
        time_fit, mem_fit, jobs_fit = fits[rule]["s"], fits[rule]["mib"], fits[rule]["jobs"]
        out["fits"][rule] = fits[rule]
        cells = ""
        for t in targets:
            entry = {"jobs": at(jobs_fit, t), "sum_s": at(time_fit, t), "job_mib": at(mem_fit, t)}
            out["extrapolation"][t]["rules"][rule] = entry
            cells += (
                f"{_fmt(entry['jobs']):>12}{_fmt(entry['sum_s']):>12}{_fmt(entry['job_mib']):>8}"
            )
        exps = f"{_fmt(time_fit and time_fit[0], '.2f'):>7}{_fmt(mem_fit and mem_fit[0], '.2f'):>8}"
        print(f"{rule:<20}{exps}{cells}")
    lines = {
        "wall_s": fit(sizes, [results[n]["total_s"] for n in sizes]),
        "sum_job_s": fit(sizes, [totals[n]["sum_job_s"] for n in sizes]),
        "critical_path_s": fit(sizes, [totals[n]["critical_path_s"] for n in sizes]),
    }
    out["fits"]["totals"] = lines
    for name, line in lines.items():
        for t in targets:
            out["extrapolation"][t][name] = at(line, t)
    values = ", ".join(f"{_size(t)}: {_fmt(at(lines['wall_s'], t))} s" for t in targets)
    print(f"wall of the run on this machine: exponent {lines['wall_s'][0]:.2f}; {values}")
    wall = at(lines["wall_s"], PAPER_POSTS)
    print(f"this machine, 89M posts (P = {buckets_at(PAPER_POSTS):,.0f}): {wall:,.0f} s wall")
    steep = [r for r in rules if fits[r]["s"] and fits[r]["s"][0] > 1.1]
    print(f"rules with a time exponent above 1.1: {', '.join(steep) if steep else 'none'}")
    print(
        "\ncluster projection: hours = sum of job times / N + critical path, each summed over "
        "the rules' extrapolations (sum: each rule's job seconds; critical path: each rule's "
        "slowest job, along the rules' DAG); one job per node at a time, this machine's speed"
    )
    print(
        f"{'posts':>8}{'P':>10}{'sum h':>12}{'crit h':>9}"
        + "".join(f"{f'N={k}':>10}" for k in nodes)
        + f"{'largest job':>14}"
    )
    out["projection"] = {}
    rule_links = rule_edges(results[sizes[-1]])
    for t in CLUSTER_POSTS:
        per_rule_at = out["extrapolation"][t]["rules"]
        job_sum = sum(e["sum_s"] for e in per_rule_at.values() if e["sum_s"] is not None)
        slowest = {r: at(fits[r]["max_s"], t) or 0.0 for r in rules}
        crit, crit_rules = critical_path(slowest, rule_links)
        rule_mib = {r: per_rule_at[r]["job_mib"] for r in rules}
        biggest = max((r for r in rule_mib if rule_mib[r]), key=rule_mib.get)
        hours = {k: (job_sum / k + crit) / 3600 for k in nodes}
        out["projection"][t] = {
            "buckets": buckets_at(t),
            "sum_job_s": job_sum,
            "critical_path_s": crit,
            "critical_path": crit_rules,
            "slowest_job_s_by_rule": slowest,
            "hours_by_nodes": hours,
            "job_mib_by_rule": rule_mib,
        }
        print(
            f"{_size(t):>8}{buckets_at(t):>10,.0f}{job_sum / 3600:>12,.1f}{crit / 3600:>9.2f}"
            + "".join(f"{hours[k]:>10,.1f}" for k in nodes)
            + f"{f'{rule_mib[biggest] / 1024:.1f} GiB':>14} ({biggest})"
        )
    print(f"critical path at {_size(CLUSTER_POSTS[-1])}: " + " -> ".join(crit_rules))


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
    parser.add_argument(
        "--report-json",
        type=Path,
        help="tables, flatness, fits and projections (default: WORKDIR/scale_report.json)",
    )
    parser.add_argument(
        "--posts-per-bucket",
        type=int,
        default=POSTS_PER_BUCKET,
        help=f"posts per user bucket: P = posts / this (default {POSTS_PER_BUCKET:,})",
    )
    parser.add_argument(
        "--one-machine",
        action="store_true",
        help="P = 1 and the config's own topics.shard_posts (the shipped config's shape; "
        "--posts-per-bucket is then not used)",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        nargs="+",
        default=DEFAULT_NODES,
        help="cluster sizes of the 1B / 5B projection (default: 10 100 1000)",
    )
    parser.add_argument("--keep", action="store_true", help="keep each size's results/ folder")
    parser.add_argument("--report-only", action="store_true", help="print the recorded sizes")
    # --tiny: a quarter and half the sample corpus's size (about 52,000 posts), in a folder of
    # its own, removed after
    tiny_dir = Path(tempfile.mkdtemp(prefix="bench_scale_tiny.")) if "--tiny" in sys.argv else None
    args = parse_args(
        parser, posts=TINY_POSTS, posts_per_bucket=TINY_POSTS_PER_BUCKET, workdir=tiny_dir
    )
    if args.posts_per_bucket < 1:
        parser.error("--posts-per-bucket must be at least 1")
    try:
        return measure_and_report(args)
    finally:
        if tiny_dir is not None:
            shutil.rmtree(tiny_dir, ignore_errors=True)


def run_shape(args) -> str:
    """The DAG's shape, recorded with each size: the fits only mean something over one shape."""
    return "one machine" if args.one_machine else f"{args.posts_per_bucket} posts a bucket"


def measure_and_report(args) -> int:
    results_path = args.results or args.workdir / "results.json"
    recorded = {}
    if results_path.is_file():
        recorded = {int(k): v for k, v in json.loads(results_path.read_text()).items()}
    if not args.report_only:
        # sizes of another shape in the same results would be fitted as one line: refuse
        # (sizes recorded before the shape was, have none and are not checked)
        other = {v["shape"] for v in recorded.values() if "shape" in v} - {run_shape(args)}
        if other:
            sys.exit(
                f"bench_scale: {results_path} holds sizes run as {', '.join(sorted(other))}, "
                f"this run is {run_shape(args)}: give another --results (or --workdir)"
            )
        for posts in args.posts or DEFAULT_SIZES:
            recorded[posts] = run_size(posts, args)
            results_path.parent.mkdir(parents=True, exist_ok=True)
            results_path.write_text(json.dumps(recorded, indent=1, sort_keys=True))
    if not recorded:
        sys.exit(f"bench_scale: no sizes recorded in {results_path}")
    report(
        recorded,
        args.plot or args.workdir / "scale.png",
        args.report_json or args.workdir / "scale_report.json",
        args.nodes,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
