"""``splits groupness`` and ``splits selfid``: the demographics stage family's commands (thin:
parse, build the settings, call the plain functions of ``groupness`` and ``selfid``, write the
outputs). The rules pass their settings as ``--settings JSON``; by hand, ``--config FILE`` reads
the same settings from a config file (schema defaults filled)."""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from splits.config.definitions import THRESHOLDS_SUPPORT_KEY
from splits.config.schema import load_config
from splits.config.settings import add_settings_arguments, settings_from_args
from splits.config.templates import PROMPT_SLOTS, unknown_slot_error, unknown_slots
from splits.demographics.curves import match_counts, unsupported_error, with_counts
from splits.demographics.d_posts import (
    demographic_posts,
    table_rows,
    write_demographic_parts,
    write_demographic_posts,
)
from splits.demographics.groupness import (
    bucket_users,
    build_users,
    find_demographic,
    find_demographics,
    kept_subreddits,
    merge_bucket_users,
    read_bots,
)
from splits.demographics.selfid import (
    MATCH_MERGE_GROUP_ROWS,
    MATCH_MERGE_MIN_BATCH_ROWS,
    MATCH_MERGE_ROWS,
    OPT_IN_KEY,
    USER_SEARCH_COLUMNS,
    MatchTally,
    check_settings,
    comparison_markdown,
    plot_curve,
    search_matches,
    selfid_from_tally,
    sort_matches,
    summarise,
    support_findings,
    verify_matches,
)
from splits.demographics.settings import GroupnessSettings, SelfidFindSettings, SelfidSettings
from splits.errors import ConfigError
from splits.health import log_findings, write_findings
from splits.io import (
    MERGE_ROW_GROUP_ROWS,
    ParquetAppender,
    iter_parquet_slices,
    iter_sorted_merge,
    read_json,
    scan_posts,
    write_json,
    write_parquet,
    write_text,
)

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- splits groupness


def _add_demographic_arguments(parser: argparse.ArgumentParser, many: bool = False) -> None:
    """The graph's subreddits and the demographic (``many``: the demographics, one job for all
    of them), read by group-ness and its bucket jobs."""
    parser.add_argument("--subreddits", required=True, help="graph stage subreddits.parquet")
    parser.add_argument("--demographics", required=True, help="demographics file (YAML or JSON)")
    if many:
        parser.add_argument(
            "--demographic",
            nargs="+",
            required=True,
            help="demographic keys: the bucket is read once for all of them",
        )
    else:
        parser.add_argument("--demographic", required=True, help="demographic key")


def configure_groupness(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--posts", nargs="+", help="cleaned posts Parquet files (not with --bucket-users)"
    )
    _add_demographic_arguments(parser)
    parser.add_argument("--bots", default=None, help="known-bot list (one name per line)")
    parser.add_argument(
        "--out-users", required=True, help="users with their group-ness and percentile (Parquet)"
    )
    parser.add_argument(
        "--out-posts",
        help="the demographic's posts D_d (Parquet; with --posts; with --bucket-users each"
        " bucket's part is written by splits groupness-posts)",
    )
    parser.add_argument(
        "--out-report", required=True, help="counts of kept and dropped users and posts (JSON)"
    )
    parser.add_argument("--health", help="run-health findings (JSON; splits.health)")
    parser.add_argument(
        "--bucket-users",
        nargs="+",
        help="ingest.buckets > 1: every posts bucket's seed-user table (splits groupness-bucket);"
        " the users come from these and no post is read",
    )
    parser.add_argument(
        "--bucket-subreddits",
        nargs="+",
        help="every bucket's subreddit names (with --bucket-users)",
    )
    parser.add_argument(
        "--out-user-parts",
        nargs="+",
        help="with --bucket-users: each bucket's rows of the users table (Parquet; one per"
        " --bucket-users, in its order), what splits groupness-posts reads for that bucket",
    )
    add_settings_arguments(parser)


def _existing(flag: str, paths: list[str]) -> list[str]:
    for p in paths:
        if not Path(p).exists():
            raise ConfigError(f"{flag}: {p} does not exist")
    return list(paths)


def _check_groupness_inputs(args: argparse.Namespace) -> None:
    if bool(args.bucket_users) != bool(args.bucket_subreddits):
        raise ConfigError("--bucket-users and --bucket-subreddits: give both or neither")
    if args.bucket_users:
        if args.posts or args.out_posts:
            raise ConfigError(
                "--posts/--out-posts: not with --bucket-users (each bucket's part of D_d is"
                " written by splits groupness-posts)"
            )
        if args.out_user_parts:
            _paired("--out-user-parts", args.out_user_parts, "--bucket-users", args.bucket_users)
    elif args.out_user_parts:
        raise ConfigError("--out-user-parts: only with --bucket-users (one part per bucket)")
    elif not (args.posts and args.out_posts):
        raise ConfigError("--posts and --out-posts: required without --bucket-users")


