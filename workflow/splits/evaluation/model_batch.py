"""One job per evaluation model: every TM (or CM) prompt of one LLM across experiments, TMs and
ks, through one engine, into the response cache.

Loading a large model costs minutes on several GPUs, generating a few hundred answers much less,
so the workflow gives each LLM one batch job per role (``splits model-batch tm`` for its TM
prompts, ``splits model-batch cm`` for its CM prompts). The batch job builds the exact requests
the per-(rows, TM, k[, CM]) jobs will build, sends them to one engine (built only if some request
misses the cache) and commits every answer to the model's response cache; the per-row jobs then
read their answers from the cache (``--cache-only``) and write the theories and predictions.
Python TMs (``backend: python``, :mod:`splits.evaluation.custom_tm`) run the same way, their function
standing for the engine. A model that is both a TM and a CM gets two batch jobs: CM prompts need the theories of every TM,
including other models' TMs, so one job cannot serve both roles without a cycle in the DAG. In
served mode (``llm.serve``, :mod:`splits.llm.serve`) both jobs, and the model's jobs in other
stages, are clients of one server per model, so its engine is built once per run.

Prompts go to the engine a block of evaluation rows at a time, with every plan item (TM x k for
a CM; k for a TM) of those rows in the same ``generate`` call, sorted by prefix: the prompts of
one row across TMs and ks share the CM instructions and both post sets, and the engine's prefix
cache computes that part once. Memory grows with one block (``--block-prompts`` prompts), not
with the plan.

``splits model-batch throughput`` gathers the batch jobs' reports into one table per model (the
evaluation report's throughput table).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import polars as pl

from splits.config.templates import CM_SLOTS
from splits.errors import ConfigError
from splits.evaluation.classify import build_cm_requests, read_theories, theories_by_row
from splits.evaluation.common import (
    MAX_POST_CHARS,
    display_names,
    load_template,
    model_registry,
    read_rows,
)
from splits.health import Finding, log_findings, write_findings
from splits.io import read_json, write_json, write_text
from splits.llm.base import SamplingParams

log = logging.getLogger(__name__)

#: prompts per ``generate`` call: as many whole evaluation rows as fit, each with all its items
BLOCK_PROMPTS = 4096
ROLES = ("tm", "cm")


def parse_plan(text: str, role: str) -> dict[str, list[Any]]:
    """The plan (JSON list of ``{"rows": path, "k": k}`` for a TM, ``{"rows": path, "theories":
    path}`` for a CM) grouped by rows file, in order, without repeats."""
    try:
        items = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"--plan: not JSON ({err.msg})") from err
    field = "k" if role == "tm" else "theories"
    if not isinstance(items, list):
        raise ConfigError("--plan: must be a JSON list")
    grouped: dict[str, list[Any]] = {}
    for n, item in enumerate(items):
        if not isinstance(item, dict) or set(item) != {"rows", field}:
            raise ConfigError(f"--plan[{n}]: must be {{'rows': ..., '{field}': ...}}")
        value = item[field]
        if role == "tm" and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ConfigError(f"--plan[{n}].k: must be a non-negative integer")
        values = grouped.setdefault(str(item["rows"]), [])
        if value not in values:
            values.append(value)
    return grouped


def row_blocks(rows: pl.DataFrame, items: int, block_prompts: int) -> Iterator[pl.DataFrame]:
    """Consecutive slices of ``rows`` holding about ``block_prompts`` prompts of ``items`` each."""
    size = max(1, block_prompts // max(1, items))
    for start in range(0, rows.height, size):
        yield rows.slice(start, size)


def run_batch(args: argparse.Namespace) -> int:
    from splits.evaluation.theorize import TM_REQUIRED, TM_SLOTS, build_tm_requests
    from splits.llm import load_model

    plan = parse_plan(args.plan, args.role)
    names = display_names(args.demographics)
    params = SamplingParams(
        temperature=args.temperature, max_tokens=args.max_tokens, seed=args.seed
    )
    if args.role == "tm":
        template = load_template(args.template, TM_SLOTS, TM_REQUIRED) if args.template else None
    else:
        if not args.template:
            raise ConfigError("--template: a CM batch needs the CM prompt template")
        template = load_template(args.template, CM_SLOTS, CM_SLOTS)
    registry = model_registry(args.model, args.model_spec)
    started = time.perf_counter()
    model = load_model(args.model, registry, cache_path=args.cache)
    try:
        for rows_path, values in plan.items():
            rows = read_rows(rows_path)
            if args.role == "tm":
                for block in row_blocks(rows, len(values), args.block_prompts):
                    requests = [
                        request
                        for k in values
                        for request in build_tm_requests(
                            block, k, template, params, names, args.raw_prompt, args.max_post_chars
                        )
                    ]
                    labels = [
                        f"{rows_path} quadruplet {qid}, k={k}"
                        for k in values
                        for qid in block["quadruplet_id"]
                    ]
                    model.generate(requests, labels=labels)
            else:
                theories = [theories_by_row(read_theories(path), rows) for path in values]
                for block in row_blocks(rows, len(theories), args.block_prompts):
                    requests = [
                        request
                        for theory_of in theories
                        for request in build_cm_requests(
                            block, theory_of, template, params, names, args.max_post_chars
                        )
                    ]
                    labels = [
                        f"{rows_path} quadruplet {qid}, theories {path}"
                        for path in values
                        for qid in block["quadruplet_id"]
                    ]
                    model.generate(requests, labels=labels)
    finally:
        model.close()
    report = {
        "model": args.model,
        "role": args.role,
        "backend": model.spec["backend"],
        "rows_files": len(plan),
        "plan_items": sum(len(v) for v in plan.values()),
        **model.stats.as_dict(),
        "wall_s": time.perf_counter() - started,
    }
    write_json(report, args.report)
    log.info("%s batch of %s: %s", args.role.upper(), args.model, report)
    return 0


# --------------------------------------------------------------------------- throughput table

THROUGHPUT_COLUMNS = {
    "model": pl.String,
    "role": pl.String,
    "backend": pl.String,
    "prompts": pl.Int64,
    "cached": pl.Int64,
    "generated": pl.Int64,
    "prompt_tokens": pl.Int64,
    "output_tokens": pl.Int64,
    "generate_s": pl.Float64,
    "output_tokens_per_s": pl.Float64,
    "engine_builds": pl.Int64,
    "engine_load_s": pl.Float64,
    "prefix_cache_hit_rate": pl.Float64,
    "longest_prompt_tokens": pl.Int64,
    "context_tokens": pl.Int64,
    "overlong_skipped": pl.Int64,
    "wall_s": pl.Float64,
}


def throughput_table(reports: list[dict[str, Any]]) -> pl.DataFrame:
    """One row per (model, role) batch job, from the jobs' reports."""
    records = []
    for report in reports:
        record = {c: report.get(c) for c in THROUGHPUT_COLUMNS}
        record["prompts"] = report.get("requests")
        records.append(record)
    frame = pl.DataFrame(records, schema=THROUGHPUT_COLUMNS)
    return frame.sort("model", "role")


