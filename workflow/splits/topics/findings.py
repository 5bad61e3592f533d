"""After the merge: what each (topic, demographic) got, the topics on which no pair of groups has
the posts one quadruplet needs (left out, with a run-health finding), and each group's share of
topic posts from its own seed subreddits (a finding above ``SEED_SHARE_WARN``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from splits.config.definitions import SAMPLE_SIZE, Topic
from splits.errors import InputError
from splits.health import Finding
from splits.topics.merge import topics_frame
from splits.topics.settings import TopicMergeSettings, TopicSplitSettings

STAGE = "topics"
#: a group's topic posts above this share from its own seed subreddits get a health finding
SEED_SHARE_WARN = 0.8


RETRIEVAL_SCHEMA = {
    "category": pl.String,
    "topic": pl.String,
    "demographic": pl.String,
    "retrieved": pl.Int64,  # posts holding one of the topic's keywords as a phrase
    "pool": pl.Int64,  # min(retrieved, top_k): the top K kept before pooling
    "short_of_top_k": pl.Int64,  # top_k - pool
    "dropped_pooled": pl.Int64,  # pool posts removed by the pooled bottom-drop_fraction cut
    "kept": pl.Int64,  # pool - dropped_pooled
    "sampled_pairs": pl.Int64,  # pairs of the topic with enough posts for one quadruplet
    "topic_kept": pl.Boolean,  # false: the topic is left out of the dataset
}


SEED_SHARE_SCHEMA = {
    "demographic": pl.String,
    "topic_posts": pl.Int64,
    "from_seed_subreddits": pl.Int64,
    "seed_share": pl.Float64,
    "seed_subreddit_posts": pl.String,  # keep | exclude (topics.seed_subreddit_posts)
}


def posts_needed(sample_k: int) -> int:
    """Posts one group needs on a topic for one quadruplet: k/2 calibration + the sample posts."""
    return sample_k // 2 + SAMPLE_SIZE


def pair_pools(
    table: pl.DataFrame,
    demographics: Sequence[str],
    members: dict[str, frozenset[str]] | None = None,
) -> dict[str, list[tuple[str, str, int, int]]]:
    """Per topic: (A, B, |pool of A|, |pool of B|) for every pair of demographics once the posts
    of dual members are left out, as sampling leaves them out: a post of A is left out of the
    pair when its author is at or above B's threshold too (``members``: post id -> the
    demographics whose threshold its author reaches, the shards' lists) or, without
    ``members``, when it is listed under B as well."""
    out: dict[str, list[tuple[str, str, int, int]]] = {}
    for (topic,), rows in table.group_by("topic"):
        ids = {
            key: set(rows.filter(pl.col("demographic") == key).get_column("post_id").to_list())
            for key in demographics
        }

        def pool(a: str, b: str, ids: dict[str, set[str]] = ids) -> int:
            if members is None:
                return len(ids[a] - ids[b])
            return sum(b not in members.get(p, ()) for p in ids[a] - ids[b])

        out[str(topic)] = [
            (a, b, pool(a, b), pool(b, a))
            for i, a in enumerate(demographics)
            for b in demographics[i + 1 :]
        ]
    return out


def sampled_pairs(
    table: pl.DataFrame,
    demographics: Sequence[str],
    need: int,
    members: dict[str, frozenset[str]] | None = None,
) -> dict[str, int]:
    """Per topic: the pairs of demographics whose pools (:func:`pair_pools`) both hold at least
    ``need`` posts."""
    return {
        topic: sum(n_a >= need and n_b >= need for _, _, n_a, n_b in pools)
        for topic, pools in pair_pools(table, demographics, members).items()
    }


def post_members(posts: pl.LazyFrame, table: pl.DataFrame) -> dict[str, frozenset[str]]:
    """Post id -> the demographics whose threshold its author reaches (the shards' lists), for
    the posts of ``table``."""
    frame = (
        posts.select("post_id", "demographics")
        .join(table.select("post_id").unique().lazy(), on="post_id", how="semi")
        .unique(subset="post_id", keep="first")
        .collect(engine="streaming")
    )
    return {p: frozenset(g or ()) for p, g in frame.iter_rows()}


def retrieval_table(
    retrieved: pl.DataFrame,
    best: pl.DataFrame,
    table: pl.DataFrame,
    topics: Sequence[Topic],
    demographics: Sequence[str],
    top_k_posts: int,
    pairs: dict[str, int],
) -> pl.DataFrame:
    """One row per (topic, demographic): ``RETRIEVAL_SCHEMA``."""
    grid = (
        topics_frame(topics)
        .select("category", "topic")
        .join(
            pl.DataFrame({"demographic": list(demographics)}, schema={"demographic": pl.String}),
            how="cross",
        )
    )
    pool = best.group_by("demographic", "topic").agg(pl.len().cast(pl.Int64).alias("pool"))
    kept = table.group_by("demographic", "topic").agg(pl.len().cast(pl.Int64).alias("kept"))
    frame = (
        grid.join(retrieved, on=["demographic", "topic"], how="left", maintain_order="left")
        .join(pool, on=["demographic", "topic"], how="left", maintain_order="left")
        .join(kept, on=["demographic", "topic"], how="left", maintain_order="left")
        .with_columns(pl.col("retrieved", "pool", "kept").fill_null(0))
    )
    return (
        frame.with_columns(
            (top_k_posts - pl.col("pool")).alias("short_of_top_k"),
            (pl.col("pool") - pl.col("kept")).alias("dropped_pooled"),
            pl.col("topic")
            .replace_strict(pairs, default=0, return_dtype=pl.Int64)
            .alias("sampled_pairs"),
        )
        .with_columns((pl.col("sampled_pairs") > 0).alias("topic_kept"))
        .select([pl.col(c).cast(t) for c, t in RETRIEVAL_SCHEMA.items()])
    )


def seed_share_table(
    table: pl.DataFrame, seeds: dict[str, Sequence[str]], demographics: Sequence[str], mode: str
) -> pl.DataFrame:
    """Per demographic: its topic posts, how many come from its own seed subreddits (names
    compared case-insensitively) and their share."""
    rows = []
    for key in demographics:
        own = table.filter(pl.col("demographic") == key)
        wanted = pl.Series([s.lower() for s in seeds.get(key, ())], dtype=pl.String)
        from_seed = int(
            own.get_column("subreddit").str.to_lowercase().is_in(wanted.implode()).sum()
        )
        rows.append(
            {
                "demographic": key,
                "topic_posts": own.height,
                "from_seed_subreddits": from_seed,
                "seed_share": from_seed / own.height if own.height else None,
                "seed_subreddit_posts": mode,
            }
        )
    return pl.DataFrame(rows, schema=SEED_SHARE_SCHEMA)


def no_samplable_topic_error(
    table: pl.DataFrame,
    demographics: Sequence[str],
    members: dict[str, frozenset[str]] | None,
    sample_k: int,
) -> InputError:
    """One line when every topic is too small to sample: k, what a split needs, and the pools of
    the (topic, pair) that came closest, without the posts of members of both groups."""
    need = posts_needed(sample_k)
    best = (-1, 0, "", "", "")
    for topic, pools in pair_pools(table, demographics, members).items():
        for a, b, n_a, n_b in pools:
            best = max(best, (min(n_a, n_b), max(n_a, n_b), topic, a, b))
    smaller, larger, topic, a, b = best
    where = f" ({topic!r}, {a}/{b})" if topic else ""
    return InputError(
        f"no topic can be sampled: sampling.k = {sample_k} needs two disjoint pools of k/2 + 3 = "
        f"{need} posts in a (topic, A, B) split; the largest are {larger} and {max(smaller, 0)} "
        f"posts{where}, posts by members of both groups not counted; lower sampling.k, raise "
        "topics.top_k, give the topics keywords that occur in the groups' posts or give the "
        "groups more distinct members"
    )


@dataclass(frozen=True)
class TopicSplitResult:
    """The stage's outputs: the topic posts of the kept topics, the per (topic, demographic)
    retrieval table, the per-demographic seed-subreddit share and the run-health findings."""

    topic_posts: pl.DataFrame
    retrieval: pl.DataFrame
    seed_share: pl.DataFrame
    findings: list


def finish_splits(
    table: pl.DataFrame,
    best: pl.DataFrame,
    retrieved: pl.DataFrame,
    topics: Sequence[Topic],
    demographics: Sequence[str],
    settings: TopicMergeSettings | TopicSplitSettings,
    seeds: dict[str, Sequence[str]] | None = None,
    members: dict[str, frozenset[str]] | None = None,
) -> TopicSplitResult:
    """Drop the topics on which no pair of demographics has the posts one quadruplet needs
    (``posts_needed(settings.sample_k)`` each, without the posts of authors above both groups'
    thresholds: ``sampled_pairs``), and measure what each (topic, demographic) got and each
    group's seed-subreddit share."""
    demographics = sorted(demographics)
    need = posts_needed(settings.sample_k)
    pairs = sampled_pairs(table, demographics, need, members)
    retrieval = retrieval_table(retrieved, best, table, topics, demographics, settings.top_k, pairs)
    findings = []
    for topic in topics:
        rows = retrieval.filter(pl.col("topic") == topic.topic)
        if rows.get_column("topic_kept").any():
            continue
        counts = ", ".join(
            f"{r['demographic']} {r['retrieved']} retrieved/{r['kept']} kept"
            for r in rows.iter_rows(named=True)
        )
        findings.append(
            Finding(
                stage=STAGE,
                code="topic_too_few_posts",
                subject=f"topic {topic.topic}",
                message=(
                    f"left out of the dataset: no pair of groups has {need} posts each (k/2 = "
                    f"{settings.sample_k // 2} calibration + 3 sample posts) holding one of its "
                    "keywords as a phrase, posts by members of both groups not counted "
                    f"({counts}; top_k {settings.top_k})"
                ),
                fix=(
                    "give the topic keywords that occur in the groups' posts (see "
                    "topics/topic_retrieval.csv), or lower sampling.k"
                ),
            )
        )
    dropped = [t.topic for t in topics if not pairs.get(t.topic, 0)]
    kept_table = table.filter(~pl.col("topic").is_in(pl.Series(dropped, dtype=pl.String).implode()))
    share = seed_share_table(kept_table, seeds or {}, demographics, settings.seed_subreddit_posts)
    for row in share.iter_rows(named=True):
        if row["seed_share"] is not None and row["seed_share"] > SEED_SHARE_WARN:
            findings.append(
                Finding(
                    stage=STAGE,
                    code="topic_posts_from_seed_subreddits",
                    subject=f"group {row['demographic']}",
                    message=(
                        f"{row['seed_share']:.0%} of its topic posts ({row['from_seed_subreddits']:,}"
                        f" of {row['topic_posts']:,}) come from its own seed subreddits, so telling "
                        "the groups apart partly means recognising the subreddit"
                    ),
                    fix=(
                        "set topics.seed_subreddit_posts: exclude to compare the groups outside "
                        "their own communities (or keep it, as the paper does, and read the "
                        "scores as partly subreddit recognition)"
                    ),
                )
            )
    return TopicSplitResult(kept_table, retrieval, share, findings)
