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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl

from splits.config.definitions import Demographic, load_demographics
from splits.demographics.settings import GroupnessSettings
from splits.errors import ConfigError, InputError
from splits.health import Finding, log_findings
from splits.io import ParquetAppender, iter_sorted_merge, write_parquet

log = logging.getLogger(__name__)

FORMULAS = ("sum_log", "breadth_x_volume", "entropy")
ALWAYS_BOTS = ("automoderator", "[deleted]")
SCORE_DECIMALS = 9
MERGE_ROWS = 50_000  # users held at once while the bucketed reduce writes the users table
CLOSEST_NAMES = 3  # subreddit names suggested for a seed that does not occur in the posts

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
# a demographic's users table: USER_COLUMNS, then every formula's raw score
USERS_SCHEMA = pl.Schema(
    {
        "author": pl.String,
        "demographic": pl.String,
        "groupness": pl.Float64,
        "percentile": pl.Float64,
        "n_posts": pl.Int64,
        "n_seed_posts": pl.Int64,
        "n_seed_subreddits": pl.Int64,
        **{f"g_{formula}": pl.Float64 for formula in FORMULAS},
    }
)


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
    # filtered before the names are lowercased: the reader tests the predicate on each column
    # chunk's distinct names, where lowercasing every post's name first cost ~0.7 s per 10M posts
    return (
        posts.filter(in_subreddits(seeds_lower))
        .select("author", pl.col("subreddit").str.to_lowercase())
        .group_by("author", "subreddit")
        .agg(pl.len().alias("c"))
    )


def in_subreddits(names_lower: list[str]) -> pl.Expr:
    """A post's subreddit is one of ``names_lower`` (lowercase names), compared
    case-insensitively. As a filter straight on a scan, the reader evaluates it on each column
    chunk's dictionary of distinct names, not on every post's."""
    return pl.col("subreddit").str.to_lowercase().is_in(names_lower)


def groupness_scores(counts: pl.LazyFrame) -> pl.LazyFrame:
    """Per author: n_seed_posts, n_seed_subreddits and the raw score of every formula."""
    c = pl.col("c").cast(pl.Float64)
    # per author only plain sums, which polars aggregates column-wise; an expression mixing a
    # post count with its author's total (c / sum c) is evaluated group by group, ~0.5 s per
    # 200,000 authors. The entropy of the shares c/T is H = log T - (sum c log c) / T.
    sums = counts.group_by("author").agg(
        pl.col("c").sum().cast(pl.Int64).alias("n_seed_posts"),
        pl.len().cast(pl.Int64).alias("n_seed_subreddits"),
        c.log1p().sum().alias("_sum_log"),
        (c * c.log()).sum().alias("_c_log_c"),
    )
    total = pl.col("n_seed_posts").cast(pl.Float64)
    entropy = total.log() - pl.col("_c_log_c") / total
    # rounded so that users with the same counts tie exactly whatever the summation order
    return sums.select(
        "author",
        "n_seed_posts",
        "n_seed_subreddits",
        pl.col("_sum_log").round(SCORE_DECIMALS).alias(groupness_column("sum_log")),
        (pl.col("n_seed_subreddits").cast(pl.Float64) * total.log1p())
        .round(SCORE_DECIMALS)
        .alias(groupness_column("breadth_x_volume")),
        (total.log1p() * entropy.exp()).round(SCORE_DECIMALS).alias(groupness_column("entropy")),
    )


