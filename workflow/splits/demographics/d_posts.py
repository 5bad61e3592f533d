"""D_d, a demographic's posts: every post of its users in a kept subreddit, with the author's
group-ness and percentile, written sorted by post id (the topic splits merge the demographics'
files in post-id order); one file (rule groupness), or each posts bucket's part of every
demographic's D_d (rule groupness_posts, ``write_demographic_parts``)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from splits.demographics.groupness import in_subreddits
from splits.io import write_parquet, write_sorted_parquet

SORT_ROWS = 1_000_000  # D_d posts sorted in memory at once while writing D_d

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


def demographic_posts(
    posts: pl.LazyFrame, users: pl.DataFrame, kept_subreddits: list[str]
) -> pl.LazyFrame:
    """D_d: every post of the users in any kept subreddit, with the author's group-ness and
    percentile, in the posts table's order (``write_demographic_posts`` sorts it by post id)."""
    kept = sorted({s.lower() for s in kept_subreddits})
    # the users' names as a filter too, which the reader applies before it decodes the texts of
    # other users' posts (the join alone reads every post's text: ~15% more CPU at 10M posts)
    return (
        posts.filter(in_subreddits(kept) & pl.col("author").is_in(users["author"].implode()))
        .join(users.lazy().select("author", "groupness", "percentile"), on="author", how="inner")
        .select(POST_COLUMNS + ["groupness", "percentile"])
    )


def write_demographic_posts(
    d_posts: pl.LazyFrame, path: str | Path, source_rows: int | None = None
) -> int:
    """Write D_d sorted by post id (the file is deterministic, and the topic splits merge the
    demographics' files in post-id order), holding at most ``SORT_ROWS`` posts at once.
    ``source_rows``: the posts D_d is drawn from (a scan of the posts table), so that its parts
    are read straight from that scan where that costs less than an unsorted copy of D_d
    (:func:`splits.io.write_sorted_parquet`)."""
    return write_sorted_parquet(d_posts, "post_id", path, SORT_ROWS, source_rows=source_rows)


def table_rows(posts: pl.LazyFrame) -> int:
    """The rows of a scan (of Parquet files: read from their footers)."""
    return posts.select(pl.len()).collect().item()


def write_demographic_parts(
    posts: pl.LazyFrame,
    users: list[pl.DataFrame],
    kept_subreddits: list[str],
    paths: list[str | Path],
) -> list[int]:
    """Every demographic's D_d from one posts bucket (``users[i]`` -> ``paths[i]``, each as
    ``write_demographic_posts`` writes it: sorted by post id), reading the bucket once: its
    posts in kept subreddits by any of the users are sorted by post id once, and each
    demographic's part is that frame joined to its users in that order. Where those posts are
    more than ``SORT_ROWS``, each part is written on its own as before (one pass over the bucket
    per demographic, holding at most ``SORT_ROWS`` posts). Returns the posts of each part."""
    kept = sorted({s.lower() for s in kept_subreddits})
    frames = [u.select("author", "groupness", "percentile") for u in users]
    authors = pl.concat([f.select("author") for f in frames]).unique()
    held = (
        posts.filter(in_subreddits(kept))
        .join(authors.lazy(), on="author", how="semi")
        .select(POST_COLUMNS)
    )
    # one read: at most SORT_ROWS + 1 rows, so that more than SORT_ROWS is seen without a count
    bucket = held.head(SORT_ROWS + 1).collect()
    if bucket.height > SORT_ROWS:
        del bucket
        source_rows = table_rows(posts)
        return [
            write_demographic_posts(
                demographic_posts(posts, frame, kept_subreddits), path, source_rows
            )
            for frame, path in zip(frames, paths, strict=True)
        ]
    # one sort for every demographic: a join that keeps the left frame's order keeps it sorted
    bucket = bucket.sort("post_id")
    counts = []
    for frame, path in zip(frames, paths, strict=True):
        part = bucket.join(frame, on="author", how="inner", maintain_order="left")
        write_parquet(part, path)
        counts.append(part.height)
    return counts
