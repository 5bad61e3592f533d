"""``splits lexicon``: score one lexicon from the shell, with no config or hypotheses file.

    splits lexicon --topic Soccer --target jewish --other black goal "penalty kick"

The posts are a finished run (``--run``, its results folder; the default ``results``), any posts
table (``--posts``) or a local copy of the authors' data (``--release``). The lexicon is the
remaining words: each argument one entry (an argument with spaces is a phrase), or typed text
with "double-quoted phrases" separated by commas, as the sandbox reads it. Prints the lift@k
table, triviality and the top posts; ``--format csv`` the lift rows with triviality, ``--format
json`` everything. Settings come from the run's config (``--config`` another), the schema's
defaults, and ``--set name=value`` (the names of ``splits.api.KEYWORDS``).
"""

from __future__ import annotations

import argparse
import json
import sys

import polars as pl
import yaml

from splits.api.settings import KEYWORDS
from splits.errors import ConfigError

TOP_POSTS = 10
TEXT_CHARS = 160  # of a post in the text format
#: lift columns the text format leaves out (the header says them once)
HEADER_COLUMNS = ("topic", "demographic_A", "demographic_B", "target", "lexicon", "matching_posts")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--run", help="a finished run's results folder (default: results)")
    where.add_argument(
        "--posts",
        help="a posts table (.parquet, .csv, .jsonl) with post_id, text, demographic and topic",
    )
    where.add_argument("--release", help="a local copy of the authors' data (ecaplan/splits)")
    parser.add_argument("--topic", required=True, help="the topic of the pool")
    parser.add_argument("--target", required=True, help="the group the lexicon is said to mark")
    parser.add_argument("--other", required=True, help="the group it is compared with")
    parser.add_argument("--config", help="a config file for the settings (default: the run's)")
    parser.add_argument(
        "--set",
        action="append",
        metavar="NAME=VALUE",
        help="override a setting, the value read as YAML (e.g. list_size=2000, mode=release, "
        "k_fractions=[0.01,0.1])",
    )
    parser.add_argument("--top", type=int, default=TOP_POSTS, help="top posts shown")
    parser.add_argument(
        "--format",
        choices=("text", "csv", "json"),
        default="text",
        help="text to read; csv (the lift rows) or json (everything) for scripts",
    )
    parser.add_argument("lexicon", nargs="+", help='words and "quoted phrases"')


def lexicon_text(arguments: list[str]) -> str:
    """The typed lexicon of the command's arguments: an argument with a double quote, comma or
    semicolon is typed text; any other is one entry (a phrase when it holds a space)."""
    parts = []
    for argument in arguments:
        typed = any(c in argument for c in '",;')
        parts.append(argument if typed or " " not in argument.strip() else f'"{argument}"')
    return " ".join(parts)


def overrides(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or name.strip() not in KEYWORDS:
            raise ConfigError(
                f"--set {pair}: expected NAME=VALUE with NAME one of {', '.join(sorted(KEYWORDS))}"
            )
        try:
            out[name.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ConfigError(f"--set {pair}: the value is not YAML") from None
    return out


def open_source(args: argparse.Namespace, settings: dict):
    import splits.api as sp

    if args.posts:
        return sp.open_posts(args.posts, args.config, **settings)
    if args.release:
        return sp.open_release(args.release, args.config, **settings)
    return sp.open_run(args.run or "results", args.config, **settings)


def score(args: argparse.Namespace) -> dict:
    """The lexicon's lift rows, triviality and top posts."""
    if args.top < 0:
        raise ConfigError("--top: must be 0 or more")
    settings = overrides(args.set or [])
    source = open_source(args, settings)
    pool = source.pool(args.topic, args.target, args.other)
    entries = pool.entries(lexicon_text(args.lexicon))
    lift = pool.lift(entries, args.target)
    try:
        triviality = pool.triviality(entries, args.target)
        note = ""
    except ConfigError as err:  # no identity words or no encoder: the rest still answers
        triviality, note = None, str(err)
    posts = pool.ranked(entries, top=args.top)
    return {
        "pool": pool,
        "entries": entries,
        "lift": lift,
        "triviality": triviality,
        "note": note,
        "posts": posts,
    }


def run(args: argparse.Namespace) -> int:
    answer = score(args)
    lift, triviality = answer["lift"], answer["triviality"]
    value = None if triviality is None else triviality["triviality"][0]
    covered = [] if triviality is None else triviality["identity_words_covered"][0].to_list()
    out = sys.stdout
    if args.format == "csv":
        rows = lift.with_columns(
            pl.col("lexicon").list.join("; "),
            pl.lit(value, dtype=pl.Float64).alias("triviality"),
            pl.lit("; ".join(covered)).alias("identity_words_covered"),
        )
        out.write(rows.write_csv())
        return 0
    if args.format == "json":
        document = {
            "topic": args.topic,
            "target": args.target,
            "other": args.other,
            "lexicon": answer["entries"],
            "lift": lift.to_dicts(),
            "triviality": value,
            "identity_words_covered": covered,
            "triviality_note": answer["note"] or None,
            "top_posts": answer["posts"].to_dicts(),
        }
        out.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
        return 0
    write_text(out, args, answer, value, covered)
    return 0


def write_text(out, args, answer: dict, value: float | None, covered: list[str]) -> None:
    lift, posts, pool = answer["lift"], answer["posts"], answer["pool"]
    out.write(
        f"{args.topic}: {args.target} against {args.other}; lexicon: "
        f"{', '.join(answer['entries'])}\n"
    )
    if lift.height:
        matching = f"matching posts: {lift['matching_posts'][0]}"
    else:  # no row to read it from: count the list's matching posts
        hits = pool.ranked(answer["entries"], padded=False).height
        matching = f"matching posts in the ranked list: {hits}"
    out.write(f"{matching} of {pool.posts().height}\n\n")
    with pl.Config(
        tbl_cols=-1,
        tbl_rows=-1,
        tbl_width_chars=200,
        tbl_hide_dataframe_shape=True,
        tbl_hide_column_data_types=True,
    ):
        if lift.height:
            out.write(f"lift@k\n{lift.drop(*HEADER_COLUMNS)}\n\n")
        else:
            out.write(
                "lift@k: no row (the ranked list holds no target post, or every k reads no "
                "post)\n\n"
            )
        if value is not None:
            out.write(
                f"triviality: {value:.4f} (identity words covered: "
                f"{', '.join(covered) or 'none'})\n\n"
            )
        else:
            out.write(f"triviality: not computed ({answer['note'] or 'no token to encode'})\n\n")
        if posts.height:
            shown = posts.select(
                "rank",
                "group",
                "score",
                pl.col("text").str.replace_all(r"\s+", " ").str.slice(0, TEXT_CHARS),
            )
            with pl.Config(fmt_str_lengths=TEXT_CHARS):
                out.write(f"top {posts.height} posts\n{shown}\n")