def run_throughput(args: argparse.Namespace) -> int:
    from splits.evaluation.metrics import markdown_table, write_csv

    reports = []
    for path in args.reports:
        report = read_json(path)
        if not isinstance(report, dict) or report.get("role") not in ROLES:
            raise ConfigError(f"{path}: not a model-batch report")
        reports.append(report)
    if not reports:
        raise ConfigError("--reports: no batch report given")
    table = throughput_table(reports)
    write_csv(table, args.out_csv)
    shown = table.with_columns(pl.col(pl.Float64).round(2))
    note = (
        "One row per LLM and role (TM or CM batch job) of the last run of that job: prompts "
        "answered, how many came from the response cache, tokens generated, output tokens per "
        "second of generation, engine builds (0 when every prompt was cached) and their load "
        "seconds, the engine's prefix-cache hit rate (tokens; empty where the backend does "
        "not report it), the longest prompt counted (tokens) against the model's context, and "
        "the prompts skipped as over-long (models.<name>.overlong_prompts: skip: their answers "
        "are empty).\n\n"
    )
    write_text(markdown_table(shown, "LLM throughput per model") + "\n" + note, args.out_md)
    if args.health:
        findings = overlong_findings(reports)
        log_findings(findings)
        write_findings(args.health, findings)
    return 0


