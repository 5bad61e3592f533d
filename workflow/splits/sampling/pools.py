"""The pools of the sampling (docs/method.md §2.7): per (topic, group) the topic posts, the
members of each group, and per pair {A, B} the two disjoint pools a split draws from.

The dual-member rule lives here (:func:`disjoint_pools`): a post found in both pools of a pair,
or whose author is at or above the threshold of both groups (a dual member), is left out of that
pair's split, whichever pool it was found in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from splits.config.definitions import THRESHOLDS_SUPPORT_KEY
from splits.errors import ConfigError
from splits.io import read_json


@dataclass(frozen=True)
class Pool:
    post_ids: np.ndarray  # str objects, sorted
    texts: np.ndarray


def pools_by_group(topic_posts: pl.DataFrame) -> dict[tuple[str, str], pl.DataFrame]:
    author = (
        pl.col("author").cast(pl.String)
        if "author" in topic_posts.columns
        else pl.lit(None, pl.String).alias("author")
    )
    frame = topic_posts.select("topic", "demographic", "post_id", "text", author).unique(
        subset=["topic", "demographic", "post_id"], keep="first"
    )
    return {
        (str(key[0]), str(key[1])): group.sort("post_id")
        for key, group in frame.group_by("topic", "demographic")
    }


Members = dict[str, frozenset[str]]
EMPTY_POOL = pl.DataFrame(schema={"post_id": pl.String, "text": pl.String, "author": pl.String})


def group_members(users: pl.DataFrame, thresholds: dict) -> Members:
    """Each group's members: its users (``demographic``, ``author``, ``percentile``) at or above
    its threshold percentile; a group without a threshold has none."""
    members: dict[str, frozenset[str]] = {}
    for (key,), part in users.group_by("demographic"):
        threshold = thresholds.get(str(key))
        if threshold is None:
            continue
        members[str(key)] = frozenset(
            part.filter(pl.col("percentile") >= float(threshold)).get_column("author").to_list()
        )
    return members


def read_members(users_files: Sequence[str], thresholds_file: str) -> Members:
    """:func:`group_members` of the groups' users.parquet files and thresholds.json."""
    try:
        thresholds = read_json(thresholds_file)
    except (OSError, ValueError) as err:
        raise ConfigError(f"{thresholds_file}: cannot read thresholds ({err})") from err
    thresholds = {k: v for k, v in thresholds.items() if k != THRESHOLDS_SUPPORT_KEY}
    frames = []
    for path in users_files:
        try:
            frames.append(pl.read_parquet(path, columns=["demographic", "author", "percentile"]))
        except (OSError, pl.exceptions.PolarsError) as err:
            raise ConfigError(f"{path}: cannot read the group's users ({err})") from err
    if not frames:
        return {}
    return group_members(pl.concat(frames, how="vertical_relaxed"), thresholds)


def members_of_topic_posts(topic_posts: pl.DataFrame) -> Members:
    """Each group's members as the authors of its topic posts (data that carries a group per post
    but no group-ness percentiles, such as the authors' released posts)."""
    return {
        str(key): frozenset(part.get_column("author").drop_nulls().to_list())
        for (key,), part in topic_posts.group_by("demographic")
    }


def dual_members(members: Members | None, a: str, b: str) -> frozenset[str]:
    """The authors at or above both groups' thresholds (empty without membership data)."""
    if not members:
        return frozenset()
    return members.get(a, frozenset()) & members.get(b, frozenset())


def left_out_expr(a: pl.DataFrame, b: pl.DataFrame, dual: frozenset[str]) -> pl.Expr:
    shared = a.join(b, on="post_id", how="semi").get_column("post_id")
    out = pl.col("post_id").is_in(shared.implode())
    if dual:
        out = out | pl.col("author").is_in(pl.Series(sorted(dual), dtype=pl.String).implode())
    return out


def disjoint_pools(
    a: pl.DataFrame, b: pl.DataFrame, dual: frozenset[str] = frozenset()
) -> tuple[Pool, Pool]:
    """The pools of a pair without the posts found in both and the posts of dual members."""
    only_a = a.filter(~left_out_expr(a, b, dual))
    only_b = b.filter(~left_out_expr(b, a, dual))

    def pool(frame: pl.DataFrame) -> Pool:
        return Pool(
            np.array(frame.get_column("post_id").to_list(), dtype=object),
            np.array(frame.get_column("text").to_list(), dtype=object),
        )

    return pool(only_a), pool(only_b)


def topic_order(topic_posts: pl.DataFrame) -> list[tuple[str, str]]:
    """(topic, category) in order of first appearance."""
    pairs = topic_posts.select("topic", "category").unique(
        subset="topic", keep="first", maintain_order=True
    )
    return list(
        zip(
            pairs.get_column("topic").to_list(), pairs.get_column("category").to_list(), strict=True
        )
    )


def split_pools(
    topic_posts: pl.DataFrame,
    demographics: Sequence[str] | None = None,
    members: Members | None = None,
) -> pl.DataFrame:
    """Per (topic, A, B) split: the sizes of its disjoint pools, the posts found in both pools
    (``shared``) and the posts left out of each pool (``left_out_A``, ``left_out_B``: in both
    pools, or by an author at or above both thresholds); ``left_out`` the distinct posts left
    out of the split."""
    keys = sorted(
        demographics if demographics is not None else topic_posts.get_column("demographic").unique()
    )
    pools = pools_by_group(topic_posts)
    rows = []
    for topic, _ in topic_order(topic_posts):
        for i, a in enumerate(keys):
            for b in keys[i + 1 :]:
                full_a = pools.get((topic, a), EMPTY_POOL)
                full_b = pools.get((topic, b), EMPTY_POOL)
                pool_a, pool_b = disjoint_pools(full_a, full_b, dual_members(members, a, b))
                shared = full_a.join(full_b, on="post_id", how="semi").height
                out_a = full_a.height - len(pool_a.post_ids)
                out_b = full_b.height - len(pool_b.post_ids)
                rows.append(
                    (
                        topic,
                        a,
                        b,
                        len(pool_a.post_ids),
                        len(pool_b.post_ids),
                        shared,
                        out_a,
                        out_b,
                        out_a + out_b - shared,
                    )
                )
    schema = {
        "description": pl.String,
        "demographic_A": pl.String,
        "demographic_B": pl.String,
        "pool_A": pl.Int64,
        "pool_B": pl.Int64,
        "shared": pl.Int64,
        "left_out_A": pl.Int64,
        "left_out_B": pl.Int64,
        "left_out": pl.Int64,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")
