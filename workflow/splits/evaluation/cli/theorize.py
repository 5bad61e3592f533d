"""``splits theorize``: the evaluation subsample (``subsample``, rule evaluation_subsample) and one
theory per row from a TM (``generate``, rule evaluation_theorize)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import polars as pl

from splits.config.settings import add_settings_arguments, settings_from_args
from splits.config.templates import TM_SLOTS
from splits.errors import ConfigError
from splits.evaluation.common import display_names, load_template, model_registry, read_rows
from splits.evaluation.settings import SubsampleSettings, TMPromptSettings, TMSettings
from splits.evaluation.subsample import parse_rows_arg, subsample_dataset, topic_categories
from splits.evaluation.theorize import TM_REQUIRED, precomputed_frame, theorize_rows
from splits.io import write_json, write_parquet

log = logging.getLogger(__name__)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    sample = sub.add_parser(
        "subsample",
        help="seeded subsample of the quadruplets (settings: evaluation.dataset_layout, seed)",
    )
    sample.add_argument(
        "--dataset", required=True, help="quadruplets Parquet (pipeline or release v4)"
    )
    sample.add_argument("--rows", required=True, help="number of rows, or 'all'")
    sample.add_argument(
        "--topics", help="topics file: category of each topic when the input has none"
    )
    sample.add_argument("--out", required=True, help="the subsampled rows (Parquet)")
    sample.add_argument("--report", help="JSON with the counts")
    add_settings_arguments(sample)
    gen = sub.add_parser(
        "generate",
        help="one theory per row from a TM (settings: evaluation.max_post_chars, "
        "evaluation.tm_sampling, seed; evaluation.tm_raw_prompt with --template)",
    )
    gen.add_argument("--rows", required=True, help="evaluation rows Parquet")
    gen.add_argument("--model", required=True, help="TM name in the model registry")
    gen.add_argument("--model-spec", required=True, help="the registry entry of --model, as JSON")
    gen.add_argument("--k", type=int, required=True, help="calibration posts shown to the TM")
    gen.add_argument("--template", help="TM prompt template (builtin TMs need none)")
    gen.add_argument("--demographics", help="demographics file (display names)")
    gen.add_argument("--cache", help="LLM response cache (SQLite) path")
    gen.add_argument(
        "--cache-only",
        action="store_true",
        help="answer from the cache only (the model's batch job generated every request)",
    )
    gen.add_argument("--out", required=True, help="theories Parquet")
    add_settings_arguments(gen)


def tm_settings(args: argparse.Namespace) -> TMSettings:
    """A TM with a prompt template reads evaluation.tm_raw_prompt too (TMPromptSettings)."""
    return settings_from_args(args, TMPromptSettings if args.template else TMSettings)


def run_subsample(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, SubsampleSettings)
    rows = parse_rows_arg(args.rows)
    path = Path(args.dataset)
    if not path.exists():
        raise ConfigError(f"evaluation.dataset: input {path} does not exist")
    sample, counts = subsample_dataset(
        pl.read_parquet(path), str(path), topic_categories(args.topics), rows, settings
    )
    write_parquet(sample, args.out)
    if args.report:
        write_json(counts, args.report)
    log.info("subsample: %s", counts)
    return 0


def run_generate(args: argparse.Namespace) -> int:
    from splits.llm import load_model, model_spec

    settings = tm_settings(args)
    rows = read_rows(args.rows)
    if args.k < 0:
        raise ConfigError(f"evaluation ks: k={args.k} must be >= 0")
    registry = model_registry(args.model, args.model_spec)
    spec = model_spec(args.model, registry)
    if spec["backend"] == "precomputed":
        theories = precomputed_frame(rows, args.k, args.model, spec["theories"])
        write_parquet(theories, args.out)
        log.info("TM %s k=%d: %d precomputed theories", args.model, args.k, theories.height)
        return 0
    template = load_template(args.template, TM_SLOTS, TM_REQUIRED) if args.template else None
    names = display_names(args.demographics)
    model = load_model(args.model, registry, cache_path=args.cache, cache_only=args.cache_only)
    try:
        theories = theorize_rows(rows, args.k, model, template, names, args.model, settings)
    finally:
        model.close()
    write_parquet(theories, args.out)
    n_error = int((theories["finish_reason"] == "error").sum())
    n_empty = int((theories["theory"].str.strip_chars() == "").sum())
    log.info(
        "TM %s k=%d: %d theories (%d empty, %d errors)",
        args.model,
        args.k,
        theories.height,
        n_empty,
        n_error,
    )
    return 0


def run(args: argparse.Namespace) -> int:
    if args.action == "subsample":
        return run_subsample(args)
    return run_generate(args)
