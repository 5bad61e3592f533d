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

import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import polars as pl

from splits.errors import ConfigError
from splits.evaluation.classify import build_cm_requests, read_theories, theories_by_row
from splits.evaluation.common import PromptTemplate, read_rows
from splits.evaluation.metrics import markdown_table
from splits.evaluation.settings import CMSettings, TMSettings
from splits.evaluation.theorize import build_tm_requests
from splits.health import Finding
from splits.io import read_json

log = logging.getLogger(__name__)

#: prompts per ``generate`` call (``--block-prompts``): as many whole evaluation rows as fit,
#: each with all its items
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


def run_model_batch(
    role: str,
    model_name: str,
    registry: dict[str, Any],
    plan: dict[str, list[Any]],
    template: PromptTemplate | None,
    names: Mapping[str, str],
    settings: TMSettings | CMSettings,
    cache: str,
    block_prompts: int,
) -> dict[str, Any]:
    """Every prompt of ``plan`` (see :func:`parse_plan`) through one engine of ``model_name``,
    into its response cache; returns the job's report (counts, tokens, seconds)."""
    from splits.llm import load_model

    started = time.perf_counter()
    model = load_model(model_name, registry, cache_path=cache)
    try:
        for rows_path, values in plan.items():
            rows = read_rows(rows_path)
            if role == "tm":
                for block in row_blocks(rows, len(values), block_prompts):
                    requests = [
                        request
                        for k in values
                        for request in build_tm_requests(block, k, template, names, settings)
                    ]
                    labels = [
                        f"{rows_path} quadruplet {qid}, k={k}"
                        for k in values
                        for qid in block["quadruplet_id"]
                    ]
                    model.generate(requests, labels=labels)
            else:
                theories = [theories_by_row(read_theories(path), rows) for path in values]
                for block in row_blocks(rows, len(theories), block_prompts):
                    requests = [
                        request
                        for theory_of in theories
                        for request in build_cm_requests(
                            block, theory_of, template, names, settings
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
    return {
        "model": model_name,
        "role": role,
        "backend": model.spec["backend"],
        "rows_files": len(plan),
        "plan_items": sum(len(v) for v in plan.values()),
        **model.stats.as_dict(),
        "wall_s": time.perf_counter() - started,
    }


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


def read_reports(paths: Sequence[str]) -> list[dict[str, Any]]:
    """The batch jobs' reports; a ConfigError for a file that is not one, or for none."""
    reports = []
    for path in paths:
        report = read_json(path)
        if not isinstance(report, dict) or report.get("role") not in ROLES:
            raise ConfigError(f"{path}: not a model-batch report")
        reports.append(report)
    if not reports:
        raise ConfigError("--reports: no batch report given")
    return reports


def throughput_markdown(table: pl.DataFrame) -> str:
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
    return markdown_table(shown, "LLM throughput per model") + "\n" + note


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
