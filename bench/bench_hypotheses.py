"""Hypothesis validation benchmark: pool index build time, hypotheses per second (BM25 phrase
ranking + lift@k, p, interval and null band at 5 k), the same queries through ``rank_bm25`` and
``bm25s`` in the same run, and triviality per 1,000 lexicons on CPU.

    python bench/bench_hypotheses.py --pools 2 --posts 3000 --lexicons 200      # quick check
    python bench/bench_hypotheses.py                                            # the issue's sizes
    python bench/bench_hypotheses.py --triviality-lexicons 1000 --bert base      # triviality, BERT-base

Target (issue 15): 23,000 hypotheses x 5 k in under 10 minutes on 2 cores (the paper's candidate
count), triviality excluded. Defaults: 10 (topic, pair) pools of 13,500 posts (the paper's pool
size), 1,000 lexicons spread over the pools. Posts are synthetic: Zipf-distributed words with
English stop words, lognormal lengths (about 40 tokens); lexicons hold 1-15 entries, a third of
them 2-3-token phrases cut from the posts (so they match). The peers have no phrase query: they
score the lexicon's tokens as one bag, and are timed on that; ours is timed on the same bags and
on the phrase lexicons. rank_bm25 is slow per query, so it runs ``--rank-bm25-queries`` queries.
The triviality part builds random-weight BERT models locally (no download): ``--bert base`` has
bert-base-uncased's size (12 layers, hidden 768), so its time is that of the real encoder.
"""

from __future__ import annotations

import argparse
import importlib.util
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from splits.config.settings import schema_defaults  # noqa: E402
from splits.hypotheses.heldout_lift import subpool  # noqa: E402
from splits.hypotheses.lexicon import Hypothesis, canonical_lexicon  # noqa: E402
from splits.hypotheses.lift import (  # noqa: E402
    LiftSettings,
    SetResult,
    evaluate_pool,
    lift_frame,
)
from splits.hypotheses.retrieval import Pool, PoolIndex  # noqa: E402
from splits.text import STOP_WORDS  # noqa: E402
from tiny import parse_args, skip  # bench/, the script's folder

K_FRACTIONS = (0.005, 0.01, 0.02, 0.05, 0.10)
PAPER_HYPOTHESES = 23_000
PAPER_POOLS = 89 * 15  # topics x pairs of the 2026 paper


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def make_posts(n: int, vocab: np.ndarray, stop: np.ndarray, rng) -> list[str]:
    lengths = np.clip(rng.lognormal(3.5, 0.6, size=n).astype(np.int64), 1, 400)
    words = (rng.zipf(1.2, size=int(lengths.sum())) - 1) % len(vocab)
    tokens = vocab[words]
    is_stop = rng.random(len(tokens)) < 0.35
    tokens[is_stop] = stop[rng.integers(0, len(stop), int(is_stop.sum()))]
    cuts = np.cumsum(lengths)[:-1]
    return [" ".join(part) for part in np.split(tokens, cuts)]


def make_lexicons(n: int, posts: list[str], vocab: np.ndarray, rng) -> list[list[str]]:
    lexicons = []
    for _ in range(n):
        entries = []
        for _ in range(int(rng.integers(1, 16))):
            if rng.random() < 1 / 3:
                words = posts[int(rng.integers(len(posts)))].split()
                size = int(rng.integers(2, 4))
                start = int(rng.integers(0, max(1, len(words) - size)))
                entries.append(" ".join(words[start : start + size]))
            else:
                entries.append(str(vocab[int(rng.integers(20, min(20_000, len(vocab))))]))
        lexicons.append(entries)
    return lexicons


def bag(lexicon: list[str]) -> list[str]:
    return [t for entry in canonical_lexicon(lexicon) for t in entry]


def top_of(scores: np.ndarray, count: int) -> np.ndarray:
    """The peers' ranked list as deep as the largest k reads: top ``count`` by score."""
    top = np.argpartition(-scores, count - 1)[:count]
    return top[np.argsort(-scores[top], kind="stable")]


