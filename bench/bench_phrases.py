"""Phrase matching benchmark: ``splits.topics.index.match_keywords`` (candidates from a BM25 index's
posting lists, positions read for the candidates only) side by side, in one run, with a
positional index over every post (``splits.retrieval.phrases.PositionalIndex``) and a brute-force Python
scan (regular expressions, on a sample of posts, projected), over a synthetic shard.

    python bench/bench_phrases.py --posts 300000 --topics 50

Corpus and keywords as in ``bench_bm25.py`` (Zipf words, lognormal lengths; 40 keywords per topic
of 1-2 mid-frequency words), but the keywords stay phrases. Every method's matches are checked
equal on the sampled posts.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_bm25 import make_texts, make_vocabulary  # noqa: E402
from tiny import parse_args  # bench/, the script's folder


def main() -> None:
    from splits.config.settings import schema_defaults
    from splits.retrieval.phrases import PositionalIndex
    from splits.topics.index import BM25Index, match_keywords
    from splits.topics.settings import TopicBM25Settings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=300_000)
    parser.add_argument("--topics", type=int, default=50)
    parser.add_argument("--vocab", type=int, default=200_000)
    parser.add_argument("--sample", type=int, default=5_000, help="posts scanned by brute force")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--stop-words", action="store_true", help="add two keywords made of stop words only"
    )
    args = parse_args(parser, posts=3000, topics=5, vocab=5000, sample=500)
    rng = np.random.default_rng(args.seed)
    vocab = make_vocabulary(args.vocab)
    texts = make_texts(args.posts, vocab, rng)
    phrases = [
        " ".join(vocab[rng.integers(50, min(5000, len(vocab)), size=rng.integers(1, 3))])
        for _ in range(40 * args.topics)
    ]
    # stop-word-only keywords (the release's topics have "UN"): candidates from a scan of words
    texts = texts + " " + pl.Series(rng.choice(["", "the of", "of the"], size=args.posts))
    phrases += ["the of", "of"] if args.stop_words else []
    multi = sum(" " in p for p in phrases)
    print(f"{args.posts:,} posts, {len(phrases):,} keywords ({multi:,} of two words)")

    start = time.perf_counter()
    index = BM25Index.from_texts(texts, schema_defaults(TopicBM25Settings).params())
    print(f"BM25 index (the stage builds it anyway): {time.perf_counter() - start:8.2f} s")

    start = time.perf_counter()
    found = match_keywords(index, texts, phrases)
    fast = time.perf_counter() - start
    print(f"match_keywords (postings -> candidates -> positions): {fast:8.2f} s")

    start = time.perf_counter()
    full = PositionalIndex(texts)
    built = time.perf_counter() - start
    every = full.match(phrases)
    whole = time.perf_counter() - start
    print(f"PositionalIndex over every post: {whole:8.2f} s (build {built:.2f} s)")

    sample = np.sort(rng.choice(args.posts, size=min(args.sample, args.posts), replace=False))
    patterns = [re.compile(r"(?<!\w)" + r"\W+".join(p.split()) + r"(?!\w)") for p in phrases]
    sample_texts = [texts[int(i)] or "" for i in sample]
    start = time.perf_counter()
    brute = [
        {int(sample[j]) for j, t in enumerate(sample_texts) if pat.search(t)} for pat in patterns
    ]
    scan = time.perf_counter() - start
    projected = scan * args.posts / len(sample)
    print(
        f"brute-force regex scan: {scan:8.2f} s on {len(sample):,} posts, "
        f"{projected:8.1f} s projected to {args.posts:,}"
    )
    chosen = set(sample.tolist())
    for i, phrase in enumerate(phrases):
        a = {int(d) for d in found.docs[i]} & chosen
        b = {int(d) for d in every.docs[i]} & chosen
        assert a == b == brute[i], phrase
    print(
        f"all three agree on the sampled posts; match_keywords {projected / fast:,.0f}x brute force, "
        f"{whole / fast:.1f}x faster than a full positional index"
    )


if __name__ == "__main__":
    main()
