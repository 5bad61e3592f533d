"""The sample corpus generator (``splits synth``).

A deterministic synthetic Reddit corpus in ConvoKit's on-disk format (v1) or as Pushshift
NDJSON, with the ground truth every later stage can be scored against:

- a few hundred general subreddits with Zipf popularity; heavy-tailed user activity; every user
  has a few favourite subreddits and posts in several;
- one community per demographic of the demographics file: members (``strength`` in [0, 1]) post
  in the community's seed subreddits (more posts, in more of them, with higher strength) and a
  lot in general subreddits; non-members post in seed subreddits rarely (one or two posts), in
  such numbers that the share of true members among the users of the seed subreddits is
  ``1 - change_point / 100`` (change points 75/80/90 as in the paper's thresholds);
- self-ID phrases in members' posts at a rate rising with strength, anti-self-ID phrases mostly
  from non-members, and phrase occurrences that are not self-identifications (quoted, reported
  questions, negations, hypotheticals), each labelled in ``post_truth.parquet``;
- neutral topic posts using the keywords of the topic list, with a planted per-(demographic,
  topic) set of marker phrases (``plant_group_difference``; when off every author draws markers
  from one shared distribution; ``planted_topics`` limits the planted difference to some topics,
  the others draw from the shared distribution, and ``synth_meta.json`` lists them);
- bots (AutoModerator and ``...bot``/``...Bot`` accounts with templated text), spam accounts
  (very many repetitive posts), ``[deleted]``/``[removed]``/empty texts and ``[deleted]``
  authors in proportions like real ConvoKit corpora.

Posts are generated per block of users and streamed to disk, so memory is bounded by the block
size whatever the corpus size. Every random draw comes from one ``numpy`` Generator seeded from
the ``seed`` setting: the same settings give byte-identical files.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import polars as pl

from splits.config.definitions import Demographic, Topic
from splits.errors import ConfigError
from splits.ingest.synth.posts import (
    _block_posts,
    _conversations,
    _texts,
    make_banks,
)
from splits.ingest.synth.vocab import (
    DIRT_NAMES,
    ID_OFFSET,
    KIND_GENERAL,
    KIND_NAMES,
)
from splits.ingest.synth.world import (
    SynthParams,
    _base36,
    build_world,
)
from splits.ingest.synth.writer import (
    CorpusWriter,
    _top_level,
)
from splits.io import remove_stale_temporaries, write_json, write_parquet

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- generation


def generate(
    params: SynthParams,
    demographics: list[Demographic],
    topics: list[Topic],
    out_dir: str | Path,
    truth_dir: str | Path,
) -> dict:
    """Write the corpus under ``out_dir`` and the truth files under ``truth_dir``; return meta."""
    out_dir, truth_dir = Path(out_dir), Path(truth_dir)
    if params.shards < 1:
        raise ConfigError("synth.shards: must be at least 1")
    if params.format not in ("convokit", "pushshift"):
        raise ConfigError(f"synth.format: unknown format {params.format!r}")
    # the corpus is written to a staging folder beside out_dir and moved into place when
    # complete: a killed run publishes no shard (its staging folder goes at the next run)
    remove_stale_temporaries(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    try:
        meta = _generate(params, demographics, topics, staging, truth_dir)
        _publish(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(truth_dir / ".post_truth_parts", ignore_errors=True)  # a failed run's parts
    return meta


def _publish(staging: Path, out_dir: Path) -> None:
    """Move every shard of the staging folder onto its name in ``out_dir`` (one rename each)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for entry in sorted(staging.iterdir()):
        target = out_dir / entry.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(entry, target)


