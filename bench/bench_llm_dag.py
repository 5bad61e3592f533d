"""Engine builds of a whole ``config/paper.yaml`` run: eager engines (before issue 13), batch mode
(lazy engines, one batch job per LLM and role) and served mode (``llm.serve``: one shared server
per model).

The paper's LLM work (its model registry, evaluation experiments, LLM self-ID verifier and
probes) runs on the sample corpus (``config/config.yaml``'s data sections: the generated corpus,
sample demographics and topics, ``sampling.k`` 16; ks above 16 become distinct values <= 16, so
every experiment keeps its number of jobs), with every vLLM model behind a stand-in engine
(``bench/standin_engine.py``: CPU, deterministic, ``--load-s`` seconds to build, each build
recorded by model and command).

For each tree, two runs in a fresh copy: a full run, then a re-run of every LLM job with every
answer cached (``--forcerun`` of the LLM rules). "Before" is the tree at ``--before-ref`` (by
default the last commit where every job built its engine when it started); "batch" is this tree
with the config as it is; "served" is this tree with ``llm.serve.enabled: true`` (the other
``llm.serve`` keys at their defaults but ``idle_timeout_s``, set longer than the run so that the
count does not depend on the machine's speed; the run stops its servers when it ends, so the
cached re-run starts from none). Per run it prints the builds by command (``serve run``: a model's
server) and the simulated load seconds (the stand-ins' own load times, summed); then one line
per mode of this tree, served last:

    batch mode: engine builds: <n> for <m> models; cached re-run: <r> builds; simulated load <s> s (was <s0> s)
    engine builds: <n> for <m> models; cached re-run: <r> builds; simulated load <s> s (was <s0> s)

with n, r and s of that mode's two runs, m the distinct LLMs of the config and s0 the first run
of the before tree.

    python bench/bench_llm_dag.py                      # both trees, load 1 s per build
    python bench/bench_llm_dag.py --load-s 5 --skip-before
    python bench/bench_llm_dag.py --tiny               # each tree's DAG (dry run) and stand-in
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import standin_engine  # noqa: E402
from tiny import parse_args  # noqa: E402

#: the last commit of the eager structure (one engine built by every LLM job at its start)
BEFORE_REF = "ac3a225"
IGNORE = shutil.ignore_patterns(
    "results", "logs", "benchmarks", ".snakemake", ".git", "__pycache__", "*.egg-info"
)
#: ``llm.serve.idle_timeout_s`` of the served runs: longer than any run, so that a model's
#: server lives from its first job to the end of the run (the run stops it) on a machine of any
#: speed; with the default (300 s), a slow machine where the gap between a model's TM and CM
#: batches passes it counts a second build of that model, which says nothing of the structure
SERVED_IDLE_TIMEOUT_S = 86_400
TINY_POSTS = 20_000  # --tiny: the generated corpus's posts
#: rules whose jobs talk to a model, in either tree
LLM_RULES = (
    "evaluation_tm_batch",
    "evaluation_cm_batch",
    "evaluation_theorize",
    "evaluation_classify",
    "selfid",
    "probe_stress",
    "probe_empathy",
    "probe_personalization",
)


def map_ks(ks: list[int], limit: int) -> list[int]:
    """The ks with those above ``limit`` replaced by distinct unused values <= limit (as many
    jobs as before), largest first."""
    kept = sorted({k for k in ks if k <= limit})
    out = list(kept)
    candidate = limit
    for _ in [k for k in ks if k > limit]:
        while candidate in out and candidate > 0:
            candidate -= 1
        if candidate in out:
            raise SystemExit(f"cannot map ks {ks} below {limit}")
        out.append(candidate)
    return sorted(out)


def paper_on_sample(repo: Path, tiny: bool = False) -> dict:
    """config/config.yaml with config/paper.yaml's models, experiments, verifier and probes;
    ``tiny``: a corpus of TINY_POSTS posts and each experiment's smallest k only."""
    config = yaml.safe_load((repo / "config" / "config.yaml").read_text())
    paper = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    config["models"] = {**config["models"], **paper["models"]}
    limit = config["sampling"]["k"]
    experiments = paper["evaluation"]["experiments"]
    for experiment in experiments.values():
        experiment["ks"] = map_ks(experiment["ks"], limit)
        if tiny:
            experiment["ks"] = experiment["ks"][:1]
    if tiny:
        config["synth"]["posts"] = TINY_POSTS
    config["evaluation"]["experiments"] = experiments
    for key in ("tm_prompt", "cm_prompt", "tm_sampling", "cm_sampling", "max_post_chars"):
        config["evaluation"][key] = paper["evaluation"][key]
    for key in ("verifier", "verifier_model"):
        config["demographics"][key] = paper["demographics"][key]
    for probe, settings in paper["probes"].items():
        if isinstance(settings, dict) and isinstance(config["probes"].get(probe), dict):
            config["probes"][probe] = {**config["probes"][probe], **settings}
    config["probes"]["enabled"] = paper["probes"].get("enabled", True)
    # the sample's hypotheses read an experiment this config replaced: read the paper's builtin
    # TMs' theories instead, at the experiment's largest k left (the hypotheses' own LLM work is
    # not part of this count)
    if "hypotheses" in config:  # absent at the "before" ref
        config["hypotheses"]["theories"] = [
            {**entry, "k": max(experiments[entry["experiment"]]["ks"])}
            for entry in paper["hypotheses"]["theories"]
            if config["models"][entry["tm"]]["backend"] == "builtin"
        ]
    return config


