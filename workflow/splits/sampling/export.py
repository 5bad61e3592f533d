"""Dataset export (``splits export``): Parquet files loadable with
``datasets.load_dataset("parquet", data_files=...)``, a dataset card (README.md), and row-count
tables per topic x demographic pair and per category (CSV + Markdown).

Reddit usernames never leave the pipeline in clear: the exported topic posts carry
``author_hash`` = first 16 hex digits of HMAC-SHA256(salt, username). The salt comes from the
environment variable named by config ``export.salt_env``; the Snakefile copies config
``export.salt`` there when the variable is unset (:func:`splits.privacy.config_salt_environment`).
Without either, a fixed, public development salt (``DEVELOPMENT_SALT``) is used with a warning:
fine for the sample corpus, not for real data (anyone could recompute the hashes of known
usernames). The salt is never written to any output or log.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from splits.io import write_text
from splits.privacy import HASH_HEX_DIGITS, post_id_statement
from splits.sampling.settings import ExportSettings

NO_LICENCE = (
    "No licence is stated for this export (`export.license` was not set): ask its makers before "
    "reusing it"
)
NO_SOURCE = "Not stated (`export.source` was not set)"


def pair_counts(quadruplets: pl.DataFrame) -> pl.DataFrame:
    """Rows per topic (rows) and demographic pair (columns "A / B"), with category and total."""
    long = quadruplets.with_columns(
        (pl.col("demographic_A") + " / " + pl.col("demographic_B")).alias("pair")
    ).select("category", pl.col("description").alias("topic"), "pair")
    pairs = sorted(long.get_column("pair").unique().to_list())
    topics = long.select("category", "topic").unique(maintain_order=True)
    counts = long.group_by("category", "topic", "pair").len()
    table = topics
    for pair in pairs:
        table = table.join(
            counts.filter(pl.col("pair") == pair).select("topic", pl.col("len").alias(pair)),
            on="topic",
            how="left",
            maintain_order="left",
        )
    table = table.with_columns(pl.col(pairs).fill_null(0).cast(pl.Int64)) if pairs else table
    return table.with_columns(
        pl.sum_horizontal(pairs).cast(pl.Int64).alias("total")
        if pairs
        else pl.lit(0).alias("total")
    )


def category_counts(by_topic: pl.DataFrame) -> pl.DataFrame:
    """Rows per category and pair (sum of the topic table), with a final "all" row."""
    numeric = [c for c in by_topic.columns if c not in ("category", "topic")]
    per_category = by_topic.group_by("category", maintain_order=True).agg(pl.col(numeric).sum())
    overall = by_topic.select(pl.lit("all").alias("category"), pl.col(numeric).sum())
    return pl.concat([per_category, overall])


def markdown_table(frame: pl.DataFrame) -> str:
    header = "| " + " | ".join(frame.columns) + " |"
    rule = (
        "|"
        + "|".join("---" if frame.schema[c] == pl.String else "---:" for c in frame.columns)
        + "|"
    )
    lines = [header, rule]
    for row in frame.iter_rows():
        lines.append("| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines) + "\n"


def dataset_card(
    quadruplets: pl.DataFrame,
    topic_posts: pl.DataFrame,
    categories: pl.DataFrame,
    settings: ExportSettings,
    development_salt: bool,
) -> str:
    """The dataset card (Hugging Face README). ``settings.license`` (an SPDX-style id such as
    ``cc-by-4.0``, or any text) and ``settings.source`` (where the posts come from) are the user's
    statements from the config; without a licence none is claimed (no ``license`` field)."""
    k, post_ids = settings.k, settings.post_ids
    license, source = settings.license, settings.source
    demographics = sorted(topic_posts.get_column("demographic").unique().to_list())
    n_topics = quadruplets.get_column("description").n_unique()
    switched = float(quadruplets.get_column("switched").mean() or 0.0) if len(quadruplets) else 0.0
    salt_note = (
        "**Warning: exported with the public development salt; do not publish this export.**\n\n"
        if development_salt
        else ""
    )
    license_field = f"license: {_yaml_scalar(license)}\n" if license else ""
    licence_text = (
        f"Licence stated by the dataset's makers: {license}. The post texts remain subject to the "
        "terms of their source"
        if license
        else NO_LICENCE + "; the post texts are subject to the terms of their source"
    )
    return f"""---
{license_field}task_categories:
- text-classification
language:
- en
configs:
- config_name: quadruplets
  data_files: quadruplets.parquet
