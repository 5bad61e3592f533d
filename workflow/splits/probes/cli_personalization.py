"""``splits probe personalization``: implicit personalization (docs/method.md §3.2). The model
rewrites each post's group cues for another group; kept rewrites and their originals go through
the same tasks, and paired tests compare the answers."""

from __future__ import annotations

import argparse
import json
import logging
import math
from pathlib import Path

import polars as pl

from splits.config.settings import add_settings_arguments, settings_from_args
from splits.errors import ConfigError
from splits.io import write_json, write_parquet
from splits.probes.cli_common import (
    add_group_arguments,
    add_model_arguments,
    json_arg,
    load,
    model_spec,
    plain,
    probe_groups,
)
from splits.probes.settings import personalization_settings

log = logging.getLogger("splits.probe")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", required=True, help="topic_posts.parquet")
    parser.add_argument(
        "--rewrite-prompt", required=True, help="template with {source}, {target}, {text}"
    )
    parser.add_argument(
        "--judge-prompt",
        default=None,
        help="with a judge model: judge template with {source}, {target}, {original}, {rewrite}",
    )
    parser.add_argument(
        "--judge-model-spec",
        type=json_arg,
        default=None,
        help="the registry entry (JSON) of the settings' judge_model; with --config it may be "
        "left out",
    )
    parser.add_argument("--outdir", required=True, help="folder of the probe's tables")
    add_model_arguments(parser)
    add_group_arguments(parser)
    add_settings_arguments(parser)


def judge_model(args: argparse.Namespace) -> str | None:
    """probes.personalization.judge_model of the settings (it decides which keys they hold)."""
    if args.config is not None:
        from splits.config.schema import load_config

        return load_config(args.config)["probes"]["personalization"]["judge_model"]
    try:
        values = json.loads(args.settings)
    except json.JSONDecodeError:
        return None  # settings_from_args says what is wrong
    return values.get("judge_model") if isinstance(values, dict) else None


def read_tasks(specs: list) -> list:
    """probes.personalization.tasks as Tasks (prompt templates read, schema defaults filled)."""
    from splits.config.schema import validate_config
    from splits.probes.common import read_prompt
    from splits.probes.personalization import Task

    tasks = []
    for i, spec in enumerate(specs):
        for key in ("name", "kind", "prompt"):
            if key not in spec:
                raise ConfigError(
                    f"probes.personalization.tasks[{i}].{key}: required key is missing"
                )
        if spec["kind"] not in ("interval", "similarity"):
            raise ConfigError(
                f"probes.personalization.tasks[{i}].kind: must be interval or similarity"
            )
        entry = validate_config({"probes": {"personalization": {"tasks": [dict(spec)]}}})
        entry = entry["probes"]["personalization"]["tasks"][0]
        scale = tuple(float(v) for v in entry["scale"])
        tasks.append(
            Task(
                spec["name"],
                spec["kind"],
                read_prompt(spec["prompt"], ("text",), ("topic",)),
                scale,
            )
        )
    return tasks


def judged(args, settings, model, checked: pl.DataFrame, groups) -> pl.DataFrame:
    """The rewrite judge's verdicts on the kept rewrites (empty columns without a judge)."""
    from splits.llm.base import SamplingParams
    from splits.probes.common import read_prompt
    from splits.probes.personalization import apply_judge, judge_requests

    if not settings.judge_model:
        return checked.with_columns(
            pl.lit(None, dtype=pl.String).alias("judge_response"),
            pl.lit(None, dtype=pl.Boolean).alias("judge_group"),
            pl.lit(None, dtype=pl.Boolean).alias("judge_content"),
        )
    if not args.judge_prompt:
        raise ConfigError(
            "probes.personalization.judge_prompt: the judge needs a prompt (--judge-prompt)"
        )
    spec = model_spec(args, settings.judge_model, args.judge_model_spec)
    template = read_prompt(args.judge_prompt, ("source", "target", "original", "rewrite"))
    params = SamplingParams(
        temperature=0.0, max_tokens=settings.judge_max_tokens, seed=settings.seed
    )
    rows, calls = judge_requests(checked, groups, template, params)
    judge = (
        model
        if settings.judge_model == settings.model
        else load(settings.judge_model, spec, args.cache)
    )
    log.info("personalization: judge %s on %d rewrites", settings.judge_model, len(calls))
    answers = [c.text for c in judge.generate(calls)]
    return apply_judge(checked, rows, answers)


