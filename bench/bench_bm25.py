"""BM25 benchmark: index build time and per-query latency of ``splits.topics.index.BM25Index`` side by
side with ``rank_bm25.BM25Okapi`` (per query, a few queries only) and ``bm25s`` in one run, then
the topic-split retrieval (topics x demographics) over a large synthetic corpus.

    python bench/bench_bm25.py --sizes 20000                 # quick check
    python bench/bench_bm25.py --sizes 100000 1000000        # the issue's sizes
    python bench/bench_bm25.py --sizes 100000 --retrieval-posts 3000000 --topics 200 --demographics 6

Targets (issue 5): >= 1000x faster than rank_bm25 per query at 100k documents, no slower than
bm25s; retrieval of 200 topics x 6 demographics over 3M posts in <= 10 minutes on 2 cores.
Corpora are synthetic: Zipf-distributed words (vocabulary ``--vocab``), lognormal lengths (mean
about 30 tokens); queries are 40 "keyword phrases" of 1-2 mid-frequency words (~60 tokens), like
the paper's topics.
"""

from __future__ import annotations

import argparse
import importlib.util
import time

import numpy as np
import polars as pl
from tiny import parse_args, skip  # bench/, the script's folder


def make_vocabulary(size: int) -> np.ndarray:
    return np.array([f"w{i}x" for i in range(size)], dtype=object)


