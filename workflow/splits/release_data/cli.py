"""``splits release-data``: the authors' released posts (``ecaplan/splits``, a local copy) as the
pipeline's tables (``topic-posts``: the rule ``release_topic_posts``; ``demographic-posts``: the
demographics stage's per-group post files, by hand). The library is ``splits.release_data.load``.
"""

from __future__ import annotations

import argparse
import logging

import polars as pl

from splits.config.definitions import load_topics
from splits.config.settings import add_settings_arguments, settings_from_args
from splits.health import Finding, log_findings, write_findings
from splits.io import write_json
from splits.release_data.load import BATCH_ROWS, HUB_ID, V1, V2, demographic_posts, topic_posts
from splits.release_data.settings import ReleaseDataSettings

log = logging.getLogger(__name__)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    for name, help_text in (
        ("topic-posts", "high_groupness_by_topic (v3) as the topic posts table"),
        ("demographic-posts", "all_seed_user_posts / high_groupness_user_posts as group posts"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument(
            "--dataset",
            required=True,
            help="a local copy (release_data.path): save_to_disk folder, folder of "
            f"Parquet/JSONL files, or {HUB_ID} (cache)",
        )
        p.add_argument("--batch-rows", type=int, default=BATCH_ROWS, help="rows read at once")
        p.add_argument("--report", help="counts (JSON)")
        p.add_argument("--health", help="run-health findings of the import (JSON)")
        if name == "topic-posts":
            p.add_argument("--topics-file", help="topic list naming each topic's category")
            p.add_argument("--out", required=True, help="topic_posts.parquet")
        else:
            p.add_argument(
                "--dataset-config", choices=(V1, V2), default=V2, help="the dataset's config"
            )
            p.add_argument("--min-percentile", type=float, default=None, help="v2 cut")
            p.add_argument("--out-dir", required=True, help="writes <demographic>/posts.parquet")
        add_settings_arguments(p)


def run(args: argparse.Namespace) -> int:
    from splits.privacy import resolve_salt

    settings = settings_from_args(args, ReleaseDataSettings)
    salt, development = resolve_salt(settings.salt_env)
    if development:
        log.warning(
            "%s is unset: usernames hashed with the public development salt (set it for real data)",
            settings.salt_env,
        )
    if args.action == "topic-posts":
        categories = {}
        if args.topics_file:
            categories = {t.topic: t.category for t in load_topics(args.topics_file)}
        counts = topic_posts(
            args.dataset,
            args.out,
            salt,
            settings.demographics,
            settings.topics,
            categories,
            args.batch_rows,
        )
    else:
        counts = demographic_posts(
            args.dataset,
            args.dataset_config,
            args.out_dir,
            salt,
            settings.demographics,
            args.min_percentile,
            args.batch_rows,
        )
    findings = []
    if development:
        findings.append(
            Finding(
                "release_data",
                "development_salt",
                "usernames",
                "the released usernames were hashed with the public development salt, so anyone "
                "can recompute the hash of a known username",
                f"set the environment variable {settings.salt_env} (export.salt_env) to a secret "
                "salt",
            )
        )
    if args.action == "topic-posts" and args.topics_file:
        unknown = (
            pl.scan_parquet(args.out)
            .filter(pl.col("category").is_null())
            .select(pl.col("topic").n_unique())
            .collect()
            .item()
        )
        if unknown:
            findings.append(
                Finding(
                    "release_data",
                    "topics_not_in_topic_list",
                    "topics",
                    f"{unknown} topic(s) of the released posts are not in {args.topics_file} "
                    "(their category is empty)",
                    "set topics.file to the release's topics.json",
                )
            )
    log_findings(findings, log)
    if args.health:
        write_findings(args.health, findings)
    log.info("release data: %s", counts)
    if args.report:
        write_json(counts, args.report)
    return 0
