"""``splits group-splits``: the groups of an experiment's TMs compared per split (rule
evaluation_group_splits)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from splits.config.settings import add_settings_arguments, settings_from_args
from splits.errors import ConfigError
from splits.evaluation.common import read_rows
from splits.evaluation.group_splits import (
    gaps_markdown,
    group_splits_markdown,
    group_splits_table,
    parse_ordered_groups,
    read_experiment_predictions,
    theory_lookup,
)
from splits.evaluation.metrics import write_csv
from splits.evaluation.report import plot_group_gaps
from splits.evaluation.settings import GroupSplitsSettings
from splits.io import write_text

log = logging.getLogger(__name__)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", required=True, help="evaluation rows Parquet")
    parser.add_argument(
        "--predictions", required=True, help="the experiment's predictions.parquet (splits metrics)"
    )
    parser.add_argument("--theories", nargs="+", required=True, help="theories of the groups' TMs")
    parser.add_argument(
        "--groups", required=True, help='JSON list in config order: [["strong", ["a", "b"]], ...]'
    )
    parser.add_argument(
        "--experiment", required=True, help="experiment name (evaluation.experiments key)"
    )
    parser.add_argument(
        "--top", type=int, default=10, help="ranked keys per split in group_gaps.md"
    )
    parser.add_argument("--out-dir", required=True, help="folder of the group tables and plots")
    add_settings_arguments(parser)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, GroupSplitsSettings)
    rows = read_rows(args.rows)
    predictions = read_experiment_predictions(args.predictions, rows, args.rows)
    groups = parse_ordered_groups(args.groups, set(predictions["tm"].unique()))
    if args.top < 1:
        raise ConfigError("--top: must be positive")
    table, scores_of = group_splits_table(predictions, groups, settings.seed)
    if not table.height:
        raise ConfigError(
            f"experiment {args.experiment}: no row was answered by every TM of two groups"
        )
    theories = theory_lookup(args.theories)
    out = Path(args.out_dir)
    write_csv(table, out / "group_splits.csv")
    write_text(group_splits_markdown(table, scores_of, args.experiment), out / "group_splits.md")
    write_text(
        gaps_markdown(table, scores_of, groups, predictions, theories, args.experiment, args.top),
        out / "group_gaps.md",
    )
    plots = out / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    plot_group_gaps(table, plots / "group_gaps.png", f"experiment {args.experiment}")
    log.info("group splits of %s: %d table rows", args.experiment, table.height)
    return 0
