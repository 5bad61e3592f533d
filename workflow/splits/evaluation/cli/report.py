"""``splits report``: an experiment's plots for the Snakemake report (rule evaluation_report; it
reads no setting)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import polars as pl

from splits.errors import ConfigError
from splits.evaluation.report import plot_experiment

log = logging.getLogger(__name__)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--summary", required=True, help="summary.csv of an experiment")
    parser.add_argument("--splits", required=True, help="splits.csv of an experiment")
    parser.add_argument(
        "--experiment", required=True, help="experiment name (evaluation.experiments key)"
    )
    parser.add_argument("--out-dir", required=True, help="folder of the plots and tables")


def run(args: argparse.Namespace) -> int:
    for path in (args.summary, args.splits):
        if not Path(path).is_file():
            raise ConfigError(f"report input {path} does not exist")
    summary = pl.read_csv(args.summary)
    splits = pl.read_csv(args.splits, schema_overrides={"key": pl.String})
    out = Path(args.out_dir)
    plot_experiment(summary, splits, out, args.experiment)
    log.info("report plots of %s written to %s", args.experiment, out)
    return 0
