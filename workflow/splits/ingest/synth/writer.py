"""Writes blocks of generated posts as ConvoKit v1 corpus folders or Pushshift RS_/RC_ NDJSON
(optionally zstd), one shard after another."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import polars as pl

from splits.ingest.synth.world import (
    SynthParams,
)

# --------------------------------------------------------------------------- writers


def _top_level(reply: np.ndarray) -> np.ndarray:
    """Position of each comment's top-level ancestor (the comment replying to the root)."""
    n = len(reply)
    idx = np.arange(n)
    parent = np.where(reply < 0, idx, reply)
    is_root = reply < 0
    parent_is_root = is_root[parent] & ~is_root
    top = np.where(parent_is_root | is_root, idx, parent)
    for _ in range(64):
        nxt = np.where(parent_is_root[top] | is_root[top], top, parent[top])
        if np.array_equal(nxt, top):
            break
        top = nxt
    return top


class CorpusWriter:
    """Streams blocks of posts into shard directories (ConvoKit) or RS_/RC_ files (Pushshift)."""

    def __init__(
        self, out_dir: Path, params: SynthParams, subreddits: list[str], user_names: list[str]
    ):
        self.out_dir = out_dir
        self.params = params
        self.subreddits = subreddits
        self.user_names = user_names
        self.n_shards = params.shards
        self.handles: dict[str, object] = {}
        self.first_conversation = [True] * self.n_shards
        self.speakers = [set() for _ in range(self.n_shards)]
        self.counts = [[0, 0] for _ in range(self.n_shards)]  # submissions, comments
        out_dir.mkdir(parents=True, exist_ok=True)
        for i in range(self.n_shards):
            if params.format == "convokit":
                d = out_dir / f"sample-{i}"
                d.mkdir(parents=True, exist_ok=True)
                self._open(f"utt{i}", d / "utterances.jsonl")
                self._open(f"conv{i}", d / "conversations.json").write(b"{")
            else:
                suffix = ".ndjson.zst" if params.compress else ".ndjson"
                self._open(f"rs{i}", out_dir / f"RS_sample-{i}{suffix}")
                self._open(f"rc{i}", out_dir / f"RC_sample-{i}{suffix}")

    def _open(self, key: str, path: Path):
        raw = open(path, "wb")
        if path.suffix == ".zst":
            import zstandard

            fh = zstandard.ZstdCompressor(level=3).stream_writer(raw, closefd=True)
        else:
            fh = raw
        self.handles[key] = fh
        return fh

    def write(self, frame: pl.DataFrame) -> None:
        """``frame``: one block's posts in conversation order with the columns built in
        ``generate`` (id, conversation_id, reply_to, top_level, timestamp, speaker, author_id,
        text, title, score, subreddit_id, is_root, num_comments)."""
        frame = frame.with_columns(shard=pl.col("subreddit_id") % self.n_shards)
        names = pl.Series("subreddit", self.subreddits)
        frame = frame.with_columns(subreddit=names.gather(frame["subreddit_id"]))
        for shard_index, part in frame.group_by("shard", maintain_order=True):
            shard = int(shard_index[0])
            self.speakers[shard].update(part["speaker"].unique().to_list())
            n_sub = int(part["is_root"].sum())
            self.counts[shard][0] += n_sub
            self.counts[shard][1] += part.height - n_sub
            if self.params.format == "convokit":
                self._write_convokit(shard, part)
            else:
                self._write_pushshift(shard, part)

    def _write_convokit(self, shard: int, part: pl.DataFrame) -> None:
        utt = part.select(
            "id",
            "conversation_id",
            "text",
            "speaker",
            pl.struct(
                "score",
                top_level_comment=pl.when(pl.col("is_root"))
                .then(None)
                .otherwise(pl.col("top_level")),
                retrieved_on=pl.col("timestamp") + 86400,
                gilded=pl.lit(0),
                subreddit=pl.col("subreddit"),
                stickied=pl.lit(False),
                permalink=pl.format("/r/{}/comments/{}/", "subreddit", "conversation_id"),
                author_flair_text=pl.lit(""),
            ).alias("meta"),
            pl.col("reply_to").alias("reply-to"),
            "timestamp",
            pl.lit([], dtype=pl.List(pl.String)).alias("vectors"),
        )
        buf = io.BytesIO()
        utt.write_ndjson(buf)
        self.handles[f"utt{shard}"].write(buf.getvalue())
        roots = part.filter(pl.col("is_root"))
        conv = self.handles[f"conv{shard}"]
        pieces = []
        for row in roots.select(
            "id", "title", "num_comments", "timestamp", "subreddit"
        ).iter_rows():
            cid, title, num_comments, ts, sub = row
            meta = {
                "title": title,
                "num_comments": num_comments,
                "domain": f"self.{sub}",
                "timestamp": ts,
                "subreddit": sub,
                "gilded": 0,
                "stickied": False,
                "author_flair_text": "",
            }
            entry = json.dumps(cid) + ": " + json.dumps({"meta": meta, "vectors": []})
            if self.first_conversation[shard]:
                self.first_conversation[shard] = False
                pieces.append(entry)
            else:
                pieces.append(", " + entry)
        conv.write("".join(pieces).encode("utf-8"))

    def _write_pushshift(self, shard: int, part: pl.DataFrame) -> None:
        # each record carries its fullname (``name``, ``t3_``/``t1_`` + id) as the dumps do
        subs = part.filter(pl.col("is_root")).select(
            "id",
            pl.format("t3_{}", "id").alias("name"),
            pl.col("speaker").alias("author"),
            "subreddit",
            pl.col("timestamp").alias("created_utc"),
            "title",
            pl.col("text").alias("selftext"),
            "score",
            "num_comments",
        )
        comments = part.filter(~pl.col("is_root")).select(
            "id",
            pl.format("t1_{}", "id").alias("name"),
            pl.col("speaker").alias("author"),
            "subreddit",
            pl.col("timestamp").alias("created_utc"),
            pl.col("text").alias("body"),
            "score",
            pl.when(pl.col("reply_to") == pl.col("conversation_id"))
            .then(pl.format("t3_{}", "reply_to"))
            .otherwise(pl.format("t1_{}", "reply_to"))
            .alias("parent_id"),
            pl.format("t3_{}", "conversation_id").alias("link_id"),
        )
        for key, frame in ((f"rs{shard}", subs), (f"rc{shard}", comments)):
            if frame.height:
                buf = io.BytesIO()
                frame.write_ndjson(buf)
                self.handles[key].write(buf.getvalue())

    def close(self) -> None:
        for i in range(self.n_shards):
            if self.params.format != "convokit":
                continue
            d = self.out_dir / f"sample-{i}"
            self.handles[f"conv{i}"].write(b"}")
            speakers = {name: {"meta": {}, "vectors": []} for name in sorted(self.speakers[i])}
            (d / "speakers.json").write_text(json.dumps(speakers), encoding="utf-8")
            corpus = {
                "name": f"sample-{i}",
                "num_posts": self.counts[i][0],
                "num_comments": self.counts[i][1],
            }
            (d / "corpus.json").write_text(json.dumps(corpus), encoding="utf-8")
            index = {
                "utterances-index": {
                    "score": ["<class 'int'>"],
                    "top_level_comment": ["<class 'str'>"],
                    "retrieved_on": ["<class 'int'>"],
                    "gilded": ["<class 'int'>"],
                    "subreddit": ["<class 'str'>"],
                    "stickied": ["<class 'bool'>"],
                    "permalink": ["<class 'str'>"],
                    "author_flair_text": ["<class 'str'>"],
                },
                "speakers-index": {},
                "conversations-index": {
                    "title": ["<class 'str'>"],
                    "num_comments": ["<class 'int'>"],
                    "domain": ["<class 'str'>"],
                    "timestamp": ["<class 'int'>"],
                    "subreddit": ["<class 'str'>"],
                    "gilded": ["<class 'int'>"],
                    "stickied": ["<class 'bool'>"],
                    "author_flair_text": ["<class 'str'>"],
                },
                "overall-index": {
                    "name": ["<class 'str'>"],
                    "num_posts": ["<class 'int'>"],
                    "num_comments": ["<class 'int'>"],
                },
                "version": 1,
                "vectors": [],
            }
            (d / "index.json").write_text(json.dumps(index), encoding="utf-8")
        for fh in self.handles.values():
            fh.close()