def run_groupness(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, GroupnessSettings)
    _check_groupness_inputs(args)
    demographic = find_demographic(args.demographics, args.demographic)
    kept = kept_subreddits(args.subreddits)
    bots = read_bots(args.bots)
    if args.bucket_users:
        users_files = _existing("--bucket-users", args.bucket_users)
        names_files = _existing("--bucket-subreddits", args.bucket_subreddits)
        # the users table written as it is merged; D_d's size from the users' n_posts, without
        # reading a post (the parts come from splits groupness-posts)
        result = merge_bucket_users(
            users_files,
            names_files,
            kept,
            demographic,
            bots,
            settings,
            args.out_users,
            out_parts=args.out_user_parts,
        )
        n_posts = result.report["posts"]
    else:
        posts = scan_posts(_existing("--posts", args.posts))
        result = build_users(posts, kept, demographic, bots, settings)
        write_parquet(result.users, args.out_users)
        n_posts = write_demographic_posts(
            demographic_posts(posts, result.users, kept), args.out_posts, table_rows(posts)
        )
    result.report["posts"] = int(n_posts)
    write_json(result.report, args.out_report)
    if args.health:
        write_findings(args.health, result.findings)
    log.info(
        "%s: %d users, %d posts in D_d (dropped %d bots, %d top users)",
        demographic.key,
        result.report["users"],
        n_posts,
        result.report["dropped_known_bots"],
        result.report["dropped_top_users"],
    )
    return 0


def _check_users(users_file: str, columns: list[str]) -> None:
    """A demographic's users table (``splits groupness``'s output) must have the columns a job
    reads; a file without one of them (a bucket's seed-user table, say) is a one-line error."""
    schema = pl.read_parquet_schema(users_file)  # the footer, read once
    missing = [c for c in columns if c not in schema]
    if missing:
        raise ConfigError(
            f"--users: {users_file} has no column {', '.join(missing)} (the users table that"
            " splits groupness writes)"
        )


def _paired(flag: str, values: list[str], other_flag: str, others: list[str]) -> None:
    """A bucket command's per-demographic lists must pair up, one value of each per
    demographic, in the same order."""
    if len(values) != len(others):
        raise ConfigError(
            f"{flag}: {len(values)} given for {len(others)} {other_flag}: give one per"
            f" {other_flag.lstrip('-')}, in the same order"
        )


