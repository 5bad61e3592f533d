"""Benchmark: self-ID phrase matching (splits.demographics.phrases.find_phrases, vectorised polars/Rust regex)
against a plain Python ``re`` loop over the same posts, with the same matches.

The text is made so that the phrases' words are everywhere ("I'm", "a", "am", "teacher",
"Catholic", "not", ...), which is the hard case for a regex engine: almost every position
starts a partial match. Phrases: every self-ID and anti-self-ID phrase of the chosen
demographics of the paper (config/demographics.yaml), as the pipeline compiles them.

    python bench/bench_selfid.py --mb 5            # try small first
    python bench/bench_selfid.py --mb 200 --demographic all

Prints MB/s of both and the speed-up (target >= 50x); the Python peer can be timed on a
fraction of the posts (--peer-fraction) and the matches are compared on that fraction.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from splits.config.definitions import load_demographics  # noqa: E402
from splits.demographics.phrases import PhraseSet, find_phrases  # noqa: E402
from tiny import parse_args  # noqa: E402 - bench/, the script's folder

COMMON = (
    "I I I I'm I'm I’m am am a a a an as As not not Catholic teacher teachers teaching "
    "teach Jewish black white in work construction the the the and to of my is it that "
    "was for on with you this but be have at just like so he she they we do don't "
    "Christian student nurse engineer Hindu Sikh Jain builder welder school class"
).split()


def make_posts(megabytes: float, seed: int = 0, words_per_post: int = 60) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    vocab = np.array(COMMON)
    avg_word = float(np.mean([len(w) + 1 for w in COMMON]))
    n_posts = max(1, int(megabytes * 1e6 / (avg_word * words_per_post)))
    words = rng.choice(vocab, size=(n_posts, words_per_post))
    punct = rng.choice(
        np.array(["", "", "", "", ",", ".", "?", "!"]), size=(n_posts, words_per_post)
    )
    tokens = np.char.add(words, punct)
    texts = [" ".join(row) for row in tokens]
    return pl.DataFrame(
        {
            "post_id": [f"p{i:09d}" for i in range(n_posts)],
            "author": [f"u{i % 9973}" for i in range(n_posts)],
            "text": texts,
        }
    )


def python_peer(texts: list[str], phrases: PhraseSet) -> list[tuple[int, int, int]]:
    pattern = re.compile(phrases.pattern)
    return [(i, m.start(), m.end()) for i, text in enumerate(texts) for m in pattern.finditer(text)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=5.0, help="megabytes of text")
    parser.add_argument(
        "--demographic", default="all", help="a demographic key of the paper, or all"
    )
    parser.add_argument("--peer-fraction", type=float, default=1.0, help="share timed in Python")
    parser.add_argument("--demographics", default=str(ROOT / "config" / "demographics.yaml"))
    args = parse_args(parser, mb=0.2)

    demographics = load_demographics(args.demographics)
    chosen = [d for d in demographics if args.demographic in ("all", d.key)]
    if not chosen:
        parser.error(f"no demographic {args.demographic!r}")
    self_phrases = {p for d in chosen for p in d.self_id_phrases}
    anti_phrases = {p for d in chosen for p in d.anti_self_id_phrases}
    phrases = (
        PhraseSet.from_lists(sorted(self_phrases), sorted(anti_phrases - {p for p in self_phrases}))
        if args.demographic != "all"
        else PhraseSet.from_lists(sorted(self_phrases | anti_phrases), [])
    )
    posts = make_posts(args.mb)
    size_mb = posts["text"].str.len_bytes().sum() / 1e6
    print(f"{posts.height} posts, {size_mb:.1f} MB of text, {len(phrases.kinds)} phrases")

    find_phrases(posts.head(100), phrases, 150)  # warm up (regex compilation)
    started = time.perf_counter()
    found = find_phrases(posts, phrases, context_chars=150)
    ours = time.perf_counter() - started
    print(f"splits find_phrases: {ours:.2f} s, {size_mb / ours:.1f} MB/s, {found.height} matches")

    n_peer = max(1, int(posts.height * args.peer_fraction))
    texts = posts["text"].head(n_peer).to_list()
    peer_mb = sum(len(t.encode()) for t in texts) / 1e6
    started = time.perf_counter()
    reference = python_peer(texts, phrases)
    peer = time.perf_counter() - started
    print(f"python re loop:      {peer:.2f} s, {peer_mb / peer:.1f} MB/s, {len(reference)} matches")

    index = {pid: i for i, pid in enumerate(posts["post_id"].head(n_peer).to_list())}
    mine = sorted(
        (index[pid], s, e)
        for pid, s, e in found.select("post_id", "start", "end").iter_rows()
        if pid in index
    )
    same = mine == sorted(reference)
    print(f"same matches: {same}")
    ratio = (size_mb / ours) / (peer_mb / peer)
    print(f"speed-up vs python re: {ratio:.1f}x (target >= 50x)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
