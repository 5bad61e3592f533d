"""``splits sample`` and ``splits export``: the sampling stage family's commands (thin: parse,
build the settings, call the plain functions of ``draw``, ``validate``, ``diagnostics`` and
``export``, write the outputs). The rules pass their settings as ``--settings JSON``; by hand,
``--config FILE`` reads the same settings from a config file (schema defaults filled)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import polars as pl

from splits.config.settings import add_settings_arguments, settings_from_args
from splits.errors import ConfigError, InputError
from splits.health import log_findings, write_findings
from splits.io import write_json, write_parquet, write_text
from splits.privacy import hash_authors, protect_post_ids, resolve_salt
from splits.sampling.diagnostics import (
    dual_membership,
    empty_pair_findings,
    no_rows_error,
    overlap_findings,
    summary,
    warn_empty_pairs,
)
from splits.sampling.draw import sample_quadruplets
from splits.sampling.export import category_counts, dataset_card, pair_counts, write_tables
from splits.sampling.pools import members_of_topic_posts, read_members, split_pools
from splits.sampling.settings import ExportSettings, SampleSettings
from splits.sampling.validate import validate_quadruplets

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- splits sample


def configure_sample(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic-posts", required=True, help="results/topics/topic_posts.parquet")
    parser.add_argument("--out", required=True, help="quadruplets.parquet")
    parser.add_argument("--summary", help="JSON summary (rows, per pair, switched share)")
    parser.add_argument(
        "--users",
        nargs="+",
        default=[],
        help="each group's users.parquet (demographic, author, percentile): with --thresholds, "
        "the posts of authors at or above both groups' thresholds are left out of the pair",
    )
    parser.add_argument("--thresholds", help="thresholds.json (with --users)")
    parser.add_argument(
        "--members-from-topic-posts",
        action="store_true",
        help="a group's members are the authors of its topic posts (data without group-ness "
        "percentiles, such as the authors' released posts)",
    )
    parser.add_argument("--health", help="run-health findings (JSON; splits.health)")
    add_settings_arguments(parser)


def _read_topic_posts(path: str) -> pl.DataFrame:
    try:
        topic_posts = pl.read_parquet(path)
    except (OSError, pl.exceptions.PolarsError) as err:
        raise ConfigError(f"{path}: cannot read topic posts ({err})") from err
    missing = {"post_id", "text", "demographic", "topic", "category"} - set(topic_posts.columns)
    if missing:
        raise ConfigError(f"{path}: missing columns {sorted(missing)}")
    return topic_posts


def run_sample(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, SampleSettings)
    topic_posts = _read_topic_posts(args.topic_posts)
    if bool(args.users) != bool(args.thresholds):
        raise ConfigError("splits sample: --users and --thresholds go together")
    if "author" not in topic_posts.columns:
        raise ConfigError(f"{args.topic_posts}: missing column 'author'")
    if args.users:
        members = read_members(args.users, args.thresholds)
    elif args.members_from_topic_posts:
        members = members_of_topic_posts(topic_posts)
    else:
        members = None
        log.warning(
            "no --users/--thresholds: only posts found in both pools of a pair are left out, not "
            "every post of an author at or above both groups' thresholds"
        )
    k = settings.k
    quadruplets = sample_quadruplets(topic_posts, settings, members=members)
    pools = split_pools(topic_posts, members=members)
    if quadruplets.height == 0:
        raise no_rows_error(pools, k)
    problems = validate_quadruplets(quadruplets, topic_posts, k, members)
    if problems:
        for problem in problems:
            log.error("invalid quadruplets: %s", problem)
        return 1
    empty_pairs = warn_empty_pairs(quadruplets, pools, k)
    filled = quadruplets.select("description", "demographic_A", "demographic_B").unique()
    empty_splits = pools.join(
        filled, on=["description", "demographic_A", "demographic_B"], how="anti"
    ).height
    keys = sorted(topic_posts.get_column("demographic").unique().to_list())
    dual = dual_membership(members, pools, keys)
    overlaps = overlap_findings(dual)
    log_findings(overlaps, log)
    for pair, d in dual.items():
        if d["posts_left_out"]:
            log.info(
                "pair %s: %s dual members, %d topic posts left out",
                pair,
                d["dual_members"],
                d["posts_left_out"],
            )
    write_parquet(quadruplets, args.out)
    if args.summary:
        write_json(
            {
                **summary(quadruplets),
                "empty_pairs": empty_pairs,
                "empty_splits": empty_splits,
                "dual_membership": dual,
            },
            args.summary,
        )
    if args.health:
        write_findings(args.health, overlaps + empty_pair_findings(empty_pairs, k))
    log.info(
        "%d quadruplets (k=%d) in %d of %d (topic, A, B) splits, all invariants hold",
        len(quadruplets),
        k,
        pools.height - empty_splits,
        pools.height,
    )
    return 0


# --------------------------------------------------------------------------- splits export


def configure_export(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quadruplets", required=True, help="results/dataset/quadruplets.parquet")
    parser.add_argument("--topic-posts", required=True, help="results/topics/topic_posts.parquet")
    parser.add_argument("--out-dir", required=True, help="export folder")
    add_settings_arguments(parser)


def run_export(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, ExportSettings)
    for path in (args.quadruplets, args.topic_posts):
        if not Path(path).exists():
            raise ConfigError(f"{path}: export input does not exist")
    salt, development = resolve_salt(settings.salt_env)
    if development:
        log.warning(
            "no salt in $%s (nor export.salt): hashing usernames with the public development salt; "
            "set %s before exporting real data",
            settings.salt_env,
            settings.salt_env,
        )
    quadruplets = pl.read_parquet(args.quadruplets)
    if quadruplets.height == 0:
        raise InputError(f"{args.quadruplets}: no quadruplets; an empty dataset is not exported")
    topic_posts = pl.read_parquet(args.topic_posts)
    if "author" not in topic_posts.columns:
        raise ConfigError(f"{args.topic_posts}: no author column")
    out = Path(args.out_dir)
    quadruplets = protect_post_ids(quadruplets, "quadruplets", settings.post_ids, salt)
    topic_posts = protect_post_ids(topic_posts, "topic_posts", settings.post_ids, salt)
    write_parquet(quadruplets, out / "quadruplets.parquet")
    write_parquet(hash_authors(topic_posts, salt), out / "topic_posts.parquet")
    by_topic = pair_counts(quadruplets)
    by_category = category_counts(by_topic)
    write_tables(out, {"counts_by_topic": by_topic, "counts_by_category": by_category})
    card = dataset_card(quadruplets, topic_posts, by_category, settings, development)
    write_text(card, out / "README.md")
    if not settings.license:
        log.warning(
            "the dataset card states no licence: set export.license (and export.source) to the "
            "terms you release the dataset under"
        )
    log.info(
        "exported %d quadruplets and %d topic posts to %s", len(quadruplets), len(topic_posts), out
    )
    return 0


# subcommand of ``splits`` -> (configure_parser, run); the table in splits.cli names this module
SUBCOMMANDS = {
    "sample": (configure_sample, run_sample),
    "export": (configure_export, run_export),
}
