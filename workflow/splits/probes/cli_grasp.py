"""``splits probe grasp``: IRR, XRR and GAI of rater groups with permutation tests (GRASP), on
rating tables (``--ratings``) or on the evaluation's LLM judges (``--judgments``)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import polars as pl

from splits.config.settings import add_settings_arguments, settings_from_args
from splits.errors import ConfigError
from splits.io import write_json, write_parquet
from splits.probes.cli_common import bar_plot, filled_entry, json_arg, plain, significance_mark
from splits.probes.settings import JUDGE_MIN_RATERS, GraspJudgesSettings, GraspSettings

log = logging.getLogger("splits.probe")
INPUTS_KEY = "probes.grasp.inputs"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--ratings", nargs="+", help="long tables (CSV/TSV/Parquet) or DICES JSON")
    source.add_argument(
        "--judgments",
        nargs="+",
        help="classification Parquet files of `splits classify` (one per TM, CM, k) or an "
        "experiment's predictions.parquet: LLM judges as raters; writes ratings.parquet and "
        "raters.parquet next to the results",
    )
    parser.add_argument(
        "--raters", nargs="*", default=[], help="rater attribute tables (rater + attributes)"
    )
    parser.add_argument(
        "--columns",
        type=json_arg,
        default={},
        help="with --ratings: how to read the tables, as JSON with the reading keys of a "
        "probes.grasp.inputs entry (item_col, rater_col, rating_col, attribute_cols, "
        "missing_ratings, binarize_at); unset keys take the schema's defaults",
    )
    parser.add_argument(
        "--judge-kinds",
        type=json_arg,
        default={},
        help="with --judgments: JSON {model: kind} (e.g. builtin / llm) for the tm_kind and "
        "cm_kind attributes",
    )
    parser.add_argument(
        "--judge-undetected",
        choices=["category", "missing"],
        default="category",
        help="with --judgments: an unreadable CM answer is the rating 'undetected' (category) "
        "or a missing rating (missing)",
    )
    parser.add_argument("--outdir", required=True, help="folder of the probe's tables")
    add_settings_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from splits.agreement import matrix_from_long
    from splits.probes.grasp import (
        dsi_table,
        grasp,
        null_histograms,
        overall_summary,
        rater_groups,
    )

    settings = settings_from_args(args, GraspJudgesSettings if args.judgments else GraspSettings)
    min_raters = JUDGE_MIN_RATERS if args.judgments else settings.min_raters
    smoothing, fdr = float(settings.smoothing), float(settings.fdr)
    if smoothing <= 0:
        raise ConfigError("probes.grasp.smoothing: must be above 0")
    if not 0 < fdr < 1:
        raise ConfigError("probes.grasp.fdr: must lie between 0 and 1")
    out = Path(args.outdir)
    read_counts: dict[str, dict[str, int]] = {}
    if args.judgments:
        if args.raters:
            raise ConfigError("--raters: not used with --judgments (judges get their attributes)")
        ratings, attributes = judge_ratings(args)
        write_parquet(ratings, out / "ratings.parquet")
        write_parquet(attributes, out / "raters.parquet")
    else:
        ratings, attributes, read_counts = table_ratings(args)
    matrix = matrix_from_long(ratings)
    summary = overall_summary(matrix)
    schema_groups = {"group": pl.String, "n_raters": pl.Int64, "reason": pl.String}
    skipped: list[dict] = []
    groups = []
    if attributes is not None:
        attributes = attributes.filter(pl.col("rater").is_in(list(matrix.raters)))
        groups, skipped = rater_groups(matrix.raters, attributes, min_raters, settings.max_order)
    else:
        log.info("grasp: no rater attributes: overall alpha only")
    result = grasp(matrix, groups, settings.permutations, settings.seed, smoothing)
    dsi = dsi_table(result.groups, fdr)
    summary |= {
        "read": read_counts,
        "n_groups": result.groups.height,
        "skipped_groups": skipped,
        "permutations": settings.permutations,
        "smoothing": smoothing,
        "fdr": fdr,
        "dsi": dsi.to_dicts(),
    }
    write_parquet(result.groups, out / "groups.parquet")
    write_parquet(dsi, out / "dsi.parquet")
    write_parquet(result.nulls, out / "nulls.parquet")
    write_parquet(pl.DataFrame(skipped, schema=schema_groups), out / "skipped_groups.parquet")
    write_json(plain(summary), out / "summary.json")
    bar_plot(
        result.groups["group"].to_list(),
        result.groups["gai"].to_list(),
        out / "gai.png",
        f"group association index (alpha over all raters {summary['alpha_all']:.3f}); "
        f"* q < {fdr:g}, ** q < {fdr / 5:g}, *** q < {fdr / 50:g} (permutation test, "
        "Benjamini-Hochberg); dashed: GAI = 1, no association",
        "GAI = IRR / XRR",
        "rater group (attribute=value)",
        marks=[significance_mark(q, fdr) for q in result.groups["q_gai"].to_list()],
        reference=1.0,
    )
    null_histograms(
        result,
        str(out / "null_histograms.png"),
        f"permutation nulls ({settings.permutations} permutations of the rater attributes); "
        "red: observed, dashed: null median",
    )
    log.info(
        "grasp: %d raters, %d groups, alpha=%.3f",
        len(matrix.raters),
        result.groups.height,
        summary["alpha_all"],
    )
    return 0


def judge_ratings(args: argparse.Namespace) -> tuple[pl.DataFrame, pl.DataFrame]:
    """--judgments: the evaluation's CM judgments as (long ratings, judge attributes)."""
    from splits.probes.judges import judge_attributes, judgments_to_ratings, read_judgments

    if not isinstance(args.judge_kinds, dict):
        raise ConfigError("--judge-kinds: must be a JSON object {model: kind}")
    judgments = read_judgments(args.judgments)
    ratings = judgments_to_ratings(judgments, args.judge_undetected)
    log.info(
        "grasp: %d judgments by %d judges (%d ratings kept, undetected as %s)",
        judgments.height,
        ratings["rater"].n_unique(),
        ratings.height,
        args.judge_undetected,
    )
    return ratings, judge_attributes(judgments, args.judge_kinds)


