"""``splits topic-splits``: the BM25 topic splits, one subcommand per job of
``workflow/rules/topics.smk`` (shard | stats | global-stats | score | merge), and ``run``, every
step in this process."""

from __future__ import annotations

import argparse
import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from splits.config.definitions import load_topics
from splits.config.settings import add_settings_arguments, settings_from_args
from splits.errors import ConfigError
from splits.health import log_findings, write_findings
from splits.io import write_parquet, write_text
from splits.topics.findings import (
    TopicSplitResult,
    finish_splits,
    no_samplable_topic_error,
    post_members,
)
from splits.topics.in_process import split_shards_result
from splits.topics.merge import (
    best_hits,
    counts_table,
    retrieved_counts,
    topic_posts_table,
    topics_frame,
)
from splits.topics.scoring import score_shard
from splits.topics.settings import (
    TopicMergeSettings,
    TopicShardScoreSettings,
    TopicShardsSettings,
    TopicShardStatsSettings,
    TopicSplitSettings,
    check_settings,
    shard_bytes,
)
from splits.topics.shards import (
    cut_shards,
    iter_union,
    no_posts_error,
    read_seeds,
    read_thresholds,
    write_shards,
)
from splits.topics.statistics import (
    global_statistics,
    read_counts,
    read_global_stats,
    read_postings,
    shard_counts,
    topic_terms,
    write_counts,
    write_global_stats,
    write_postings,
)

log = logging.getLogger(__name__)


def parse_key_paths(values: Sequence[str]) -> dict[str, list[str]]:
    """Each demographic's D_d files from ``key=path`` pairs or paths: ``.../<key>/posts.parquet``,
    or the parts ``.../<key>/posts/<bucket>.parquet`` of ingest.buckets > 1 (the key is the
    folder's name). A key given with several paths has them all as its parts."""
    out: dict[str, list[str]] = {}
    for value in values:
        key, sep, path = value.partition("=")
        if not sep:
            where = Path(value)
            path = value
            part = where.name != "posts.parquet" and where.parent.name == "posts"
            key = (where.parent.parent if part else where.parent).name
        if path in out.get(key, []):
            raise ConfigError(f"--demographic-posts: {path} of demographic {key!r} given twice")
        out.setdefault(key, []).append(path)
    return out


def _existing(flag: str, paths: Sequence[str]) -> list[Path]:
    for path in paths:
        if not Path(path).exists():
            raise ConfigError(f"{flag}: {path} does not exist")
    return [Path(p) for p in paths]


def write_outputs(result: TopicSplitResult, topics, demographics, args: argparse.Namespace) -> None:
    table = result.topic_posts
    write_parquet(topics_frame(topics), args.out_topics)
    write_parquet(table, args.out_topic_posts)
    write_text(counts_table(table, topics, demographics).write_csv(), args.out_counts)
    if args.out_retrieval:
        write_text(result.retrieval.write_csv(), args.out_retrieval)
    if args.out_seed_share:
        write_text(result.seed_share.write_csv(), args.out_seed_share)
    log_findings(result.findings, log)
    if args.out_health:
        write_findings(args.out_health, result.findings)
    log.info(
        "%d topic posts over %d topics and %d demographics",
        len(table),
        table.get_column("topic").n_unique(),
        len(demographics),
    )


