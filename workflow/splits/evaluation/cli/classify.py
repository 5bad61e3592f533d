"""``splits classify``: the CM's prediction for every evaluation row with the theories of one
(TM, k) (rule evaluation_classify)."""

from __future__ import annotations

import argparse
import logging

from splits.config.settings import add_settings_arguments, settings_from_args
from splits.config.templates import CM_SLOTS
from splits.evaluation.classify import classify_rows, read_theories, summary_counts
from splits.evaluation.common import display_names, load_template, model_registry, read_rows
from splits.evaluation.settings import CMSettings
from splits.io import write_json, write_parquet

log = logging.getLogger(__name__)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "the CM's predictions (settings: evaluation.max_post_chars, evaluation.cm_sampling, seed)"
    )
    parser.add_argument("--rows", required=True, help="evaluation rows Parquet (subsample)")
    parser.add_argument("--theories", required=True, help="theories Parquet of one (TM, k)")
    parser.add_argument("--model", required=True, help="CM name in the model registry")
    parser.add_argument(
        "--model-spec", required=True, help="the registry entry of --model, as JSON"
    )
    parser.add_argument("--template", required=True, help="CM prompt template file")
    parser.add_argument("--demographics", help="demographics file (display names)")
    parser.add_argument("--cache", help="LLM response cache (SQLite) path")
    parser.add_argument(
        "--cache-only",
        action="store_true",
        help="answer from the cache only (the model's batch job generated every request)",
    )
    parser.add_argument("--out", required=True, help="predictions Parquet")
    parser.add_argument("--summary", help="JSON with the counts (detected, undetected by reason)")
    add_settings_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from splits.llm import load_model

    settings = settings_from_args(args, CMSettings)
    rows = read_rows(args.rows)
    theories = read_theories(args.theories)
    template = load_template(args.template, CM_SLOTS, CM_SLOTS)
    names = display_names(args.demographics)
    registry = model_registry(args.model, args.model_spec)
    model = load_model(args.model, registry, cache_path=args.cache, cache_only=args.cache_only)
    try:
        predictions = classify_rows(rows, theories, model, template, names, args.model, settings)
    finally:
        model.close()
    write_parquet(predictions, args.out)
    counts = summary_counts(predictions)
    log.info("CM %s: %s", args.model, counts)
    if args.summary:
        write_json(counts, args.summary)
    return 0