def bench_retrieval(args, rng) -> None:
    vocab = np.array([f"w{i}" for i in range(args.vocab)], dtype=object)
    stop = np.array(sorted(STOP_WORDS), dtype=object)
    settings = schema_defaults(LiftSettings, k_fractions=K_FRACTIONS, seed=1)
    bm25 = settings.retrieval.bm25
    pools, builds, hypothesis_time, rank_time, bag_time, lift_rows = [], [], 0.0, 0.0, 0.0, 0
    heldout_time = 0.0
    print(
        f"== {args.pools} pools x {args.posts:,} posts, {args.lexicons:,} lexicons "
        f"({args.lexicons // args.pools} per pool), {len(K_FRACTIONS)} k"
    )
    all_lexicons = []
    deepest = int(max(K_FRACTIONS) * args.posts)  # the posts the largest k reads
    per_pool = max(1, args.lexicons // args.pools)
    for p in range(args.pools):
        texts = make_posts(args.posts, vocab, stop, rng)
        pool = Pool(
            topic=f"topic{p}",
            group_a="a",
            group_b="b",
            post_ids=np.array([f"t{p}-{i}" for i in range(args.posts)], dtype=object),
            texts=texts,
            is_a=rng.random(args.posts) < 0.5,
        )
        index, seconds = timed(PoolIndex, pool, bm25)
        builds.append(seconds)
        lexicons = make_lexicons(per_pool, texts, vocab, rng)
        all_lexicons.append(lexicons)
        hypotheses = [
            Hypothesis(f"h{p}-{i}", pool.topic, "a", "b", "a", tuple(lex), "user")
            for i, lex in enumerate(lexicons)
        ]
        result = SetResult()
        _, seconds = timed(evaluate_pool, index, hypotheses, settings, result)
        hypothesis_time += seconds
        frame, seconds = timed(lift_frame, result.rows, settings.alpha)
        hypothesis_time += seconds
        lift_rows += frame.height
        # the lift job's work with held-out scoring (a seeded half of the posts, its own index,
        # every hypothesis ranked on it too) and the matched posts kept for the redundancy marks
        start = time.perf_counter()
        half = PoolIndex(subpool(pool, rng.random(args.posts) < settings.heldout_fraction), bm25)
        held = SetResult()
        evaluate_pool(index, hypotheses, settings, held, half, keep_matches=True)
        lift_frame(held.rows, settings.alpha)
        heldout_time += time.perf_counter() - start
        start = time.perf_counter()
        for lex in lexicons:
            index.rank(lex, 1, depth=deepest)
        rank_time += time.perf_counter() - start
        start = time.perf_counter()
        for lex in lexicons:
            index.rank(bag(lex), 1, depth=deepest)
        bag_time += time.perf_counter() - start
        pools.append((pool, index, lexicons))
    n = per_pool * args.pools
    rate = n / hypothesis_time
    positions = pools[0][1].positions
    index_mib = (
        sum(a.nbytes for a in (positions.tokens, positions.postings, positions.doc_start)) / 2**20
    )
    print(
        f"splits   index build per pool (tokenising + positions + idf): median "
        f"{np.median(builds):.3f} s, {index_mib:.1f} MiB of arrays per pool"
    )
    print(
        f"splits   hypotheses (rank + lift, p, interval, band at {len(K_FRACTIONS)} k): "
        f"{n:,} in {hypothesis_time:.2f} s = {rate:,.0f} hypotheses/s ({lift_rows:,} rows)"
    )
    print(
        f"splits   the same with held-out scoring and matched posts (the lift job): "
        f"{n / heldout_time:,.0f} hypotheses/s, {heldout_time / hypothesis_time:.2f}x the "
        "all-posts-only time"
    )
    print(
        f"splits   ranking only (first {deepest:,} posts, what the largest k reads): phrase "
        f"lexicons {rank_time / n * 1e3:.3f} ms/query, same lexicons as token bags "
        f"{bag_time / n * 1e3:.3f} ms/query"
    )
    pool, index, lexicons = pools[0]
    tokens = [t.split() for t in pool.texts]

    import bm25s

    retriever = bm25s.BM25(k1=1.5, b=0.75, method="robertson")
    _, build_bm25s = timed(retriever.index, tokens, show_progress=False)
    queries = [bag(lex) for lex in lexicons]
    start = time.perf_counter()
    for q in queries:
        top_of(retriever.get_scores(q), deepest)
    per_bm25s = (time.perf_counter() - start) / len(queries)
    print(
        f"bm25s    index build {build_bm25s:.3f} s; token bag scores + top {deepest:,} "
        f"{per_bm25s * 1e3:.3f} ms/query; ratio bm25s / splits (bags) "
        f"{per_bm25s / (bag_time / n):.2f}x"
    )

    import rank_bm25

    reference, build_ref = timed(rank_bm25.BM25Okapi, tokens)
    start = time.perf_counter()
    for q in queries[: args.rank_bm25_queries]:
        top_of(reference.get_scores(q), deepest)
    per_ref = (time.perf_counter() - start) / min(args.rank_bm25_queries, len(queries))
    print(
        f"rank_bm25 index build {build_ref:.3f} s; token bag scores + top {deepest:,} "
        f"{per_ref * 1e3:.1f} ms/query ({args.rank_bm25_queries} queries); ratio rank_bm25 / "
        f"splits (bags) {per_ref / (bag_time / n):.0f}x"
    )
    projected = PAPER_HYPOTHESES / rate + PAPER_POOLS * float(np.median(builds))
    print(
        f"paper scale: {PAPER_HYPOTHESES:,} hypotheses x {len(K_FRACTIONS)} k over "
        f"{PAPER_POOLS:,} pools of {args.posts:,} posts: {PAPER_HYPOTHESES / rate:.0f} s of queries "
        f"+ {PAPER_POOLS * float(np.median(builds)):.0f} s of index builds = {projected:.0f} s "
        f"(target <= 600 s)"
    )


def build_bert(path: Path, size: str, words: list[str]) -> Path:
    import torch
    import transformers

    hidden, layers, heads = (768, 12, 12) if size == "base" else (64, 2, 4)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ","] + words
    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = transformers.BertTokenizerFast(str(path / "vocab.txt"), do_lower_case=True)
    config = transformers.BertConfig(
        vocab_size=max(len(vocab), 30522),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
    )
    torch.manual_seed(0)
    transformers.BertModel(config).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def bench_triviality(args, rng) -> None:
    import tempfile

    import torch
    from splits.hypotheses.triviality import (
        HashedNgramEncoder,
        TransformersEncoder,
        joined,
        triviality_scores,
    )

    torch.set_num_threads(args.threads)
    vocab = [f"w{i}" for i in range(5000)] + sorted(STOP_WORDS)
    lexicons = [
        [
            " ".join(rng.choice(vocab, size=int(rng.integers(1, 4))))
            for _ in range(rng.integers(3, 16))
        ]
        for _ in range(args.triviality_lexicons)
    ]
    identity = joined(vocab[:9])
    pairs = [(identity, joined(lex)) for lex in lexicons]
    print(f"\n== triviality of {len(pairs):,} lexicons on CPU ({args.threads} torch threads)")
    _, seconds = timed(triviality_scores, HashedNgramEncoder("hashed"), pairs, 256)
    print(f"builtin hashed-ngrams: {seconds:.2f} s = {seconds / len(pairs) * 1000:.1f} s per 1,000")
    with tempfile.TemporaryDirectory() as tmp:
        path = build_bert(Path(tmp) / "bert", args.bert, vocab)
        encoder = TransformersEncoder(
            "bert", {"model": str(path), "device": "cpu", "batch_size": args.batch}
        )
        _, seconds = timed(triviality_scores, encoder, pairs, 256)
    print(
        f"random-weight BERT-{args.bert} (bert-base-uncased's size when 'base'), batch "
        f"{args.batch}: {seconds:.2f} s = {seconds / len(pairs) * 1000:.1f} s per 1,000"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=10)
    parser.add_argument("--posts", type=int, default=13_500, help="posts per pool")
    parser.add_argument("--lexicons", type=int, default=1000, help="lexicons over all pools")
    parser.add_argument("--vocab", type=int, default=50_000)
    parser.add_argument("--rank-bm25-queries", type=int, default=20)
    parser.add_argument("--triviality-lexicons", type=int, default=200)
    parser.add_argument("--bert", choices=("base", "tiny"), default="base")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-triviality", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parse_args(
        parser,
        pools=2,
        posts=300,
        lexicons=20,
        vocab=3000,
        rank_bm25_queries=2,
        triviality_lexicons=4,
        bert="tiny",
    )
    if args.tiny and importlib.util.find_spec("bm25s") is None:
        skip("bm25s, the peer, is not installed (the bench extra: pip install -e '.[bench]')")
    rng = np.random.default_rng(args.seed)
    bench_retrieval(args, rng)
    if not args.skip_triviality:
        bench_triviality(args, rng)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak RSS of the benchmark process: {peak:,.0f} MiB")


if __name__ == "__main__":
    main()
