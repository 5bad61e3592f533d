"""DAG benchmarks (issue 7).

1. Dry-run DAG build of a paper-sized config: 200 topics (the release's topics.json), the six
   paper demographics (15 pairs), 3 TMs x 2 CMs x 8 values of k. Target: at most 30 s.
   Peer in the same run: the dry-run DAG build of the default config.
2. No-op re-run of the default pipeline (`snakemake --cores 2` after a finished run). Target: at
   most 10 s. Peer in the same run: a dry run (`-n`) of the same finished pipeline.

    python bench/bench_dag.py                      # runs the default pipeline once first
    python bench/bench_dag.py --finished DIR       # DIR: a repo copy with a finished default run
    python bench/bench_dag.py --topics 20 --ks 4   # smaller sizes
    python bench/bench_dag.py --tiny               # 20 topics, 2 k, the dry runs only
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from tiny import parse_args  # bench/, the script's folder

REPO = Path(__file__).resolve().parents[1]
REFERENCE_TOPICS = REPO.parent / "shared" / "reference" / "splits-upstream" / "topics.json"
IGNORE = shutil.ignore_patterns(
    "results", "logs", "benchmarks", ".snakemake", ".git", "__pycache__", "*.egg-info"
)
KS = [0, 2, 4, 8, 16, 24, 32, 42]


CPU_SECONDS: dict[float, float] = {}  # wall seconds of a run -> its CPU seconds (user + sys)


def snakemake(workdir: Path, *args: str, check: bool = True) -> tuple[float, str]:
    """Wall seconds and output of one Snakemake call; its CPU seconds go to CPU_SECONDS (on a
    shared, loaded machine the CPU time is the stabler number)."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    cmd = [sys.executable, "-m", "snakemake", "--cores", "2", *args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU_SECONDS[elapsed] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if check and proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return elapsed, proc.stdout + proc.stderr


def cpu(wall: float) -> str:
    return f"{CPU_SECONDS[wall]:.2f} s CPU"


def paper_topics(n_topics: int, dest: Path) -> Path:
    """n topics in the release's JSON format: the release's own where present (repeated with a
    suffix beyond 200), else the default topics.yaml repeated."""
    if REFERENCE_TOPICS.is_file():
        release = json.loads(REFERENCE_TOPICS.read_text())
        flat = [(c, t, kw) for c, topics in release.items() for t, kw in topics.items()]
    else:
        default = yaml.safe_load((REPO / "config" / "topics.yaml").read_text())["topics"]
        flat = [(t["category"], t["topic"], t["keywords"]) for t in default]
    out: dict[str, dict[str, list[str]]] = {}
    for i in range(n_topics):
        category, topic, keywords = flat[i % len(flat)]
        name = topic if i < len(flat) else f"{topic} {i // len(flat) + 1}"
        out.setdefault(category, {})[name] = keywords
    dest.write_text(json.dumps(out, indent=1))
    return dest


def paper_config(workdir: Path, n_topics: int, n_tms: int, n_cms: int, n_ks: int) -> Path:
    config = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
    topics = paper_topics(n_topics, workdir / "config" / "bench_topics.json")
    config["topics"]["file"] = str(topics.relative_to(workdir))
    config["demographics"]["file"] = "config/demographics.yaml"
    config["sampling"]["k"] = 42
    tms = ["no-theory"] + [f"oracle-lexical-{i}" for i in range(n_tms - 1)]
    cms = [f"lexical-{i}" for i in range(n_cms)]
    for i, name in enumerate(tms[1:]):
        config["models"][name] = {"backend": "builtin", "kind": "oracle-lexical", "n_words": 10 + i}
    for name in cms:
        config["models"][name] = {"backend": "builtin", "kind": "lexical"}
    config["evaluation"]["experiments"] = {
        "paper": {"rows": 500, "tms": tms, "cms": cms, "ks": KS[:n_ks]}
    }
    # the hypotheses read an oracle TM's theories: of this config's experiment, its largest k
    config["hypotheses"]["theories"] = [
        {"experiment": "paper", "tm": tm, "k": max(KS[:n_ks])} for tm in tms[1:2]
    ]
    path = workdir / "config" / "bench.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def job_total(output: str) -> int:
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "total" and parts[1].isdigit():
            return int(parts[1])
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=200)
    parser.add_argument("--tms", type=int, default=3)
    parser.add_argument("--cms", type=int, default=2)
    parser.add_argument("--ks", type=int, default=8, choices=range(1, len(KS) + 1))
    parser.add_argument("--finished", type=Path, help="repo copy with a finished default run")
    parser.add_argument("--skip-noop", action="store_true", help="only the DAG build")
    # --tiny: the dry-run DAG builds of a small paper-sized config only (the no-op re-run needs
    # a finished default run, minutes)
    args = parse_args(parser, topics=20, tms=2, cms=1, ks=2, skip_noop=True)

    with tempfile.TemporaryDirectory(prefix="bench_dag_") as tmp:
        workdir = Path(tmp) / "repo"
        shutil.copytree(REPO, workdir, ignore=IGNORE)
        cfg = paper_config(workdir, args.topics, args.tms, args.cms, args.ks)
        dry = ("--dry-run", "--forceall", "--quiet", "rules")
        paper_s, paper_out = snakemake(workdir, *dry, "--configfile", str(cfg))
        default_s, default_out = snakemake(workdir, *dry)
        print(
            f"dry-run DAG build, paper-sized ({args.topics} topics, 15 pairs, {args.tms} TMs x "
            f"{args.cms} CMs x {args.ks} k; {job_total(paper_out)} jobs): {paper_s:.2f} s wall, {cpu(paper_s)} "
            f"(target <= 30 s: {'ok' if paper_s <= 30 else 'MISSED'})"
        )
        print(
            f"  peer: default config dry run ({job_total(default_out)} jobs): {default_s:.2f} s wall, "
            f"{cpu(default_s)}; "
            f"ratio paper/default = {paper_s / default_s:.2f}"
        )
        if args.skip_noop:
            return 0

        finished = args.finished
        if finished is None:
            finished = Path(tmp) / "finished"
            shutil.copytree(REPO, finished, ignore=IGNORE)
            full_s, _ = snakemake(finished, "--quiet", "rules")
            print(f"  (full default run to set up the no-op re-run: {full_s:.1f} s)")
        noop_s, noop_out = snakemake(finished)
        nothing = "Nothing to be done" in noop_out
        dry_s, _ = snakemake(finished, "--dry-run")
        print(
            f"no-op re-run of the default pipeline: {noop_s:.2f} s wall, {cpu(noop_s)} "
            f"(target <= 10 s: {'ok' if noop_s <= 10 and nothing else 'MISSED'}"
            f"{'' if nothing else '; it was NOT a no-op'})"
        )
        print(
            f"  peer: dry run of the same: {dry_s:.2f} s wall, {cpu(dry_s)}; ratio no-op/dry = {noop_s / dry_s:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