def overlong_findings(reports: list[dict[str, Any]]) -> list[Finding]:
    """One run-health finding per batch job that skipped over-long prompts (their answers are
    empty: an empty theory, an unparsable CM answer)."""
    findings = []
    for report in reports:
        skipped = int(report.get("overlong_skipped") or 0)
        if not skipped:
            continue
        model, role = report.get("model"), str(report.get("role", "")).upper()
        findings.append(
            Finding(
                stage="evaluation_llm",
                code="overlong_prompts_skipped",
                subject=f"{model} {role}",
                message=(
                    f"{skipped} of {report.get('requests')} {role} prompts did not fit the "
                    f"context of {report.get('context_tokens')} tokens with their answer and were "
                    f"skipped (empty answers; longest prompt {report.get('longest_prompt_tokens')} "
                    "tokens)"
                ),
                fix=(
                    f"a longer context (models.{model}.max_model_len, or a model with one), "
                    "shorter prompts (evaluation.max_post_chars, smaller ks or max_tokens), or "
                    f"models.{model}.overlong_prompts: error to stop instead"
                ),
            )
        )
    return findings


# --------------------------------------------------------------------------- CLI


def configure_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="role", required=True)
    for role, what in (("tm", "TM"), ("cm", "CM")):
        batch = sub.add_parser(role, help=f"every {what} prompt of one model into its cache")
        batch.add_argument("--model", required=True, help=f"{what} name in the model registry")
        batch.add_argument(
            "--model-spec", required=True, help="the registry entry of --model, as JSON"
        )
        plan_help = (
            '[{"rows": rows.parquet, "k": 4}, ...]'
            if role == "tm"
            else '[{"rows": rows.parquet, "theories": theories.parquet}, ...]'
        )
        batch.add_argument("--plan", required=True, help=f"JSON list: {plan_help}")
        batch.add_argument("--template", help=f"{what} prompt template")
        if role == "tm":
            batch.add_argument(
                "--raw-prompt", action="store_true", help="send the prompt as a raw completion"
            )
        batch.add_argument("--demographics", help="demographics file (display names)")
        batch.add_argument(
            "--temperature", type=float, default=0.0, help="sampling temperature (0: greedy)"
        )
        batch.add_argument(
            "--max-tokens", type=int, default=400, help="most tokens generated per answer"
        )
        batch.add_argument("--seed", type=int, default=0, help="seed of the model's sampling")
        batch.add_argument(
            "--max-post-chars",
            type=int,
            default=MAX_POST_CHARS,
            help="characters kept of each post in the prompt",
        )
        batch.add_argument(
            "--block-prompts",
            type=int,
            default=BLOCK_PROMPTS,
            help="prompts per engine call (whole evaluation rows with all their plan items)",
        )
        batch.add_argument("--cache", required=True, help="LLM response cache (SQLite) path")
        batch.add_argument("--report", required=True, help="JSON throughput report")
    table = sub.add_parser("throughput", help="the per-model throughput table of batch reports")
    table.add_argument("--reports", nargs="*", default=[], help="batch report JSON files")
    table.add_argument("--out-csv", required=True, help="throughput table (CSV)")
    table.add_argument("--out-md", required=True, help="throughput table (Markdown)")
    table.add_argument(
        "--health", help="run-health file: the batch jobs that skipped over-long prompts"
    )


def run(args: argparse.Namespace) -> int:
    if args.role == "throughput":
        return run_throughput(args)
    if args.block_prompts < 1:
        raise ConfigError("--block-prompts: must be positive")
    return run_batch(args)
