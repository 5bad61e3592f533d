"""Benchmark: the BM25 topic splits' tokeniser (``splits.text.word_frame``: ASCII texts through
a byte table and a split, the others through polars' regex) against its peer, the reference it
must equal (``reference_word_frame``: polars' lowercase, ``extract_all`` and explode on every
text, what ``splits.topics.corpus._token_frame`` ran before), on the same texts in the same run;
and the job the tokeniser is most of, a shard's statistics (``ShardCounts.from_texts``, rule
topic_shard_stats), with each of the two.

The texts are generated (Zipf words from a vocabulary holding the English stop words, mixed case,
punctuation and numbers; ``--unicode``: the share of texts with a non-ASCII word), or read from
``--shard`` (a posts parquet file with a ``text`` column). Each timing runs in this process
after a warm-up, the two interleaved (``--repeats`` rounds, medians), with polars on one thread
as the rules run it; the rows and the statistics are checked equal.

    python bench/bench_topic_tokens.py --posts 540000
    python bench/bench_topic_tokens.py --shard /tmp/ts0/00000.parquet
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))
os.environ.setdefault("POLARS_MAX_THREADS", "1")  # as the rules run it (threads: 1)

import polars as pl  # noqa: E402
from splits.text import STOP_WORDS, reference_word_frame  # noqa: E402
from splits.topics import corpus  # noqa: E402
from tiny import parse_args  # noqa: E402 - bench/, the script's folder

PUNCTUATION = [" ", " ", " ", " ", ", ", ". ", "! ", "? ", "'s ", " - ", ": ", "\n", " (", ") "]
UNICODE_WORDS = ["café", "naïve", "Straße", "it’s", "“quoted”", "ΣΟΦΙΑ", "日本語", "😀", "İzmir"]


def make_texts(posts: int, unicode_share: float, seed: int) -> pl.Series:
    rng = np.random.default_rng(seed)
    base = sorted(STOP_WORDS) + [f"word{i}" for i in range(20_000)] + [str(i) for i in range(500)]
    words = pl.Series(
        base + [w.capitalize() for w in base[:2000]] + [w.upper() for w in base[:300]]
    )
    lengths = np.clip(rng.lognormal(3.4, 0.6, posts).astype(np.int64), 1, 400)
    n = int(lengths.sum())
    picked = words.gather(rng.zipf(1.2, n) % len(words))
    glue = pl.Series(PUNCTUATION).gather(rng.integers(0, len(PUNCTUATION), n))
    frame = pl.DataFrame({"doc": np.repeat(np.arange(posts), lengths), "w": picked + glue})
    texts = frame.group_by("doc", maintain_order=True).agg(pl.col("w").str.join("")).get_column("w")
    odd = rng.random(posts) < unicode_share
    extra = pl.Series(UNICODE_WORDS).gather(rng.integers(0, len(UNICODE_WORDS), posts))
    return pl.select(pl.when(pl.Series(odd)).then(texts + " " + extra).otherwise(texts)).to_series()


def reference_token_frame(texts: pl.Series) -> pl.DataFrame:
    return reference_word_frame(texts, drop_stop_words=True)


def shard_counts(texts: pl.Series, token_frame) -> corpus.ShardCounts:
    """``ShardCounts.from_texts`` with ``token_frame`` as the module's tokeniser."""
    saved = corpus._token_frame
    corpus._token_frame = token_frame
    try:
        return corpus.ShardCounts.from_texts(texts)
    finally:
        corpus._token_frame = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=540_000, help="generated texts")
    parser.add_argument("--unicode", type=float, default=0.05, help="share of non-ASCII texts")
    parser.add_argument("--shard", type=Path, help="read the texts of this posts parquet file")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parse_args(parser, posts=3000, repeats=1)
    if args.shard:
        texts = pl.read_parquet(args.shard, columns=["text"]).get_column("text")
    else:
        texts = make_texts(args.posts, args.unicode, args.seed)
    not_ascii = float((texts.str.len_bytes() != texts.str.len_chars()).mean() or 0.0)
    tokenisers = {"fast": corpus._token_frame, "reference": reference_token_frame}
    runs = {f"{job} {name}": [] for job in ("tokens", "stats") for name in tokenisers}
    frames, counts = {}, {}
    for round_ in range(args.repeats + 1):  # round 0 warms up
        for name, token_frame in tokenisers.items():
            start = time.perf_counter()
            frames[name] = token_frame(texts)
            middle = time.perf_counter()
            counts[name] = shard_counts(texts, token_frame)
            end = time.perf_counter()
            if round_:
                runs[f"tokens {name}"].append(middle - start)
                runs[f"stats {name}"].append(end - middle)
    assert frames["fast"].schema == frames["reference"].schema
    assert frames["fast"].equals(frames["reference"])
    fast, reference = counts["fast"], counts["reference"]
    assert (fast.n_docs, fast.total_len, fast.n_nonempty) == (
        reference.n_docs,
        reference.total_len,
        reference.n_nonempty,
    )
    assert fast.vocabulary.equals(reference.vocabulary)
    med = {key: statistics.median(values) for key, values in runs.items()}
    source = args.shard or "generated"
    megabytes = texts.str.len_bytes().sum() / 1e6
    print(
        f"{len(texts):,} texts ({source}, {megabytes:,.1f} MB, {not_ascii:.1%} not ASCII): "
        f"{frames['fast'].height:,} tokens, {fast.vocabulary.height:,} terms"
    )
    print(f"tokens, word_frame (the fast path):        {med['tokens fast']:7.2f} s (median)")
    print(f"tokens, reference_word_frame (the peer):   {med['tokens reference']:7.2f} s (median)")
    print(f"ShardCounts.from_texts, fast tokeniser:    {med['stats fast']:7.2f} s (median)")
    print(f"ShardCounts.from_texts, reference:         {med['stats reference']:7.2f} s (median)")
    print(
        f"ratio reference / fast: tokens {med['tokens reference'] / med['tokens fast']:.2f}x, "
        f"statistics {med['stats reference'] / med['stats fast']:.2f}x; "
        f"{args.repeats} rounds; load average {os.getloadavg()[0]:.1f}"
    )
    print("same tokens and statistics")


if __name__ == "__main__":
    main()
