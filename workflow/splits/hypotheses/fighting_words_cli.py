"""``splits fighting-words``: the Fighting Words z-score table of two groups of any posts table.

A Parquet table with a text column and a group column (a run's ``topic_posts.parquet``, with
``demographic`` and ``topic``, or any other): group A is the rows whose group is one of the
``--group-a`` values, group B those of ``--group-b`` (``--topic``: only that topic's rows). A post
listed under both groups (the same ``--id-column`` value; where the table has that column) is left
out, as the pipeline's pools leave it out, and counted in the log; one listed under two values
of the same group counts once. The settings are the config's
``hypotheses.fighting_words`` (``--config`` files, later ones over earlier ones, the schema's
defaults for the rest; ``config/fighting_words_convokit.yaml`` is ConvoKit's setup). With the
informative prior, the background is ``--background``'s texts, or else every row of the two groups
in the table (every topic). The table (``fighting_words_table``): ngram, count_a, count_b, prior,
z; largest z (group A's) first.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import polars as pl

from splits.config.schema import read_config_file, validate_config
from splits.config.settings import settings_from_config
from splits.errors import InputError
from splits.hypotheses.fighting_words import fighting_words_scores, fighting_words_table
from splits.hypotheses.settings import FightingWordsSection
from splits.io import write_parquet, write_text

log = logging.getLogger(__name__)

FORMATS = (".csv", ".parquet")
SHOWN_VALUES = 20  # values listed in an error naming a group or topic that is not there


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--posts", type=Path, required=True, help="the posts table (Parquet), one text per row"
    )
    parser.add_argument(
        "--group-a",
        action="append",
        required=True,
        help="a value of the group column whose rows are group A (repeat for several)",
    )
    parser.add_argument(
        "--group-b",
        action="append",
        required=True,
        help="a value of the group column whose rows are group B (repeat for several)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        help="the z-score table: .csv or .parquet (ngram, count_a, count_b, prior, z)",
    )
    parser.add_argument("--group-column", default="demographic", help="the groups' column")
    parser.add_argument("--text-column", default="text", help="the texts' column")
    parser.add_argument(
        "--id-column",
        default="post_id",
        help="posts with the same value under both groups are left out (where the table has it)",
    )
    parser.add_argument("--topic", help="only the rows whose topic column holds this topic")
    parser.add_argument(
        "--background",
        type=Path,
        help="the informative prior's background (Parquet with the text column); default: every "
        "row of the two groups in --posts",
    )
    parser.add_argument(
        "--config",
        type=Path,
        action="append",
        help="a config file (repeat: later files over earlier ones); its "
        "hypotheses.fighting_words, the schema's defaults for every key no file sets",
    )


def _merged(base: dict, overlay: dict) -> dict:
    """``overlay`` over ``base``, section by section (as Snakemake merges --configfile files)."""
    out = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def section_from_files(paths: list[Path]) -> FightingWordsSection:
    config: dict = {}
    for path in paths:
        config = _merged(config, read_config_file(path))
    return settings_from_config(FightingWordsSection, validate_config(config))


def _shown(values: list) -> str:
    values = sorted(str(v) for v in values)
    more = f", ... ({len(values)} in all)" if len(values) > SHOWN_VALUES else ""
    return ", ".join(values[:SHOWN_VALUES]) + more


def _require_columns(frame: pl.LazyFrame, path: Path, columns: list[str]) -> None:
    names = frame.collect_schema().names()
    for column in columns:
        if column not in names:
            raise InputError(f"{path}: no column {column!r} (columns: {_shown(names)})")


def _check_values(wanted: list[str], present: set[str], what: str, column: str) -> None:
    missing = [v for v in wanted if v not in present]
    if missing:
        raise InputError(
            f"{what} {', '.join(map(repr, missing))} not in column {column!r} "
            f"(values: {_shown(list(present))})"
        )


def group_texts(args: argparse.Namespace) -> tuple[list[str], list[str], list[str], int]:
    """Group A's and group B's texts (ordered by id where there is one), the background's, and
    the number of posts left out because both groups list them."""
    group, text = args.group_column, args.text_column
    table = pl.scan_parquet(args.posts)
    _require_columns(table, args.posts, [group, text] + (["topic"] if args.topic else []))
    overlap = set(args.group_a) & set(args.group_b)
    if overlap:
        raise InputError(f"--group-a and --group-b both name {', '.join(sorted(overlap))}")
    has_ids = args.id_column in table.collect_schema().names()
    wanted = args.group_a + args.group_b
    rows = (
        table.select(
            pl.col(group).cast(pl.String),
            pl.col(text).cast(pl.String).fill_null(""),
            *([pl.col("topic").cast(pl.String)] if args.topic else []),
            *([pl.col(args.id_column).cast(pl.String)] if has_ids else []),
        )
        .filter(pl.col(group).is_in(wanted))
        .collect()
    )
    _check_values(wanted, set(rows[group].unique().to_list()), "group", group)
    background = rows[text].to_list()
    if args.topic:
        topics = set(table.select(pl.col("topic").cast(pl.String)).unique().collect()["topic"])
        _check_values([args.topic], topics, "topic", "topic")
        rows = rows.filter(pl.col("topic") == args.topic)
    in_both = 0
    if has_ids:
        # a post under two values of one group counts once; under both groups, not at all
        rows = rows.with_columns(pl.col(group).is_in(args.group_a).alias("_is_a")).unique(
            subset=[args.id_column, "_is_a"], keep="first", maintain_order=True
        )
        sides = rows.group_by(args.id_column).agg(pl.col("_is_a").n_unique().alias("sides"))
        shared = sides.filter(pl.col("sides") > 1)[args.id_column]
        in_both = shared.len()
        rows = rows.filter(~pl.col(args.id_column).is_in(shared.implode())).sort(args.id_column)
    texts_a = rows.filter(pl.col(group).is_in(args.group_a))[text].to_list()
    texts_b = rows.filter(pl.col(group).is_in(args.group_b))[text].to_list()
    for name, texts, values in (("A", texts_a, args.group_a), ("B", texts_b, args.group_b)):
        if not texts:
            where = f" on topic {args.topic!r}" if args.topic else ""
            raise InputError(f"group {name} ({', '.join(values)}) has no posts{where}")
    return texts_a, texts_b, background, in_both


def run(args: argparse.Namespace) -> int:
    if args.out.suffix.lower() not in FORMATS:
        raise InputError(f"--out {args.out}: write .csv or .parquet")
    for what, path in (("posts table", args.posts), ("background", args.background)):
        if path is not None and not path.is_file():
            raise InputError(f"{what} {path} does not exist")
    section = section_from_files(args.config or [])
    texts_a, texts_b, background, in_both = group_texts(args)
    if args.background is not None:
        table = pl.scan_parquet(args.background)
        _require_columns(table, args.background, [args.text_column])
        column = pl.col(args.text_column).cast(pl.String).fill_null("")
        background = table.select(column).collect()[args.text_column].to_list()
        if section.prior != "informative":
            log.info("--background: not read by the %s prior", section.prior)
    result = fighting_words_scores(texts_a, texts_b, section, background)
    frame = fighting_words_table(result)
    if args.out.suffix.lower() == ".csv":
        write_text(frame.write_csv(), args.out)
    else:
        write_parquet(frame, args.out)
    log.info(
        "%d n-grams from %d posts of group A and %d of group B (%d listed under both left out, "
        "prior %s) -> %s",
        frame.height,
        len(texts_a),
        len(texts_b),
        in_both,
        section.prior,
        args.out,
    )
    return 0
