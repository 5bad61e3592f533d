"""``splits metrics``: an experiment's accuracy tables with intervals and paired tests (rule
evaluation_metrics)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from splits.config.settings import add_settings_arguments, settings_from_args
from splits.evaluation.common import read_rows
from splits.evaluation.metrics import (
    CONFIG_COLUMNS,
    comparisons_markdown,
    comparisons_table,
    groups_table,
    load_predictions,
    parse_groups,
    splits_table,
    summary_table,
    tables_markdown,
    write_csv,
)
from splits.evaluation.settings import MetricsSettings
from splits.io import write_json, write_parquet, write_text

log = logging.getLogger(__name__)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", required=True, help="evaluation rows Parquet")
    parser.add_argument("--predictions", nargs="+", required=True, help="prediction Parquet files")
    parser.add_argument("--experiment", required=True, help="experiment name (titles)")
    parser.add_argument("--out-dir", required=True, help="folder of the tables")
    parser.add_argument(
        "--groups",
        required=True,
        help='the experiment\'s groups of TMs as JSON, e.g. {"strong": ["a", "b"]} ({} for none)',
    )
    add_settings_arguments(parser)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, MetricsSettings)
    rows = read_rows(args.rows)
    predictions = load_predictions(args.predictions, rows)
    out = Path(args.out_dir)
    summary = summary_table(predictions)
    splits = splits_table(predictions)
    comparisons = comparisons_table(predictions)
    groups = parse_groups(args.groups, set(predictions["tm"].unique()))
    grouped = groups_table(predictions, groups, settings.seed)
    write_csv(grouped, out / "groups.csv")
    write_parquet(predictions.sort(*CONFIG_COLUMNS, "eval_row"), out / "predictions.parquet")
    for name, frame in (("summary", summary), ("splits", splits), ("comparisons", comparisons)):
        write_csv(frame, out / f"{name}.csv")
    write_text(
        tables_markdown(args.experiment, rows.height, summary, splits, comparisons, grouped),
        out / "tables.md",
    )
    write_text(comparisons_markdown(args.experiment, comparisons), out / "comparisons.md")
    write_json(
        {
            "experiment": args.experiment,
            "rows": rows.height,
            "configurations": summary.select(*CONFIG_COLUMNS, "accuracy").to_dicts(),
        },
        out / "metrics.json",
    )
    log.info(
        "metrics of %s: %d configurations over %d rows",
        args.experiment,
        summary.height,
        rows.height,
    )
    return 0