def reading_columns(spec: dict):
    """``--columns`` as RatingColumns, the schema's defaults filled."""
    from splits.probes.grasp_ratings import RatingColumns

    if not isinstance(spec, dict):
        raise ConfigError("--columns: must be a JSON object")
    entry = filled_entry(INPUTS_KEY, {"ratings": ["-"], **spec})
    return RatingColumns(
        item=entry["item_col"],
        rater=entry["rater_col"],
        rating=entry["rating_col"],
        attributes=tuple(entry["attribute_cols"]),
        missing_values=tuple(str(v) for v in entry["missing_ratings"]),
        binarize_at=None if entry["binarize_at"] is None else float(entry["binarize_at"]),
    )


def table_ratings(
    args: argparse.Namespace,
) -> tuple[pl.DataFrame, pl.DataFrame | None, dict[str, dict[str, int]]]:
    """--ratings (and --raters): rating tables (long, or DICES-style with the rater attributes
    on every row), optional rater attribute tables; also the read counts per file."""
    from splits.probes.grasp_ratings import dices_ratings, rating_rows, read_table

    columns = reading_columns(args.columns)
    if columns.attributes and args.raters:
        raise ConfigError(
            "--raters: give rater attributes either on the rating rows (attribute_cols) or in "
            "rater tables, not both"
        )
    frames, attribute_frames, counts = [], [], {}
    for path in args.ratings:
        if path.endswith(".json"):
            table = dices_ratings(path)
            frames.append(table)
            counts[path] = {"rows": table.height, "kept": table.height}
            continue
        ratings, attributes, counts[path] = rating_rows(read_table(path), columns, path)
        frames.append(ratings)
        if attributes is not None:
            attribute_frames.append(attributes)
        log.info("grasp: %s: %s", path, counts[path])
    ratings = pl.concat(frames)
    if attribute_frames:
        return ratings, pl.concat(attribute_frames).unique(maintain_order=True), counts
    if not args.raters:
        return ratings, None, counts
    attributes = pl.concat(
        [read_table(p).with_columns(pl.all().cast(pl.String)) for p in args.raters],
        how="diagonal",
    ).rename({columns.rater: "rater"} if columns.rater != "rater" else {})
    return ratings, attributes, counts