@dataclass
class GroupnessResult:
    users: pl.DataFrame | None  # None when written straight to a file (merge_bucket_users)
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
        posts.filter(in_subreddits(kept))
        .select("author")
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
    # the distinct names first, then lowercased: not every post's name
    names = posts.select(pl.col("subreddit").unique()).collect(engine="streaming")["subreddit"]
    return names.str.to_lowercase().unique().drop_nulls().sort().to_list()


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
    out_users: str | Path,
    out_parts: list[str | Path] | None = None,
) -> GroupnessResult:
    """The users table of one demographic from its buckets' tables (:func:`bucket_users`,
    each sorted by author), written to ``out_users``: the same table, report and findings as
    :func:`build_users` over all the posts. The job holds one bucket's table, the counts of the
    users' n_posts and group-ness values, and ``MERGE_ROWS`` users while it writes the table
    in author order (a merge of the buckets' tables), never every user of the demographic;
    ``result.users`` is None and ``report["posts"]`` is D_d's size (the kept users' n_posts,
    which count exactly D_d's posts). ``out_parts`` (one per bucket table, in its order): each
    bucket's rows of the users table, sorted by author, so that a job over one posts bucket
    reads its own users only."""
    _check_settings(settings)
    paths = [Path(p) for p in users_files]

    def tables(columns: list[str]) -> Iterator[pl.DataFrame]:
        for path in paths:
            yield pl.read_parquet(path, columns=columns)

    # the names of all buckets, one bucket's file at a time (each holds most of the names)
    names = pl.Series("subreddit", [], dtype=pl.String)
    for path in names_files:
        names = pl.concat([names, pl.read_parquet(path, columns=["subreddit"])["subreddit"]])
        names = names.unique()
    names = names.sort()
    seeds = {s.lower() for s in demographic.seed_subreddits}
    present = seeds & set(names.to_list())
    kept = sorted({s.lower() for s in kept_subreddits})
    findings = seed_findings(demographic, present, names.to_list, kept)
    cut = user_cut(tables, bots, settings.top_user_fraction)
    percentiles = percentile_lookup(tables, cut, settings.groupness)

    out = ParquetAppender(out_users)
    n_users = n_posts = repeated = 0
    example, last = None, None
    try:
        chunks = iter_sorted_merge(paths, "author", MERGE_ROWS, scratch=Path(out_users).parent)
        for chunk in chunks:
            authors = chunk.get_column("author")
            twice = authors.filter(authors.is_duplicated()).unique()
            if last is not None and authors[0] == last:
                twice = pl.concat([twice, authors.head(1)]).unique()
            last = authors[-1]
            if twice.len():
                repeated += twice.len()
                example = example if example is not None else twice.sort()[0]
            if repeated:  # the merge goes on to count them all, writing nothing more
                continue
            users = finish_users(chunk, cut, percentiles, demographic.key, settings.groupness)
            if users.height:
                out.write(users)
            n_users += users.height
            n_posts += int(users.get_column("n_posts").sum())
        if repeated:
            raise InputError(
                f"group-ness buckets: {repeated} authors are in more than one bucket "
                f"(e.g. {example!r}); the posts buckets must split the posts by author"
            )
    except BaseException:
        out.discard()
        raise
    out.close(pl.DataFrame(schema=USERS_SCHEMA))
    for path, part in zip(paths, out_parts or [], strict=bool(out_parts)):
        users = finish_users(
            pl.read_parquet(path), cut, percentiles, demographic.key, settings.groupness
        )
        write_parquet(users, part)
    report = groupness_report(demographic, settings, present, kept, cut, n_users)
    report["posts"] = n_posts
    return GroupnessResult(users=None, report=report, findings=findings)


def reduce_users(
    aggregates: pl.DataFrame,
    present: set[str],
    subreddit_names: Callable[[], list[str]],
    kept: list[str],
    demographic: Demographic,
    bots: frozenset[str],
    settings: GroupnessSettings,
) -> GroupnessResult:
    """From every seed user's aggregates (:func:`user_aggregates`, sorted by author) and the
    seeds that occur in the posts (``present``; ``subreddit_names`` is called only to suggest
    names for missing seeds): the seed findings, the known-bot drop, the top-user cut,
    percentiles and report. The same steps as :func:`merge_bucket_users`, on one table."""

    def tables(columns: list[str]) -> Iterator[pl.DataFrame]:
        yield aggregates.select(columns)

    findings = seed_findings(demographic, present, subreddit_names, kept)
    cut = user_cut(tables, bots, settings.top_user_fraction)
    percentiles = percentile_lookup(tables, cut, settings.groupness)
    users = finish_users(
        aggregates.sort("author"), cut, percentiles, demographic.key, settings.groupness
    )
    report = groupness_report(demographic, settings, present, kept, cut, users.height)
    return GroupnessResult(users=users, report=report, findings=findings)


def seed_findings(
    demographic: Demographic,
    present: set[str],
    subreddit_names: Callable[[], list[str]],
    kept: list[str],
) -> list[Finding]:
    """Seeds that never occur in the posts (an error when none occurs) and seeds the graph
    stage did not keep, as findings (logged here)."""
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
    return findings


@dataclass(frozen=True)
class UserCut:
    """Who of the seed users is kept: not a known bot, and not among the top
    ``top_user_fraction`` by posts, who are the users with more than ``top_posts`` posts and
    those with exactly ``top_posts`` whose names sort up to ``top_last_author`` (the ties cut by
    name). Found from the users' counts, so the rule is the same over one table or many."""

    bots: tuple[str, ...]
    seed_users: int
    bot_users: int
    top_users: int
    top_posts: int | None = None
    top_last_author: str | None = None

    def is_bot(self) -> pl.Expr:
        return is_bot_expr(self.bots)

    def is_kept(self) -> pl.Expr:
        if self.top_posts is None:
            return ~self.is_bot()
        posts = pl.col("n_posts")
        top = (posts > self.top_posts) | (
            (posts == self.top_posts) & (pl.col("author") <= self.top_last_author)
        )
        return ~self.is_bot() & ~top


TablesOf = Callable[[list[str]], Iterator[pl.DataFrame]]


def is_bot_expr(bots: tuple[str, ...]) -> pl.Expr:
    """A known bot: the author's name, lowercased, is one of ``bots`` (lowercase names)."""
    return pl.col("author").str.to_lowercase().is_in(pl.Series(bots, dtype=pl.String).implode())