def llm_models(config: dict) -> set[str]:
    used = {m for e in config["evaluation"]["experiments"].values() for m in e["tms"] + e["cms"]}
    used.add(config["demographics"]["verifier_model"])
    used |= {s["model"] for s in config["probes"].values() if isinstance(s, dict) and "model" in s}
    return {m for m in used if m and config["models"][m]["backend"] != "builtin"}


def checkout(ref: str | None, dest: Path) -> Path:
    if ref is None:
        shutil.copytree(REPO, dest, ignore=IGNORE)
        return dest
    dest.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref], capture_output=True, check=False
    )
    if archive.returncode != 0:
        raise SystemExit(f"git archive {ref} failed: {archive.stderr.decode()[-500:]}")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def snakemake(workdir: Path, env: dict, *args: str) -> float:
    cmd = [sys.executable, "-m", "snakemake", "--cores", "2", "--quiet", "rules", *args]
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(
            f"{' '.join(cmd)} in {workdir} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return time.perf_counter() - started


def command_of(build: dict) -> str:
    argv = build.get("argv") or []
    words = [a for a in argv[:2] if not a.startswith("-")]
    return " ".join(words) or "?"


def measure(
    label: str, ref: str | None, root: Path, load_s: float, served: bool = False, tiny: bool = False
) -> list[dict]:
    """Full run and cached re-run of one tree; returns [first, rerun] summaries."""
    tree = checkout(ref, root / label)
    config = paper_on_sample(tree, tiny)
    if served:
        config["llm"] = {"serve": {"enabled": True, "idle_timeout_s": SERVED_IDLE_TIMEOUT_S}}
    (tree / "config" / "bench.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    builds_file = root / f"{label}-builds.jsonl"
    site = standin_engine.write_sitecustomize(root / f"{label}-site", builds_file, load_s)
    env = {
        **os.environ,
        "PYTHONHASHSEED": "0",
        "PYTHONPATH": os.pathsep.join([str(site), str(tree / "workflow")]),
    }
    if tiny:
        return [smoke(label, tree, env, builds_file)] * 2
    rules = [r for r in LLM_RULES if f"rule {r}:" in _rule_text(tree) or r in _checkpoints(tree)]
    results = []
    for run, args in (
        ("full run", ()),
        ("cached re-run", ("--forcerun", *rules)),
    ):
        wall = snakemake(tree, env, "--configfile", "config/bench.yaml", *args)
        builds = standin_engine.read_builds(builds_file)
        builds_file.unlink(missing_ok=True)
        by_command = Counter(command_of(b) for b in builds)
        load = sum(b["load_s"] for b in builds)
        print(
            f"{label}, {run}: {len(builds)} engine builds, simulated load {load:.1f} s, wall {wall:.0f} s"
        )
        for command, n in sorted(by_command.items()):
            print(f"    {command:<24} {n:4d}")
        results.append({"builds": len(builds), "load_s": load, "wall_s": wall})
    return results


# --tiny, in a tree's environment (the stand-in installed by its sitecustomize): one engine
# built, a self-ID verification (the rule verifier of that tree) and an unknown prompt answered
SMOKE = """
import json
import standin_engine
from splits.llm.base import Request
engine = standin_engine.StandInEngine("smoke", {"model": "smoke", "tensor_parallel_size": 1})
payload = {"left_context": "I am a", "match": "teacher", "right_context": " and I love it."}
answers = engine.generate([Request(prompt="verify", payload=payload), Request(prompt="other")])
print(json.dumps([a.text for a in answers]))
"""


def smoke(label: str, tree: Path, env: dict, builds_file: Path) -> dict:
    """--tiny: the tree's DAG built (a dry run of the config) and its stand-in engine answering,
    instead of the runs (minutes even on a tiny corpus: the DAG has over a hundred jobs)."""
    wall = snakemake(tree, env, "--configfile", "config/bench.yaml", "--dry-run")
    proc = subprocess.run(
        [sys.executable, "-c", SMOKE], cwd=tree, env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        sys.exit(f"{label}: the stand-in engine failed in {tree}:\n{proc.stderr[-3000:]}")
    builds = standin_engine.read_builds(builds_file)
    builds_file.unlink(missing_ok=True)
    print(
        f"{label}, tiny: DAG dry run {wall:.0f} s; stand-in: {len(builds)} engine build, "
        f"answers {proc.stdout.strip()}"
    )
    return {"builds": len(builds), "load_s": sum(b["load_s"] for b in builds), "wall_s": wall}


def _rule_text(tree: Path) -> str:
    return "\n".join(p.read_text() for p in (tree / "workflow" / "rules").glob("*.smk"))


def _checkpoints(tree: Path) -> set[str]:
    text = _rule_text(tree)
    return {
        line.split()[1].rstrip(":") for line in text.splitlines() if line.startswith("checkpoint ")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load-s", type=float, default=1.0, help="stand-in load time per build")
    parser.add_argument("--before-ref", default=BEFORE_REF, help="git ref of the before tree")
    parser.add_argument("--skip-before", action="store_true", help="measure this tree only")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parse_args(parser, load_s=0.0)
    root = Path(tempfile.mkdtemp(prefix="bench_llm_dag."))
    try:
        config = paper_on_sample(REPO, args.tiny)
        models = llm_models(config)
        ks = {name: e["ks"] for name, e in config["evaluation"]["experiments"].items()}
        print(
            f"paper config on the sample corpus: {len(models)} LLMs {sorted(models)}; ks {json.dumps(ks)}"
        )
        before = (
            None
            if args.skip_before
            else measure("before", args.before_ref, root, args.load_s, tiny=args.tiny)
        )
        batch = measure("batch", None, root, args.load_s, tiny=args.tiny)
        served = measure("served", None, root, args.load_s, served=True, tiny=args.tiny)
        was = f"{before[0]['load_s']:.0f} s" if before else "not measured"
        for prefix, runs in (("batch mode: ", batch), ("", served)):
            print(
                f"{prefix}engine builds: {runs[0]['builds']} for {len(models)} models; cached "
                f"re-run: {runs[1]['builds']} builds; simulated load {runs[0]['load_s']:.0f} s "
                f"(was {was})"
            )
    finally:
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