def configure_groupness_bucket(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--posts", required=True, help="one posts bucket by author (Parquet)")
    _add_demographic_arguments(parser, many=True)
    parser.add_argument(
        "--out-users",
        nargs="+",
        required=True,
        help="each demographic's seed users in the bucket, counts and scores (Parquet; one per"
        " --demographic, in its order)",
    )
    parser.add_argument(
        "--out-subreddits",
        nargs="+",
        required=True,
        help="the bucket's subreddit names (Parquet; the same table for each --demographic, one"
        " file per demographic, in its order)",
    )


def run_groupness_bucket(args: argparse.Namespace) -> int:
    _paired("--out-users", args.out_users, "--demographic", args.demographic)
    _paired("--out-subreddits", args.out_subreddits, "--demographic", args.demographic)
    demographics = find_demographics(args.demographics, args.demographic)
    posts = scan_posts(_existing("--posts", [args.posts]))
    tables, names = bucket_users(posts, kept_subreddits(args.subreddits), demographics)
    outputs = zip(demographics, tables, args.out_users, args.out_subreddits, strict=True)
    for demographic, users, users_path, names_path in outputs:
        # small row groups: the reduce merges every bucket's table, decoding one group of each
        write_parquet(users, users_path, row_group_size=MERGE_ROW_GROUP_ROWS)
        write_parquet(names, names_path)
        log.info("%s: %d seed users in %s", demographic.key, users.height, args.posts)
    return 0


def configure_groupness_posts(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--posts", required=True, help="one posts bucket by author (Parquet)")
    parser.add_argument(
        "--users",
        nargs="+",
        required=True,
        help="the demographics' users tables (splits groupness), one per demographic, or each"
        " one's part for this bucket (--out-user-parts: the job then reads its bucket's users"
        " only)",
    )
    parser.add_argument("--subreddits", required=True, help="graph stage subreddits.parquet")
    parser.add_argument(
        "--out",
        nargs="+",
        required=True,
        help="each demographic's part of D_d from this bucket, sorted by post id (Parquet; one"
        " per --users, in its order)",
    )


def run_groupness_posts(args: argparse.Namespace) -> int:
    _paired("--out", args.out, "--users", args.users)
    posts = scan_posts(_existing("--posts", [args.posts]))
    users_files = _existing("--users", args.users)
    columns = ["author", "groupness", "percentile"]
    for users_file in users_files:  # every table checked before the first part is written
        _check_users(users_file, columns)
    kept = kept_subreddits(args.subreddits)
    # the bucket's users of every demographic (the bucket's part of each users table)
    users = [pl.read_parquet(users_file, columns=columns) for users_file in users_files]
    counts = write_demographic_parts(posts, users, kept, args.out)
    for users_file, n_posts in zip(users_files, counts, strict=True):
        log.info("%d posts of D_d in %s (users %s)", n_posts, args.posts, users_file)
    return 0


# --------------------------------------------------------------------------- splits selfid


def configure_selfid(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    search = sub.add_parser("search", help="phrase search, verification, curve and threshold")
    search.add_argument("--users", required=True, help="results/demographics/<d>/users.parquet")
    source = search.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--posts",
        nargs="+",
        help="D_d: results/demographics/<d>/posts.parquet, or its parts posts/<bucket>.parquet",
    )
    source.add_argument(
        "--matches",
        nargs="+",
        help="ingest.buckets > 1: the phrase matches of every part of D_d (splits selfid find)",
    )
    search.add_argument(
        "--user-parts",
        nargs="+",
        help="with --matches: the users table's parts (results/demographics/<d>/users/<b>.parquet)"
        ", one per matches file in its order; each part's matches are counted in its own users",
    )
    search.add_argument("--demographics", required=True, help="demographics file")
    search.add_argument("--demographic", required=True, help="demographic key (demographics file)")
    search.add_argument(
        "--verifier-model", help="registry name (demographics.verifier_model; llm verifier)"
    )
    search.add_argument("--models-json", help="the model registry as JSON (llm verifier)")
    search.add_argument(
        "--prompt", help="verification prompt template (demographics.verifier_prompt; llm)"
    )
    search.add_argument("--llm-cache", help="SQLite response cache (llm)")
    search.add_argument("--out-matches", required=True, help="self-ID matches (Parquet)")
    search.add_argument("--out-curve", required=True, help="self-ID rate per group-ness bin")
    search.add_argument("--out-threshold", required=True, help="the demographic's threshold (JSON)")
    search.add_argument(
        "--out-comparison", required=True, help="self-ID against anti-self-ID rates (Parquet)"
    )
    search.add_argument(
        "--out-plot",
        help="self-ID curve plot (PNG); the pipeline draws them all in `selfid summary` instead",
    )
    add_settings_arguments(search)
    find = sub.add_parser(
        "find", help="the phrase matches of one part of D_d per demographic (unverified)"
    )
    find.add_argument(
        "--posts",
        nargs="+",
        required=True,
        help="a part of D_d (posts/<bucket>.parquet) per --demographic, in its order",
    )
    find.add_argument("--demographics", required=True, help="demographics file")
    find.add_argument(
        "--demographic", nargs="+", required=True, help="demographic keys (demographics file)"
    )
    find.add_argument(
        "--out",
        nargs="+",
        required=True,
        help="each part's phrase matches (Parquet; one per --demographic, in its order)",
    )
    add_settings_arguments(find)
    summary = sub.add_parser("summary", help="thresholds.json and the formula comparison table")
    summary.add_argument(
        "--thresholds", nargs="+", required=True, help="per-demographic threshold files (JSON)"
    )
    summary.add_argument(
        "--comparisons", nargs="+", required=True, help="per-demographic comparison files"
    )
    summary.add_argument("--out-thresholds", required=True, help="all thresholds (JSON)")
    summary.add_argument("--out-csv", required=True, help="summary table (CSV)")
    summary.add_argument("--out-md", required=True, help="summary table (Markdown)")
    summary.add_argument("--health", help="run-health findings (JSON; splits.health)")
    summary.add_argument(
        "--curves",
        nargs="+",
        help="with --out-plots: per-demographic self-ID curves (Parquet), in --thresholds' order",
    )
    summary.add_argument("--demographics", help="with --out-plots: demographics file (names)")
    summary.add_argument(
        "--out-plots",
        nargs="+",
        help="each demographic's self-ID curve plot (PNG), in --thresholds' order: drawn here, "
        "all in one process, so that matplotlib starts once per run, not once per demographic",
    )


def _verifier_from_config(args: argparse.Namespace) -> None:
    """By hand with ``--config``: the LLM verifier's model, registry and prompt from that file
    where no flag gives them (the rule passes them as flags: selfid_verifier_args)."""
    config = load_config(args.config)
    demographics = config["demographics"]
    args.verifier_model = args.verifier_model or demographics["verifier_model"]
    args.prompt = args.prompt or demographics["verifier_prompt"]
    if args.models_json is None and args.verifier_model in config["models"]:
        args.models_json = json.dumps({args.verifier_model: config["models"][args.verifier_model]})


def _verifier_model(args: argparse.Namespace):
    """(model, prompt template) of the LLM verifier."""
    if args.config is not None:
        _verifier_from_config(args)
    if not args.verifier_model:
        raise ConfigError("demographics.verifier_model: required when demographics.verifier is llm")
    if not args.prompt or not Path(args.prompt).exists():
        raise ConfigError(f"demographics.verifier_prompt: {args.prompt} does not exist")
    from splits.llm import load_model

    template = Path(args.prompt).read_text(encoding="utf-8")
    slots = PROMPT_SLOTS["demographics.verifier_prompt"]
    unknown = unknown_slots(template, slots)
    if unknown:
        raise unknown_slot_error(args.prompt, unknown[0], slots)
    registry = json.loads(args.models_json or "{}")
    return load_model(args.verifier_model, registry, args.llm_cache), template


def _run_search(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, SelfidSettings)
    demographic = find_demographic(args.demographics, args.demographic)
    check_settings(settings)
    (users_file,) = _existing("--users", [args.users])
    _check_users(users_file, USER_SEARCH_COLUMNS)
    user_parts = None
    if args.posts:
        posts = pl.scan_parquet(_existing("--posts", args.posts))
        find = SelfidFindSettings(settings.context_chars)
        parts = iter([search_matches(posts, demographic, find)])
    else:  # each part's matches verified in turn: one part held at a time
        if args.user_parts:
            _paired("--user-parts", args.user_parts, "--matches", args.matches)
            user_parts = _existing("--user-parts", args.user_parts)
        matches_files = _existing("--matches", args.matches)
        parts = (sort_matches(pl.read_parquet(f)) for f in matches_files)
    tally = MatchTally()
    out_matches = ParquetAppender(args.out_matches)
    model = template = None
    if settings.verifier == "llm":
        model, template = _verifier_model(args)
    with tempfile.TemporaryDirectory(prefix=".selfid-parts.") as folder:
        verified_files: list[Path] = []
        whole: list[pl.DataFrame] = []  # with --posts: the one part's verified matches

        def verified_parts() -> Iterator[pl.DataFrame]:
            for matches in parts:
                verified, undetected = verify_matches(
                    matches, demographic, settings, model, template
                )
                tally.add(verified, undetected)
                if args.posts:  # D_d searched whole: one part, in memory already, kept as it is
                    whole.append(verified)
                else:  # staged for the merge below, so that no part is held past its turn
                    verified_files.append(Path(folder) / f"{len(verified_files)}.parquet")
                    write_parquet(
                        verified, verified_files[-1], row_group_size=MATCH_MERGE_GROUP_ROWS
                    )
                yield verified

        def per_user() -> Iterator[pl.DataFrame]:
            # the users in slices with their verified counts (the stage holds sums over them)
            if user_parts is None:
                counts = [match_counts(verified) for verified in verified_parts()]
                counts = pl.concat(counts).group_by("author").agg(pl.col("n_self", "n_anti").sum())
                for batch in iter_parquet_slices(users_file, USER_SEARCH_COLUMNS):
                    yield with_counts(batch, counts)
                return
            # the buckets split the authors, so part b's matches are all by users of part b of
            # the users table: each part's counts are looked up in its own users, and nothing
            # the job holds grows with the demographic's matches or users
            for users_part, verified in zip(user_parts, verified_parts(), strict=True):
                counts = match_counts(verified)
                for batch in iter_parquet_slices(users_part, USER_SEARCH_COLUMNS):
                    yield with_counts(batch, counts)

        try:
            curve, comparison, threshold = selfid_from_tally(
                per_user(), tally, demographic, settings
            )
        finally:
            if model is not None:
                model.close()
        if whole:  # the search's matches, in (post id, offset) order already
            empty = whole[0].clear()
            merged = [frame for frame in whole if frame.height]
        else:
            # the parts' matches in (post id, offset) order: a post's matches are all in its
            # author's part, in offset order, and the merge keeps a part's order of equal post ids
            empty = pl.DataFrame(schema=pl.read_parquet_schema(verified_files[0]))
            merged = iter_sorted_merge(
                verified_files,
                "post_id",
                MATCH_MERGE_ROWS,
                scratch=folder,
                min_batch_rows=MATCH_MERGE_MIN_BATCH_ROWS,
            )
        for frame in merged:
            out_matches.write(frame, row_group_size=MATCH_MERGE_GROUP_ROWS)
    error = unsupported_error(demographic.key, threshold, args.demographics, OPT_IN_KEY)
    if error:
        if not settings.accept_unsupported_thresholds:
            out_matches.discard()
            raise ConfigError(error)
        threshold["accepted_unsupported"] = True
        log.warning("%s (accepted: %s is true)", error.partition("; set a fixed")[0], OPT_IN_KEY)
    out_matches.close(empty)
    write_parquet(curve, args.out_curve)
    write_parquet(comparison, args.out_comparison)
    write_json(threshold, args.out_threshold)
    if args.out_plot:
        _plot_threshold(curve, threshold, demographic.display_name, args.out_plot)
    log.info(
        "%s: %d matches, %d verified (%d self, %d anti, %d undetected); threshold %s (%s)",
        demographic.key,
        threshold["matches"],
        threshold["verified"],
        threshold["verified_self"],
        threshold["verified_anti"],
        threshold["undetected"],
        threshold["threshold"],
        threshold["source"],
    )
    return 0


def _run_find(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, SelfidFindSettings)
    _paired("--posts", args.posts, "--demographic", args.demographic)
    _paired("--out", args.out, "--demographic", args.demographic)
    demographics = find_demographics(args.demographics, args.demographic)
    parts = _existing("--posts", args.posts)
    for demographic, part, out in zip(demographics, parts, args.out, strict=True):
        matches = search_matches(pl.scan_parquet(part), demographic, settings)
        write_parquet(matches, out)
        log.info("%s: %d phrase matches in %s", demographic.key, matches.height, part)
    return 0


def _plot_threshold(curve: pl.DataFrame, threshold: dict, display_name: str, path: str) -> None:
    """The curve with the threshold a search chose (its threshold.json)."""
    plot_curve(
        curve,
        threshold["threshold"],
        display_name,
        threshold["source"],
        path,
        unsupported=bool(threshold.get("accepted_unsupported")),
    )


def _run_summary(args: argparse.Namespace) -> int:
    if args.out_plots or args.curves:
        if not (args.out_plots and args.curves and args.demographics):
            raise ConfigError(
                "selfid summary: --out-plots, --curves and --demographics go together"
            )
        _paired("--curves", args.curves, "--thresholds", args.thresholds)
        _paired("--out-plots", args.out_plots, "--thresholds", args.thresholds)
    records = [read_json(path) for path in args.thresholds]
    thresholds, comparison = summarise(records, args.comparisons)
    if args.health:
        findings = support_findings(thresholds[THRESHOLDS_SUPPORT_KEY])
        log_findings(findings, log)
        write_findings(args.health, findings)
    write_json(thresholds, args.out_thresholds)
    write_text(comparison.write_csv(), args.out_csv)
    write_text(comparison_markdown(comparison), args.out_md)
    log.info("thresholds: %s", {k: v for k, v in thresholds.items() if k != THRESHOLDS_SUPPORT_KEY})
    if args.out_plots:
        keys = [threshold["demographic"] for threshold in records]
        demographics = find_demographics(args.demographics, keys)
        for threshold, demographic, curve_file, path in zip(
            records, demographics, args.curves, args.out_plots, strict=True
        ):
            curve = pl.read_parquet(curve_file)
            _plot_threshold(curve, threshold, demographic.display_name, path)
    return 0


def run_selfid(args: argparse.Namespace) -> int:
    if args.action == "search":
        return _run_search(args)
    if args.action == "find":
        return _run_find(args)
    return _run_summary(args)


# subcommand of ``splits`` -> (configure_parser, run); the table in splits.cli names this module
SUBCOMMANDS = {
    "groupness": (configure_groupness, run_groupness),
    "groupness-bucket": (configure_groupness_bucket, run_groupness_bucket),
    "groupness-posts": (configure_groupness_posts, run_groupness_posts),
    "selfid": (configure_selfid, run_selfid),
}
