"""Demographic corpora and group-ness (docs/method.md §2.4).

For one demographic d with seed set S_d:

- U_d: users with at least one post in a seed subreddit of S_d (subreddit names compare
  case-insensitively; seeds that do not occur in the posts are counted in the report);
- known bots (a shipped list, ``AutoModerator``, ``[deleted]``) are dropped, then the top
  ``demographics.top_user_fraction`` of the remaining users by number of posts in D_d (spam,
  unknown bots; ties broken by author name so the cut is deterministic);
- D_d: every post of the remaining users in any KEPT subreddit of the graph stage;
- group-ness g(u) from c(u, s) = posts of u in seed subreddit s, under three formulas
  (``demographics.groupness`` picks the one used downstream; all three are kept in the users
  table so the self-ID stage can compare them):
  ``sum_log``          g = sum_s log(1 + c(u,s))
  ``breadth_x_volume`` g = |{s : c(u,s) > 0}| * log(1 + sum_s c(u,s))
  ``entropy``          g = log(1 + sum_s c(u,s)) * exp(H(c(u,.) / sum_s c(u,s)))
- scores are rounded to 9 decimals, so users with the same counts tie exactly;
- percentile: 100 * (number of users of U_d with a strictly smaller g) / |U_d|, so tied users
  share a percentile, the lowest users get 0, and "percentile >= 75" keeps at most the top 25%.
"""

from __future__ import annotations

import difflib
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from splits.config.definitions import Demographic, load_demographics
from splits.demographics.settings import GroupnessSettings
from splits.errors import ConfigError, InputError
from splits.health import Finding, log_findings
from splits.io import write_sorted_parquet

log = logging.getLogger(__name__)

FORMULAS = ("sum_log", "breadth_x_volume", "entropy")
ALWAYS_BOTS = ("automoderator", "[deleted]")
SCORE_DECIMALS = 9
SORT_ROWS = 1_000_000  # D_d posts sorted in memory at once while writing D_d
CLOSEST_NAMES = 3  # subreddit names suggested for a seed that does not occur in the posts

POST_COLUMNS = [
    "post_id",
    "kind",
    "subreddit",
    "author",
    "created_utc",
    "text",
    "score",
    "conversation_id",
    "reply_to",
]
# a seed user's per-user numbers, before the bot drop and the top-user cut (a bucket's table)
AGGREGATE_COLUMNS = [
    "author",
    "n_seed_posts",
    "n_seed_subreddits",
    *(f"g_{formula}" for formula in FORMULAS),
    "n_posts",
]
USER_COLUMNS = [
    "author",
    "demographic",
    "groupness",
    "percentile",
    "n_posts",
    "n_seed_posts",
    "n_seed_subreddits",
]


def groupness_column(formula: str) -> str:
    """The users-table column holding the raw score of one formula."""
    return f"g_{formula}"


def read_bots(path: str | Path | None) -> frozenset[str]:
    """Known bot names (lowercased): one name per line, ``#`` comments; plus AutoModerator."""
    names = set(ALWAYS_BOTS)
    if path:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"demographics.bots_file: {p} does not exist")
        for line in p.read_text(encoding="utf-8").splitlines():
            name = line.split("#", 1)[0].strip()
            if name:
                names.add(name.lower())
    return frozenset(names)


def percentile_expr(column: str) -> pl.Expr:
    """Share (in %) of rows with a strictly smaller value: ties share the lowest rank."""
    return ((pl.col(column).rank(method="min").cast(pl.Float64) - 1.0) * 100.0 / pl.len()).alias(
        "percentile"
    )


def seed_counts(posts: pl.LazyFrame, seeds: list[str]) -> pl.LazyFrame:
    """c(u, s): posts per (author, seed subreddit); seeds compared lowercased."""
    seeds_lower = sorted({s.lower() for s in seeds})
    return (
        posts.select("author", pl.col("subreddit").str.to_lowercase().alias("subreddit"))
        .filter(pl.col("subreddit").is_in(seeds_lower))
        .group_by("author", "subreddit")
        .agg(pl.len().alias("c"))
    )


