"""``splits model-batch``: every TM (``tm``, rule evaluation_tm_batch) or CM (``cm``, rule
evaluation_cm_batch) prompt of one model through one engine into its response cache, and the
throughput table of those jobs' reports (``throughput``, rule evaluation_throughput)."""

from __future__ import annotations

import argparse
import logging

from splits.config.settings import add_settings_arguments, settings_from_args
from splits.config.templates import CM_SLOTS, TM_SLOTS
from splits.errors import ConfigError
from splits.evaluation.common import display_names, load_template, model_registry
from splits.evaluation.metrics import write_csv
from splits.evaluation.model_batch import (
    BLOCK_PROMPTS,
    overlong_findings,
    parse_plan,
    read_reports,
    run_model_batch,
    throughput_markdown,
    throughput_table,
)
from splits.evaluation.settings import CMSettings, TMPromptSettings, TMSettings
from splits.evaluation.theorize import TM_REQUIRED
from splits.health import log_findings, write_findings
from splits.io import write_json, write_text

log = logging.getLogger(__name__)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="role", required=True)
    for role, what in (("tm", "TM"), ("cm", "CM")):
        batch = sub.add_parser(
            role,
            help=f"every {what} prompt of one model into its cache (settings: "
            f"evaluation.max_post_chars, evaluation.{role}_sampling, seed"
            + ("; evaluation.tm_raw_prompt with --template)" if role == "tm" else ")"),
        )
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
        batch.add_argument("--demographics", help="demographics file (display names)")
        batch.add_argument(
            "--block-prompts",
            type=int,
            default=BLOCK_PROMPTS,
            help="prompts per engine call (whole evaluation rows with all their plan items)",
        )
        batch.add_argument("--cache", required=True, help="LLM response cache (SQLite) path")
        batch.add_argument("--report", required=True, help="JSON throughput report")
        add_settings_arguments(batch)
    table = sub.add_parser("throughput", help="the per-model throughput table of batch reports")
    table.add_argument("--reports", nargs="*", default=[], help="batch report JSON files")
    table.add_argument("--out-csv", required=True, help="throughput table (CSV)")
    table.add_argument("--out-md", required=True, help="throughput table (Markdown)")
    table.add_argument(
        "--health", help="run-health file: the batch jobs that skipped over-long prompts"
    )


def run_batch(args: argparse.Namespace) -> int:
    if args.role == "tm":
        settings = settings_from_args(args, TMPromptSettings if args.template else TMSettings)
    else:
        settings = settings_from_args(args, CMSettings)
    if args.block_prompts < 1:
        raise ConfigError("--block-prompts: must be positive")
    plan = parse_plan(args.plan, args.role)
    names = display_names(args.demographics)
    if args.role == "tm":
        template = load_template(args.template, TM_SLOTS, TM_REQUIRED) if args.template else None
    else:
        if not args.template:
            raise ConfigError("--template: a CM batch needs the CM prompt template")
        template = load_template(args.template, CM_SLOTS, CM_SLOTS)
    registry = model_registry(args.model, args.model_spec)
    report = run_model_batch(
        args.role,
        args.model,
        registry,
        plan,
        template,
        names,
        settings,
        args.cache,
        args.block_prompts,
    )
    write_json(report, args.report)
    log.info("%s batch of %s: %s", args.role.upper(), args.model, report)
    return 0


def run_throughput(args: argparse.Namespace) -> int:
    reports = read_reports(args.reports)
    table = throughput_table(reports)
    write_csv(table, args.out_csv)
    write_text(throughput_markdown(table), args.out_md)
    if args.health:
        findings = overlong_findings(reports)
        log_findings(findings)
        write_findings(args.health, findings)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.role == "throughput":
        return run_throughput(args)
    return run_batch(args)