def configure_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    posts_help = (
        "D_d posts files (results/demographics/<d>/posts.parquet or its parts"
        " <d>/posts/<bucket>.parquet), each sorted by post_id"
    )
    shard = sub.add_parser("shard", help="union of the D_d above threshold, cut into shards")
    shard.add_argument(
        "--demographic-posts", nargs="+", required=True, metavar="[KEY=]FILE", help=posts_help
    )
    shard.add_argument(
        "--thresholds", required=True, help="thresholds.json {demographic: percentile}"
    )
    _add_demographics_file(shard)
    shard.add_argument("--out-dir", required=True, help="writes <00000>.parquet ... and plan.json")
    shard.add_argument(
        "--allow-empty",
        action="store_true",
        help="the files are one posts bucket's parts (ingest.buckets > 1): no post at or above "
        "the thresholds writes no shard and an empty plan, not an error (global-stats stops the "
        "run when no bucket has a shard)",
    )
    add_settings_arguments(shard)

    stats = sub.add_parser("stats", help="one shard's BM25 statistics")
    stats.add_argument("--shard", required=True, help="a shard file of `shard`")
    stats.add_argument("--out-vocab", required=True, help="vocabulary Parquet (group, tok, df)")
    stats.add_argument("--out-counts", required=True, help="documents and lengths (JSON)")
    stats.add_argument(
        "--topics-file",
        required=True,
        help="the run's topic list (YAML or JSON): the postings of its terms are kept",
    )
    stats.add_argument(
        "--out-postings",
        required=True,
        help="the shard's postings of the topics' terms (Parquet: group, term, doc, tf)",
    )
    stats.add_argument(
        "--out-lengths",
        required=True,
        help="the shard's document lengths (Parquet: group, doc_len)",
    )
    add_settings_arguments(stats)

    reduce = sub.add_parser("global-stats", help="the corpus statistics over every shard")
    # none at all: every posts bucket's cut was empty (shard --allow-empty), a one-line error
    reduce.add_argument(
        "--vocab", nargs="*", required=True, help="stats vocabularies, in shard order"
    )
    reduce.add_argument("--counts", nargs="*", required=True, help="stats counts, in shard order")
    reduce.add_argument(
        "--topics-file", required=True, help="topic list (our YAML or release JSON)"
    )
    reduce.add_argument("--out", required=True, help="global statistics (JSON)")

    score = sub.add_parser("score", help="one shard's top K per (demographic, topic)")
    score.add_argument("--shard", required=True, help="the posts shard to score (Parquet)")
    score.add_argument(
        "--global-stats",
        required=True,
        help="corpus statistics of all shards (the stats step's output)",
    )
    score.add_argument("--topics-file", required=True, help="the run's topic list (YAML or JSON)")
    score.add_argument(
        "--postings", required=True, help="the shard's postings (the stats step's --out-postings)"
    )
    score.add_argument(
        "--lengths", required=True, help="the shard's lengths (the stats step's --out-lengths)"
    )
    score.add_argument("--out", required=True, help="the shard's hits (Parquet)")
    add_settings_arguments(score)

    merge = sub.add_parser("merge", help="top K over the shards, ranks, the pooled cut")
    merge.add_argument("--hits", nargs="+", required=True, help="every shard's hits")
    merge.add_argument("--shards", nargs="+", required=True, help="every shard file (texts)")
    merge.add_argument("--demographics", nargs="+", required=True, help="demographic keys")
    merge.add_argument("--topics-file", required=True, help="the run's topic list (YAML or JSON)")
    _add_demographics_file(merge)
    _add_outputs(merge)
    add_settings_arguments(merge)

    whole = sub.add_parser("run", help="every step in this process (shards in a temporary folder)")
    whole.add_argument(
        "--demographic-posts", nargs="+", required=True, metavar="[KEY=]FILE", help=posts_help
    )
    whole.add_argument(
        "--thresholds",
        required=True,
        help="self-ID thresholds (thresholds.json of the demographics stage)",
    )
    whole.add_argument("--topics-file", required=True, help="the run's topic list (YAML or JSON)")
    _add_demographics_file(whole)
    _add_outputs(whole)
    add_settings_arguments(whole)


def _add_demographics_file(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--demographics-file",
        help="demographics file (seed subreddits: the seed share and "
        "topics.seed_subreddit_posts exclude)",
    )


def _add_outputs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out-topics", required=True, help="topics.parquet")
    parser.add_argument("--out-topic-posts", required=True, help="topic_posts.parquet")
    parser.add_argument("--out-counts", required=True, help="counts CSV (topic x demographic)")
    parser.add_argument(
        "--out-retrieval", help="per (topic, demographic): retrieved, pool, cut (CSV)"
    )
    parser.add_argument("--out-seed-share", help="per demographic: seed-subreddit share (CSV)")
    parser.add_argument("--out-health", help="run-health findings of the stage (JSON)")


#: each subcommand's settings (global-stats reads none: the index mode comes with the counts)
SETTINGS = {
    "shard": TopicShardsSettings,
    "stats": TopicShardStatsSettings,
    "score": TopicShardScoreSettings,
    "merge": TopicMergeSettings,
    "run": TopicSplitSettings,
}