def groupness_scores(counts: pl.LazyFrame) -> pl.LazyFrame:
    """Per author: n_seed_posts, n_seed_subreddits and the raw score of every formula."""
    c = pl.col("c").cast(pl.Float64)
    total = c.sum()
    share = c / total
    # rounded so that users with the same counts tie exactly whatever the summation order
    return counts.group_by("author").agg(
        pl.col("c").sum().cast(pl.Int64).alias("n_seed_posts"),
        pl.len().cast(pl.Int64).alias("n_seed_subreddits"),
        c.log1p().sum().round(SCORE_DECIMALS).alias(groupness_column("sum_log")),
        (pl.len().cast(pl.Float64) * total.log1p())
        .round(SCORE_DECIMALS)
        .alias(groupness_column("breadth_x_volume")),
        (total.log1p() * (-(share * share.log()).sum()).exp())
        .round(SCORE_DECIMALS)
        .alias(groupness_column("entropy")),
    )


@dataclass
class GroupnessResult:
    users: pl.DataFrame
    report: dict = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)


def closest_subreddits(seed: str, names: list[str], n: int = CLOSEST_NAMES) -> list[str]:
    """The subreddit names of the posts closest in spelling to ``seed`` (difflib ratio >= 0.6,
    compared lowercased), best first."""
    return difflib.get_close_matches(seed.lower(), names, n=n, cutoff=0.6)


def _seeds_with_suggestions(seeds: list[str], names: list[str]) -> str:
    parts = []
    for seed in seeds:
        close = closest_subreddits(seed, names)
        hint = f" (closest: {', '.join(repr(c) for c in close)})" if close else " (nothing close)"
        parts.append(f"{seed!r}{hint}")
    return "; ".join(parts)


def _check_settings(settings: GroupnessSettings) -> None:
    if settings.groupness not in FORMULAS:
        raise ConfigError(
            f"demographics.groupness: unknown formula {settings.groupness!r} (one of {FORMULAS})"
        )
    if not 0 <= settings.top_user_fraction < 1:
        raise ConfigError("demographics.top_user_fraction: must be in [0, 1)")


def user_aggregates(posts: pl.LazyFrame, counts: pl.DataFrame, kept: list[str]) -> pl.DataFrame:
    """Per seed user (``counts``: :func:`seed_counts`, collected): n_seed_posts,
    n_seed_subreddits, the score of every formula and n_posts, the user's posts in the kept
    subreddits (lowercased), sorted by author. Everything here is per user, so the table of a
    posts bucket by author is exact for that bucket's users."""
    return _with_post_counts(counts, _kept_post_counts(posts, counts, kept))


def _kept_post_counts(posts: pl.LazyFrame, counts: pl.DataFrame, kept: list[str]) -> pl.DataFrame:
    """n_posts: the posts in the kept subreddits (lowercased) of every author in ``counts``."""
    return (
        posts.select("author", pl.col("subreddit").str.to_lowercase().alias("subreddit"))
        .filter(pl.col("subreddit").is_in(kept))
        .join(counts.lazy().select(pl.col("author").unique()), on="author", how="semi")
        .group_by("author")
        .agg(pl.len().cast(pl.Int64).alias("n_posts"))
        .collect(engine="streaming")
    )


def _with_post_counts(counts: pl.DataFrame, n_posts: pl.DataFrame) -> pl.DataFrame:
    """The aggregates of :func:`user_aggregates` from the seed counts and n_posts of (at least)
    the same authors."""
    scores = groupness_scores(counts.lazy()).collect()
    return (
        scores.join(n_posts, on="author", how="left")
        .with_columns(pl.col("n_posts").fill_null(0))
        .select(AGGREGATE_COLUMNS)
        .sort("author")
    )


def post_subreddit_names(posts: pl.LazyFrame) -> list[str]:
    """The posts' subreddit names, lowercased, unique and sorted (what a missing seed's
    suggestions are drawn from)."""
    return (
        posts.select(pl.col("subreddit").str.to_lowercase().unique())
        .collect(engine="streaming")["subreddit"]
        .drop_nulls()
        .sort()
        .to_list()
    )