def _generate(
    params: SynthParams,
    demographics: list[Demographic],
    topics: list[Topic],
    out_dir: Path,
    truth_dir: Path,
) -> dict:
    rng = np.random.default_rng(params.seed)
    world = build_world(params, demographics, topics, rng)
    banks = make_banks(topics, rng)
    n_demo = len(demographics)
    n_users = len(world.user_names)
    names = pl.Series("name", world.user_names)
    writer = CorpusWriter(out_dir, params, world.subreddits, world.user_names)
    parts_dir = truth_dir / ".post_truth_parts"
    parts_dir.mkdir(parents=True, exist_ok=True)
    for old in parts_dir.glob("*.parquet"):
        old.unlink()
    next_id = ID_OFFSET
    n_posts = 0
    kind_counts = np.zeros(len(KIND_NAMES), dtype=np.int64)
    dirt_counts = np.zeros(len(DIRT_NAMES), dtype=np.int64)
    topic_names = pl.Series("topic", [t.topic for t in topics])
    demo_names = pl.Series("demographic", [d.key for d in demographics])
    for block_no, start in enumerate(range(0, n_users, params.block_users)):
        users = np.arange(start, min(start + params.block_users, n_users))
        block = _block_posts(world, users, params, n_demo, rng)
        order, group_start, reply, ts = _conversations(block, rng)
        n = len(order)
        texts = _texts(world, block, order, banks, demographics, params, rng)
        ids = np.arange(next_id, next_id + n)
        next_id += n
        id_str = _base36(ids)
        id_series = pl.Series("id", id_str)
        is_root = reply < 0
        top = _top_level(reply)
        author = block.author[order]
        kind = block.kind[order]
        sub = block.subreddit[order]
        conv_sizes = np.bincount(group_start, minlength=n)
        # dirt: removed / deleted / deleted author / empty (never on bots, nor on the planted
        # noise posts in seed subreddits, which keeps the member share of U_d as planted)
        u = rng.random(n)
        exempt = (world.user_kind[author] == 1) | block.noise_seed[order]
        c1 = params.removed_rate
        c2 = c1 + params.deleted_rate
        c3 = c2 + params.deleted_author_rate
        c4 = c3 + params.empty_rate
        dirt = np.select([u < c1, u < c2, u < c3, (u < c4) & ~is_root], [1, 2, 3, 4], 0)
        dirt[exempt] = 0
        link_post = is_root & (kind == KIND_GENERAL) & (rng.random(n) < 0.1)
        titles = [banks.titles[j] for j in rng.integers(0, len(banks.titles), n).tolist()]
        topic_idx = block.topic[order]
        text_col = pl.Series("text", texts)
        scores = np.round(rng.lognormal(1.0, 1.3, n)).astype(np.int64) - rng.integers(0, 3, n)
        frame = pl.DataFrame(
            {
                "id": id_series,
                "conversation_id": id_series.gather(group_start),
                "reply_to": id_series.gather(np.where(reply < 0, 0, reply)),
                "top_level": id_series.gather(top),
                "timestamp": ts.astype(np.int64),
                "author_id": author,
                "text": text_col,
                "title": pl.Series(titles),
                "score": scores,
                "subreddit_id": sub,
                "is_root": is_root,
                "num_comments": conv_sizes[group_start] - 1,
                "dirt": dirt,
                "link_post": link_post,
            }
        ).with_columns(
            reply_to=pl.when(pl.col("is_root")).then(None).otherwise(pl.col("reply_to")),
            speaker=pl.when(pl.col("dirt").is_in([2, 3]))
            .then(pl.lit("[deleted]"))
            .otherwise(names.gather(author)),
            text=pl.when(pl.col("dirt") == 1)
            .then(pl.lit("[removed]"))
            .when(pl.col("dirt") == 2)
            .then(pl.lit("[deleted]"))
            .when((pl.col("dirt") == 4) | pl.col("link_post"))
            .then(pl.lit(""))
            .otherwise(pl.col("text")),
        )
        writer.write(frame)
        kinds_named = pl.Series(KIND_NAMES).gather(kind)
        author_demo = world.user_demo[author]
        truth = pl.DataFrame(
            {
                "post_id": id_series,
                "author": names.gather(author),
                "subreddit": pl.Series(world.subreddits).gather(sub),
                "kind_of_text": kinds_named,
                "topic": topic_names.gather(np.where(topic_idx < 0, 0, topic_idx)),
                "demographic": demo_names.gather(np.where(author_demo < 0, 0, author_demo)),
                "phrase_demographic": demo_names.gather(np.maximum(block.phrase_demo[order], 0)),
                "dirt": pl.Series(DIRT_NAMES).gather(dirt),
                "is_submission": is_root,
            }
        ).with_columns(
            topic=pl.when(pl.Series(topic_idx < 0)).then(None).otherwise(pl.col("topic")),
            demographic=pl.when(pl.Series(author_demo < 0))
            .then(None)
            .otherwise(pl.col("demographic")),
            phrase_demographic=pl.when(pl.Series(block.phrase_demo[order] < 0))
            .then(None)
            .otherwise(pl.col("phrase_demographic")),
        )
        write_parquet(truth, parts_dir / f"part-{block_no:05d}.parquet")
        n_posts += n
        kind_counts += np.bincount(kind, minlength=len(KIND_NAMES))
        dirt_counts += np.bincount(dirt, minlength=len(DIRT_NAMES))
        log.info("block %d: %d posts (total %d)", block_no, n, n_posts)
    writer.close()
    parts = sorted(parts_dir.glob("*.parquet"))
    write_parquet(pl.scan_parquet([str(p) for p in parts]), truth_dir / "post_truth.parquet")
    for p in parts:
        p.unlink()
    parts_dir.rmdir()

    # ground truth: one row per (regular or bot/spam user, demographic)
    rows_author = np.repeat(np.arange(n_users), n_demo)
    rows_demo = np.tile(np.arange(n_demo), n_users)
    member = world.user_demo[rows_author] == rows_demo
    ground = pl.DataFrame(
        {
            "author": names.gather(rows_author),
            "demographic": demo_names.gather(rows_demo),
            "is_member": member,
            "strength": np.where(member, world.user_strength[rows_author], 0.0),
            "in_seed_noise": world.noise_mask[rows_author, rows_demo],
            "account": pl.Series(["regular", "bot", "spam"]).gather(world.user_kind[rows_author]),
        }
    )
    write_parquet(ground, truth_dir / "ground_truth.parquet")
    meta = {
        "parameters": {k: getattr(params, k) for k in params.__dataclass_fields__},
        "n_posts": int(n_posts),
        "n_users": int(n_users),
        "subreddits": world.subreddits,
        "kind_counts": {k: int(c) for k, c in zip(KIND_NAMES, kind_counts, strict=True)},
        "dirt_counts": {k: int(c) for k, c in zip(DIRT_NAMES, dirt_counts, strict=True)},
        "demographics": {
            d.key: {
                "change_point": world.change_points[d.key],
                "member_share": 1 - world.change_points[d.key] / 100,
                "n_members": int((world.user_demo == di).sum()),
                "n_seed_noise_users": world.n_noise[d.key],
                "seed_subreddits": [world.subreddits[j] for j in world.seed_subreddit_ids[di]],
                "markers": {
                    t.topic: [world.marker_phrases[j] for j in world.markers[di, ti]]
                    for ti, t in enumerate(topics)
                },
            }
            for di, d in enumerate(demographics)
        },
        "shared_markers": {
            t.topic: [world.marker_phrases[j] for j in world.shared_markers[ti]]
            for ti, t in enumerate(topics)
        },
        "planted_topics": [t.topic for ti, t in enumerate(topics) if world.planted[ti]],
    }
    write_json(meta, truth_dir / "synth_meta.json")
    return meta