def _shard_files(
    args: argparse.Namespace, out_dir: Path, settings: TopicShardsSettings | TopicSplitSettings
) -> dict:
    posts_files = parse_key_paths(args.demographic_posts)
    exclude = None
    if settings.seed_subreddit_posts == "exclude":
        if not args.demographics_file:
            raise ConfigError(
                "topics.seed_subreddit_posts exclude needs --demographics-file (seed subreddits)"
            )
        exclude = read_seeds(args.demographics_file)
    allow_empty = getattr(args, "allow_empty", False)  # `run` cuts the whole union
    union = iter_union(
        posts_files, read_thresholds(args.thresholds), exclude=exclude, one_bucket=allow_empty
    )
    pieces = cut_shards(union, settings.shard_posts, shard_bytes(settings.shard_mb))
    return write_shards(pieces, out_dir, allow_empty=allow_empty)


def run(args: argparse.Namespace) -> int:
    settings = None
    if args.action in SETTINGS:
        settings = settings_from_args(args, SETTINGS[args.action])
        check_settings(settings)
    if args.action == "shard":
        _shard_files(args, Path(args.out_dir), settings)
    elif args.action == "stats":
        (shard,) = _existing("--shard", [args.shard])
        terms = topic_terms(load_topics(args.topics_file))
        counts = shard_counts(pl.read_parquet(shard), settings.index, terms)
        write_counts(counts, settings.index, args.out_vocab, args.out_counts)
        write_postings(counts, args.out_postings, args.out_lengths)
    elif args.action == "global-stats":
        if not args.vocab and not args.counts:
            raise no_posts_error()
        vocab = _existing("--vocab", args.vocab)
        files = _existing("--counts", args.counts)
        if len(vocab) != len(files):
            raise ConfigError("--vocab and --counts: one of each per shard, in the same order")
        parts = [read_counts(v, c) for v, c in zip(vocab, files, strict=True)]
        modes = {mode for mode, _ in parts}
        if len(modes) != 1:
            raise ConfigError(f"--counts: shards computed for different indexes {sorted(modes)}")
        terms = topic_terms(load_topics(args.topics_file))
        stats = global_statistics([counts for _, counts in parts], terms)
        write_global_stats(stats, modes.pop(), args.out)
    elif args.action == "score":
        (shard,) = _existing("--shard", [args.shard])
        index, stats = read_global_stats(*_existing("--global-stats", [args.global_stats]))
        topics = load_topics(args.topics_file)
        bm25 = settings.bm25.params()
        postings = read_postings(*_existing("--postings/--lengths", [args.postings, args.lengths]))
        hits = score_shard(
            pl.read_parquet(shard), stats, index, topics, settings.top_k, bm25, postings
        )
        write_parquet(hits, args.out)
    elif args.action == "merge":
        topics = load_topics(args.topics_file)
        hit_files = _existing("--hits", args.hits)
        best = best_hits((pl.scan_parquet(p) for p in hit_files), settings.top_k)
        retrieved = retrieved_counts(pl.scan_parquet(p) for p in hit_files)
        posts = pl.scan_parquet(_existing("--shards", args.shards))
        table = topic_posts_table(best, posts, topics, settings.drop_fraction)
        demographics = sorted(args.demographics)
        seeds = read_seeds(args.demographics_file)
        members = post_members(posts, table)
        result = finish_splits(
            table, best, retrieved, topics, demographics, settings, seeds, members
        )
        if topics and result.topic_posts.height == 0:  # a dataset of nothing is no success
            raise no_samplable_topic_error(table, demographics, members, settings.sample_k)
        write_outputs(result, topics, demographics, args)
    else:  # run
        topics = load_topics(args.topics_file)
        out_dir = Path(args.out_topic_posts).parent
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".topic-shards-", dir=out_dir) as tmp:
            plan = _shard_files(args, Path(tmp), settings)
            shards = [pl.scan_parquet(Path(tmp) / f"{s['shard']}.parquet") for s in plan["shards"]]
            demographics = sorted(parse_key_paths(args.demographic_posts))
            seeds = read_seeds(args.demographics_file)
            result = split_shards_result(shards, topics, settings, demographics, seeds)
        write_outputs(result, topics, demographics, args)
    return 0