def build_users(
    posts: pl.LazyFrame,
    kept_subreddits: list[str],
    demographic: Demographic,
    bots: frozenset[str],
    settings: GroupnessSettings,
) -> GroupnessResult:
    """The users table of one demographic (see the module docstring for every step); ``bots``:
    :func:`read_bots`."""
    _check_settings(settings)
    seeds = [s.lower() for s in demographic.seed_subreddits]
    kept = sorted({s.lower() for s in kept_subreddits})
    counts = seed_counts(posts, seeds).collect(engine="streaming")
    present = set(counts["subreddit"].unique().to_list())
    aggregates = user_aggregates(posts, counts, kept)
    return reduce_users(
        aggregates, present, lambda: post_subreddit_names(posts), kept, demographic, bots, settings
    )


def bucket_users(
    posts: pl.LazyFrame, kept_subreddits: list[str], demographics: list[Demographic]
) -> tuple[list[pl.DataFrame], pl.DataFrame]:
    """One posts bucket by author (ingest.buckets > 1), for every demographic at once: each
    demographic's seed users' aggregates (:func:`user_aggregates`, in the order of
    ``demographics``) and the bucket's subreddit names (column ``subreddit``), the inputs of
    :func:`merge_bucket_users`. The bucket is read three times whatever the number of
    demographics: the seed counts of all their seeds, the names, the kept posts of all their seed
    users; each demographic's table is then cut from those."""
    kept = sorted({s.lower() for s in kept_subreddits})
    seeds_of = [sorted({s.lower() for s in d.seed_subreddits}) for d in demographics]
    counts = seed_counts(posts, sorted(set().union(*seeds_of))).collect(engine="streaming")
    names = pl.DataFrame(
        {"subreddit": post_subreddit_names(posts)}, schema={"subreddit": pl.String}
    )
    n_posts = _kept_post_counts(posts, counts, kept)
    tables = [
        _with_post_counts(counts.filter(pl.col("subreddit").is_in(seeds)), n_posts)
        for seeds in seeds_of
    ]
    return tables, names


def merge_bucket_users(
    users_files: list[str | Path],
    names_files: list[str | Path],
    kept_subreddits: list[str],
    demographic: Demographic,
    bots: frozenset[str],
    settings: GroupnessSettings,
) -> GroupnessResult:
    """The users table of one demographic from its buckets' tables (:func:`bucket_users`):
    the same as :func:`build_users` over all the posts, reading only users-sized tables."""
    _check_settings(settings)
    aggregates = pl.read_parquet([str(p) for p in users_files]).select(AGGREGATE_COLUMNS)
    repeated = aggregates.filter(pl.col("author").is_duplicated())["author"]
    if repeated.len():
        raise InputError(
            f"group-ness buckets: {repeated.n_unique()} authors are in more than one bucket "
            f"(e.g. {repeated[0]!r}); the posts buckets must split the posts by author"
        )
    names = pl.read_parquet([str(p) for p in names_files])["subreddit"].unique().sort()
    seeds = {s.lower() for s in demographic.seed_subreddits}
    present = seeds & set(names.to_list())
    kept = sorted({s.lower() for s in kept_subreddits})
    return reduce_users(
        aggregates.sort("author"), present, names.to_list, kept, demographic, bots, settings
    )