def user_cut(tables: TablesOf, bots: frozenset[str], top_user_fraction: float) -> UserCut:
    """The known-bot drop and the top-user cut over the seed users of ``tables`` (called with
    the columns to read, it yields each table of users: one, or one per bucket), holding the
    counts of their n_posts and, at most, the names tied at the cut."""
    is_bot = is_bot_expr(tuple(sorted(bots)))
    seed_users = bot_users = 0
    by_posts = []
    for table in tables(["author", "n_posts"]):
        bot = table.select(is_bot).to_series()
        seed_users += table.height
        bot_users += int(bot.sum())
        by_posts.append(table.filter(~bot).group_by("n_posts").agg(pl.len().alias("users")))
    counts = (
        pl.concat(by_posts)
        .group_by("n_posts")
        .agg(pl.col("users").sum())
        .sort("n_posts", descending=True)
    )
    n_top = int(math.floor(top_user_fraction * (seed_users - bot_users)))
    cut = UserCut(tuple(sorted(bots)), seed_users, bot_users, n_top)
    if not n_top:
        return cut
    reached = counts.get_column("users").cum_sum()
    at = int((reached < n_top).sum())  # the first n_posts value where the cut is reached
    top_posts = int(counts.get_column("n_posts")[at])
    tied = n_top - (int(reached[at - 1]) if at else 0)  # users cut at exactly top_posts posts
    names = pl.Series("author", [], dtype=pl.String)
    for table in tables(["author", "n_posts"]):
        at_cut = table.filter(~is_bot & (pl.col("n_posts") == top_posts)).get_column("author")
        names = pl.concat([names, at_cut]).sort().head(tied)
    return replace(cut, top_posts=top_posts, top_last_author=names[-1])


def percentile_lookup(tables: TablesOf, cut: UserCut, formula: str) -> pl.DataFrame:
    """Each group-ness value of the kept users with its percentile (columns ``groupness``,
    sorted, and ``percentile``): 100 * (kept users with a smaller value) / kept users, the
    value :func:`percentile_expr` gives over one table, from the counts of the values."""
    gcol = groupness_column(formula)
    counts = [
        table.filter(cut.is_kept()).group_by(gcol).agg(pl.len().alias("users"))
        for table in tables(["author", "n_posts", gcol])
    ]
    values = (
        pl.concat(counts)
        .group_by(gcol)
        .agg(pl.col("users").sum())
        .sort(gcol)
        .rename({gcol: "groupness"})
    )
    n_users = int(values.get_column("users").sum())
    smaller = (pl.col("users").cum_sum() - pl.col("users")).cast(pl.Float64)
    return values.select("groupness", (smaller * 100.0 / n_users).alias("percentile"))


def finish_users(
    aggregates: pl.DataFrame,
    cut: UserCut,
    percentiles: pl.DataFrame,
    key: str,
    formula: str,
) -> pl.DataFrame:
    """The users-table rows of the kept users among ``aggregates`` (their order kept)."""
    gcol = groupness_column(formula)
    users = aggregates.filter(cut.is_kept())
    at = percentiles.get_column("groupness").search_sorted(users.get_column(gcol))
    return users.with_columns(
        pl.lit(key).alias("demographic"),
        pl.col(gcol).alias("groupness"),
        percentiles.get_column("percentile").gather(at).alias("percentile"),
    ).select(USERS_SCHEMA.names())


def groupness_report(
    demographic: Demographic,
    settings: GroupnessSettings,
    present: set[str],
    kept: list[str],
    cut: UserCut,
    users: int,
) -> dict:
    seeds = {s.lower() for s in demographic.seed_subreddits}
    return {
        "demographic": demographic.key,
        "formula": settings.groupness,
        "seed_subreddits": len(demographic.seed_subreddits),
        "seed_subreddits_without_posts": sorted(seeds - present),
        "seed_subreddits_not_kept": sorted(present - set(kept)),
        "seed_users": cut.seed_users,
        "dropped_known_bots": cut.bot_users,
        "dropped_top_users": cut.top_users,
        "top_user_fraction": settings.top_user_fraction,
        "top_user_min_posts": cut.top_posts,
        "users": users,
    }


def kept_subreddits(path: str | Path) -> list[str]:
    frame = pl.read_parquet(path)
    for column in ("subreddit", "kept"):
        if column not in frame.columns:
            raise ConfigError(f"{path}: missing column {column!r} (graph stage output)")
    return frame.filter(pl.col("kept"))["subreddit"].to_list()


def find_demographic(path: str | Path, key: str) -> Demographic:
    return find_demographics(path, [key])[0]


def find_demographics(path: str | Path, keys: list[str]) -> list[Demographic]:
    """The demographics of ``keys``, in that order, from one read of the file."""
    demographics = load_demographics(path)
    by_key = {demographic.key: demographic for demographic in demographics}
    for key in keys:
        if key not in by_key:
            raise ConfigError(
                f"{path}: no demographic {key!r} (have {[d.key for d in demographics]})"
            )
    return [by_key[key] for key in keys]