def run(args: argparse.Namespace) -> int:
    from splits.llm.base import SamplingParams
    from splits.probes.common import read_prompt, topic_post_items
    from splits.probes.personalization import (
        check_rewrites,
        clean_rewrite,
        paired_tests,
        parse_interval,
        rewrite_requests,
        task_requests,
    )

    settings = settings_from_args(args, personalization_settings(judge_model(args)))
    spec = model_spec(args, settings.model, args.model_spec)
    if settings.flips < 1000:
        raise ConfigError("probes.personalization.flips: at least 1000 sign flips")
    groups = probe_groups(args.demographics, settings.probes)
    tasks = read_tasks(settings.tasks)
    items = topic_post_items(args.input, settings.max_items or 10**9, settings.seed)
    model = load(settings.model, spec, args.cache)
    temperature = float(settings.temperature)
    rewrite_params = SamplingParams(
        temperature=temperature, max_tokens=settings.max_tokens, seed=settings.seed
    )
    template = read_prompt(args.rewrite_prompt, ("source", "target", "text"))
    pairs, requests = rewrite_requests(
        items, groups, template, rewrite_params, settings.probes.max_chars
    )
    log.info("personalization: %d rewrites of %d posts", len(requests), items.height)
    rewrites = [clean_rewrite(c.text) for c in model.generate(requests)]
    checked = check_rewrites(pairs, rewrites, groups, float(settings.min_similarity))
    checked = judged(args, settings, model, checked, groups)
    task_params = SamplingParams(
        temperature=temperature, max_tokens=settings.task_max_tokens, seed=settings.seed
    )
    topics = dict(items.select("item_id", "topic").iter_rows())
    keys, requests = task_requests(checked, tasks, task_params, topics)
    texts = [c.text for c in model.generate(requests)]
    scales = {t.name: t.scale for t in tasks}
    kinds = {t.name: t.kind for t in tasks}
    values = [
        parse_interval(text, scales[name]) if kinds[name] == "interval" else None
        for text, name in zip(texts, keys["task"].to_list(), strict=True)
    ]
    responses = keys.with_columns(
        pl.Series("response", texts, dtype=pl.String), pl.Series("value", values, dtype=pl.Float64)
    )
    n_groups = sum(1 for g in groups if g.cues)
    tau = float(settings.tau)
    tests = paired_tests(responses, tasks, settings.flips, tau, settings.seed, n_groups)
    out = Path(args.outdir)
    write_parquet(checked, out / "rewrites.parquet")
    write_parquet(responses, out / "responses.parquet")
    write_parquet(tests, out / "tests.parquet")
    reasons = checked.filter(~pl.col("kept"))["reason"].value_counts().sort("reason").iter_rows()
    summary = {
        "model": settings.model,
        "n_posts": items.height,
        "n_rewrites": checked.height,
        "n_rewrites_kept": int(checked["kept"].sum()),
        "rewrites_dropped": dict(reasons),
        "judge_model": settings.judge_model,
        "n_groups": n_groups,
        "bonferroni_m": math.comb(n_groups, 2),
        "n_pairs_tested": tests.height,
        "n_significant": int((tests["p_bonferroni"].fill_null(1.0) < 0.05).sum()),
        "tau": tau,
        "flips": settings.flips,
    }
    write_json(plain(summary), out / "summary.json")
    log.info(
        "personalization: kept %d/%d rewrites", summary["n_rewrites_kept"], summary["n_rewrites"]
    )
    return 0