def reduce_users(
    aggregates: pl.DataFrame,
    present: set[str],
    subreddit_names: Callable[[], list[str]],
    kept: list[str],
    demographic: Demographic,
    bots: frozenset[str],
    settings: GroupnessSettings,
) -> GroupnessResult:
    """From every seed user's aggregates (:func:`user_aggregates`) and the seeds that occur in
    the posts (``present``; ``subreddit_names`` is called only to suggest names for missing
    seeds): the seed findings, the known-bot drop, the top-user cut, percentiles and report."""
    formula, top_user_fraction = settings.groupness, settings.top_user_fraction
    seeds = [s.lower() for s in demographic.seed_subreddits]
    missing_seeds = sorted(set(seeds) - present)
    findings: list[Finding] = []
    if missing_seeds:
        # as the user spelt them; the posts' names to suggest from (lowercased at ingest)
        spelt = [s for s in demographic.seed_subreddits if s.lower() in missing_seeds]
        named = _seeds_with_suggestions(spelt, subreddit_names())
        if not present:
            raise ConfigError(
                f"demographics.file: demographic {demographic.key!r}: none of its seed "
                f"subreddits occurs in the posts: {named}; correct the seed subreddits"
            )
        findings.append(
            Finding(
                "groupness",
                "seed_subreddit_missing",
                f"demographic {demographic.key}",
                f"{len(spelt)} of its {len(seeds)} seed subreddits never occur in the posts: "
                f"{named}",
                "correct or remove these seed subreddits in the demographics file",
            )
        )
    unkept_seeds = sorted(present - set(kept))
    if unkept_seeds:
        findings.append(
            Finding(
                "groupness",
                "seed_subreddit_not_kept",
                f"demographic {demographic.key}",
                f"seed subreddits not kept by the graph stage (they count for U_d and "
                f"group-ness, their posts are not in D_d): {', '.join(unkept_seeds)}",
                "lower graph.min_posts or raise graph.top_n to keep them, or remove them from "
                "the seed subreddits",
            )
        )
    log_findings(findings, log)

    n_seed_users = aggregates.height
    is_bot = pl.col("author").str.to_lowercase().is_in(sorted(bots))
    bot_users = aggregates.filter(is_bot).height
    users = aggregates.filter(~is_bot)
    n_top = int(math.floor(top_user_fraction * users.height))
    top_users = (
        users.sort(["n_posts", "author"], descending=[True, False]).head(n_top)["author"]
        if n_top
        else pl.Series("author", [], dtype=pl.String)
    )
    removed = users.filter(pl.col("author").is_in(top_users.implode()))
    users = users.filter(~pl.col("author").is_in(top_users.implode()))

    gcol = groupness_column(formula)
    users = (
        users.with_columns(
            pl.lit(demographic.key).alias("demographic"),
            pl.col(gcol).alias("groupness"),
        )
        .with_columns(percentile_expr("groupness"))
        .select(USER_COLUMNS + [groupness_column(f) for f in FORMULAS])
        .sort("author")
    )
    report = {
        "demographic": demographic.key,
        "formula": formula,
        "seed_subreddits": len(seeds),
        "seed_subreddits_without_posts": missing_seeds,
        "seed_subreddits_not_kept": unkept_seeds,
        "seed_users": n_seed_users,
        "dropped_known_bots": bot_users,
        "dropped_top_users": n_top,
        "top_user_fraction": top_user_fraction,
        "top_user_min_posts": int(removed["n_posts"].min()) if removed.height else None,
        "users": users.height,
    }
    return GroupnessResult(users=users, report=report, findings=findings)


def demographic_posts(
    posts: pl.LazyFrame, users: pl.DataFrame, kept_subreddits: list[str]
) -> pl.LazyFrame:
    """D_d: every post of the users in any kept subreddit, with the author's group-ness and
    percentile, in the posts table's order (``write_demographic_posts`` sorts it by post id)."""
    kept = sorted({s.lower() for s in kept_subreddits})
    return (
        posts.filter(pl.col("subreddit").str.to_lowercase().is_in(kept))
        .join(users.lazy().select("author", "groupness", "percentile"), on="author", how="inner")
        .select(POST_COLUMNS + ["groupness", "percentile"])
    )


def write_demographic_posts(d_posts: pl.LazyFrame, path: str | Path) -> int:
    """Write D_d sorted by post id (the file is deterministic, and the topic splits merge the
    demographics' files in post-id order), holding at most ``SORT_ROWS`` posts at once."""
    return write_sorted_parquet(d_posts, "post_id", path, SORT_ROWS)


def kept_subreddits(path: str | Path) -> list[str]:
    frame = pl.read_parquet(path)
    for column in ("subreddit", "kept"):
        if column not in frame.columns:
            raise ConfigError(f"{path}: missing column {column!r} (graph stage output)")
    return frame.filter(pl.col("kept"))["subreddit"].to_list()


def find_demographic(path: str | Path, key: str) -> Demographic:
    demographics = load_demographics(path)
    for demographic in demographics:
        if demographic.key == key:
            return demographic
    raise ConfigError(f"{path}: no demographic {key!r} (have {[d.key for d in demographics]})")