- config_name: topic_posts
  data_files: topic_posts.parquet
---

# Splits: demographic x topic splits of Reddit posts

{salt_note}A dataset for **Group Theorization** (Caplan et al., 2025, "Splits! A Flexible Dataset
for Evaluating a Model's Demographic Social Inference"): given two demographics A and B, a neutral
topic and a calibration set of posts, a theory model writes how A and B post differently on the
topic; a classification model then uses that theory to tell which of two 3-post sets is A's.

## Source

{source or NO_SOURCE}.

## Contents

- `quadruplets.parquet`: {len(quadruplets):,} rows, {n_topics} topics, demographics
  {", ".join(demographics)}; calibration size k = {k}; `switched` is true in {switched:.1%} of
  rows. Columns: `description` (topic), `demographic_A`, `demographic_B`, `example_posts`
  (calibration set, k texts, shuffled), `sample_A`, `sample_B` (3 texts each), `switched` (if
  true, the classifier sees B's set as "Post Set 1"): the public release's (version 4) column
  names, but here `sample_A` always holds A's posts (docs/method.md §2.7), whereas the release stores Post
  Set 1 in `sample_A` (B's posts when `switched`); the evaluation stage reads both layouts; plus
  `quadruplet_id`, `category`, `example_post_ids`, `example_labels` ("A"/"B" per calibration
  post; hidden from the theory model), `sample_A_ids`, `sample_B_ids`.
- `topic_posts.parquet`: {len(topic_posts):,} topic posts (post id, `author_hash`, subreddit, text,
  demographic, category, topic, BM25 score, normalised score, rank).
- `counts_by_topic.csv|md`, `counts_by_category.csv|md`: rows per topic x pair and per category.

## Rows per category and demographic pair

{markdown_table(categories)}
## Method

1. Reddit posts (submissions and comments), cleaned: deleted/removed/empty texts, deleted
   authors, known bots and duplicate ids dropped.
2. Per demographic, seed subreddits used almost only by its members; its users are everyone who
   posted there, scored by group-ness (activity in and spread over the seed subreddits); only users
   at or above a threshold percentile (chosen from self-identification curves) are kept.
3. Neutral topics (category, topic, keyword phrases) are retrieved with BM25 Okapi over all
   demographics' posts (one index, so scores are comparable); top posts per (demographic, topic),
   pooled per topic, the lowest-scoring quarter dropped.
4. For every topic and pair of demographics, quadruplets are drawn without replacement until a
   group runs out of posts (seeded; no post twice within a (topic, A, B) split; posts by authors
   at or above both groups' thresholds left out of that pair).

## Licence

{licence_text}. Usernames are replaced by salted hashes (HMAC-SHA256, truncated to
{HASH_HEX_DIGITS} hex digits); the salt is not part of this export.

{post_id_statement(post_ids)}

## Intended use

Evaluating and comparing models' ability to infer how demographic groups differ in the way they
write about everyday topics (the Group Theorization task), and studying the dataset construction.
Not for profiling, identifying or targeting individuals or groups.

## Limitations

- Group membership is inferred from subreddit activity, not self-reported: some posts are by
  non-members; thresholds trade coverage for purity.
- Topic relevance is lexical (BM25 over keyword lists): off-topic posts that use the keywords in
  another sense remain; on-topic posts without the keywords are missed.
- Reddit users are not representative of any demographic; posts reflect a platform and period.
- Post texts may themselves mention usernames or personal details; they are exported as posted.
- Groups with few users yield fewer rows (see the counts); pairs are not balanced.
"""


def _yaml_scalar(text: str) -> str:
    """``text`` as one YAML scalar (quoted unless it is a plain id such as cc-by-4.0)."""
    return text if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.+-]*", text) else json.dumps(text)


def write_tables(
    out: Path, tables: dict[str, pl.DataFrame], formats: Sequence[str] = ("csv", "md")
) -> None:
    for name, table in tables.items():
        if "csv" in formats:
            write_text(table.write_csv(), out / f"{name}.csv")
        if "md" in formats:
            write_text(markdown_table(table), out / f"{name}.md")