def make_token_ids(
    n_docs: int, vocab_size: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.clip(rng.lognormal(3.2, 0.7, size=n_docs).astype(np.int64), 0, 400)
    ids = (rng.zipf(1.15, size=int(lengths.sum())) - 1) % vocab_size
    return lengths, ids


def make_texts(n_docs: int, vocab: np.ndarray, rng: np.random.Generator) -> pl.Series:
    lengths, ids = make_token_ids(n_docs, len(vocab), rng)
    frame = pl.DataFrame(
        {
            "doc": np.repeat(np.arange(n_docs), lengths),
            "word": pl.Series(vocab[ids].tolist(), dtype=pl.String),
        }
    )
    texts = frame.group_by("doc", maintain_order=True).agg(pl.col("word").str.join(" "))
    out = [""] * n_docs
    full = pl.DataFrame({"doc": np.arange(n_docs)}).join(texts, on="doc", how="left").sort("doc")
    out = full.get_column("word").fill_null("")
    return out


def make_queries(n: int, vocab: np.ndarray, rng: np.random.Generator) -> list[list[str]]:
    # mid-frequency words (ranks 50..5000): like topic keywords
    high = min(5000, len(vocab))
    queries = []
    for _ in range(n):
        phrases = [
            " ".join(vocab[rng.integers(50, high, size=rng.integers(1, 3))]) for _ in range(40)
        ]
        queries.append([t for p in phrases for t in p.split()])
    return queries


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def bench_size(n_docs: int, args: argparse.Namespace, rng: np.random.Generator) -> None:
    from splits.config.settings import schema_defaults
    from splits.topics.index import BM25Index
    from splits.topics.settings import TopicBM25Settings

    robertson = schema_defaults(TopicBM25Settings).params()  # topics.bm25's default

    vocab = make_vocabulary(args.vocab)
    texts = make_texts(n_docs, vocab, rng)
    queries = make_queries(args.queries, vocab, rng)
    index, build_ours = timed(BM25Index.from_texts, texts, robertson)
    tokens = [t.split() for t in texts.to_list()]
    index_tok, build_ours_tok = timed(BM25Index.from_token_lists, tokens, robertson)
    ours = []
    for q in queries:
        _, t = timed(index.search, q, args.k)
        ours.append(t)
    per_query_ours = float(np.median(ours))
    print(
        f"\n== {n_docs:,} documents, {int(sum(map(len, tokens))):,} tokens, {len(index.vocabulary):,} terms"
    )
    print(
        f"splits.topics.index      build (from texts, incl. tokenising) {build_ours:8.2f} s; from token lists {build_ours_tok:8.2f} s"
    )
    print(
        f"splits.topics.index      per query (top {args.k})             {per_query_ours * 1e3:10.3f} ms (median of {len(queries)})"
    )

    import bm25s

    retriever = bm25s.BM25(k1=1.5, b=0.75, method="robertson")
    _, build_bm25s = timed(retriever.index, tokens, show_progress=False)
    times = []
    for q in queries:
        _, t = timed(retriever.retrieve, [q], k=args.k, show_progress=False, n_threads=1)
        times.append(t)
    per_query_bm25s = float(np.median(times))
    print(f"bm25s        build (from token lists)             {build_bm25s:8.2f} s")
    print(f"bm25s        per query (top {args.k})             {per_query_bm25s * 1e3:10.3f} ms")
    print(f"ratio bm25s / splits per query: {per_query_bm25s / per_query_ours:8.2f}x (target >= 1)")

    if n_docs <= args.rank_bm25_max_docs:
        import rank_bm25

        reference, build_ref = timed(rank_bm25.BM25Okapi, tokens)
        ref_times = []
        for q in queries[: args.rank_bm25_queries]:
            scores, t = timed(reference.get_scores, q)
            ref_times.append(t)
            assert np.array_equal(scores, index_tok.get_scores(q))
        per_query_ref = float(np.median(ref_times))
        print(f"rank_bm25    build                                {build_ref:8.2f} s")
        print(
            f"rank_bm25    per query (scores only)              {per_query_ref * 1e3:10.3f} ms (median of {len(ref_times)})"
        )
        print(
            f"ratio rank_bm25 / splits per query: {per_query_ref / per_query_ours:8.0f}x (target >= 1000)"
        )
    else:
        print(
            f"rank_bm25    skipped above {args.rank_bm25_max_docs:,} documents (--rank-bm25-max-docs)"
        )


def proc_status_mib(field: str) -> float:
    """A memory field of /proc/self/status (VmRSS, VmHWM) in MiB (Linux)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def timed_with_peak_rss(fn, *args, **kwargs):
    """(result, seconds, RSS before MiB, peak RSS MiB) of ``fn``: the kernel's high-water mark
    is reset first (``5`` into /proc/self/clear_refs), so the peak is the call's own, not
    that of the corpus generation before it, and no short spike is missed."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    before = proc_status_mib("VmRSS")
    result, seconds = timed(fn, *args, **kwargs)
    return result, seconds, before, proc_status_mib("VmHWM")


def bench_retrieval(args: argparse.Namespace, rng: np.random.Generator) -> None:
    from splits.config.definitions import Topic
    from splits.config.settings import schema_defaults
    from splits.topics.in_process import topic_splits
    from splits.topics.settings import TopicSplitSettings

    vocab = make_vocabulary(args.vocab)
    n = args.retrieval_posts
    start = time.perf_counter()
    texts = make_texts(n, vocab, rng)
    keys = [f"group{i}" for i in range(args.demographics)]
    posts = pl.DataFrame(
        {
            "post_id": [f"p{i:09d}" for i in range(n)],
            "author": [f"u{i % 100000}" for i in range(n)],
            "subreddit": "s",
            "text": texts,
            "demographic": pl.Series(
                np.array(keys, dtype=object)[rng.integers(0, len(keys), size=n)].tolist()
            ),
        }
    )
    queries = make_queries(args.topics, vocab, rng)
    topics = [Topic(f"cat{i % 10}", f"topic{i}", tuple(q)) for i, q in enumerate(queries)]
    print(
        f"\n== retrieval: {n:,} posts, {args.topics} topics x {args.demographics} demographics "
        f"(corpus made in {time.perf_counter() - start:.1f} s)"
    )
    table, seconds, before, peak = timed_with_peak_rss(
        topic_splits, posts, topics, schema_defaults(TopicSplitSettings, top_k=3000)
    )
    print(
        f"topic_splits (index + {args.topics} queries + per-group top 3000 + 25% cut): {seconds:8.1f} s, "
        f"{len(table):,} topic posts (target <= 600 s)"
    )
    print(
        f"memory: {before:,.0f} MiB with the posts loaded, peak {peak:,.0f} MiB during topic_splits "
        f"(+{peak - before:,.0f} MiB for the index and the queries)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", type=int, nargs="*", default=[20000], help="corpus sizes (documents)"
    )
    parser.add_argument("--queries", type=int, default=20, help="queries timed per size")
    parser.add_argument("--k", type=int, default=3000, help="top k per query")
    parser.add_argument("--vocab", type=int, default=200000, help="vocabulary size")
    parser.add_argument(
        "--rank-bm25-queries", type=int, default=3, help="queries timed with rank_bm25"
    )
    parser.add_argument(
        "--rank-bm25-max-docs", type=int, default=100000, help="skip rank_bm25 above this size"
    )
    parser.add_argument(
        "--retrieval-posts", type=int, default=0, help="posts for the retrieval benchmark (0: skip)"
    )
    parser.add_argument("--topics", type=int, default=200)
    parser.add_argument("--demographics", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    args = parse_args(
        parser,
        sizes=[2000],
        retrieval_posts=3000,
        queries=3,
        k=100,
        vocab=5000,
        rank_bm25_queries=1,
        topics=5,
        demographics=2,
    )
    if args.tiny and importlib.util.find_spec("bm25s") is None:
        skip("bm25s, the peer, is not installed (the bench extra: pip install -e '.[bench]')")
    rng = np.random.default_rng(args.seed)
    for size in args.sizes:
        bench_size(size, args, rng)
    if args.retrieval_posts:
        bench_retrieval(args, rng)


if __name__ == "__main__":
    main()
