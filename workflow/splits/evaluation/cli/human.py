"""``splits human``: human-validation annotation sheets (``export``) and the scores of filled
sheets (``score``). Command line only, not part of the workflow: ``export`` reads the run's
``seed`` from ``--config`` (or ``--settings``); the number of sheets is the study's own option."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from splits.config.settings import add_settings_arguments, settings_from_args
from splits.errors import ConfigError
from splits.evaluation.common import display_names, read_rows
from splits.evaluation.human import export_sheets, sheets_html
from splits.evaluation.human_scores import (
    combine_files,
    parse_sheet_args,
    read_filled,
    read_key,
    score_sheets,
)
from splits.evaluation.settings import HumanExportSettings
from splits.io import write_json, write_text

log = logging.getLogger(__name__)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    export = sub.add_parser("export", help="annotation sheets (HTML and CSV) and their key")
    export.add_argument("--rows", required=True, help="evaluation rows Parquet")
    export.add_argument(
        "--theories", nargs="+", required=True, help="theories Parquet of the TMs (one k)"
    )
    export.add_argument(
        "--predictions",
        nargs="+",
        required=True,
        help="predictions Parquet of those TMs (an experiment's predictions.parquet, or one file "
        "per TM): instances are rows where the strongest TM is right and the others wrong",
    )
    export.add_argument("--strong", help="the strongest TM (default: the most accurate given)")
    export.add_argument("--cm", help="the CM whose answers select instances (if several)")
    export.add_argument("--k", type=int, help="the calibration size (if the files hold several)")
    export.add_argument("--demographics", help="demographics file (display names)")
    export.add_argument("--sheets-per-model", type=int, default=38, help="paper: 38")
    export.add_argument("--out-dir", required=True, help="folder of the annotation sheets")
    add_settings_arguments(export)
    score = sub.add_parser("score", help="score filled sheets")
    score.add_argument("--key", required=True, help="key.csv written by export")
    score.add_argument(
        "--sheets",
        nargs="+",
        required=True,
        help="filled part1.csv / part2.csv files, as NAME=PATH (one annotator's files share "
        "the NAME) or PATH (annotator = file name)",
    )
    score.add_argument("--out", required=True, help="JSON: scores per model and agreement")
    score.add_argument("--out-csv", help="per (annotator, sheet) scores CSV")


def _read_parquets(paths: Sequence[str], what: str) -> list[pl.DataFrame]:
    frames = []
    for spec in paths:
        path = Path(spec)
        if not path.is_file():
            raise ConfigError(f"{what} {path} do not exist")
        frames.append(pl.read_parquet(path))
    return frames


def run_export(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, HumanExportSettings)
    if args.sheets_per_model < 1:
        raise ConfigError("--sheets-per-model: must be positive")
    part1, part2, key, counts = export_sheets(
        read_rows(args.rows),
        _read_parquets(args.theories, "theories"),
        _read_parquets(args.predictions, "predictions"),
        display_names(args.demographics),
        strong=args.strong,
        cm=args.cm,
        k_wanted=args.k,
        sheets_per_model=args.sheets_per_model,
        seed=settings.seed,
    )
    out = Path(args.out_dir)
    write_text(part1.write_csv(), out / "part1.csv")
    write_text(part2.write_csv(), out / "part2.csv")
    write_text(sheets_html(part1, part2), out / "sheets.html")
    write_text(key.write_csv(), out / "key.csv")
    write_json(counts, out / "export_report.json")
    log.info("human export: %s", counts)
    return 0


def run_score(args: argparse.Namespace) -> int:
    key = read_key(args.key)
    filled = {}
    for annotator, paths in parse_sheet_args(args.sheets).items():
        filled[annotator] = combine_files([(p, read_filled(p)) for p in paths], annotator)
    table, summary = score_sheets(key, filled)
    write_json(summary, args.out)
    if args.out_csv:
        write_text(table.write_csv(float_precision=4), args.out_csv)
    for model, entry in summary["models"].items():
        log.info("human scores of %s: %s", model, entry)
    log.info("agreement: %s", summary["agreement"])
    return 0


def run(args: argparse.Namespace) -> int:
    if args.action == "export":
        return run_export(args)
    return run_score(args)
