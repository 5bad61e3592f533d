"""Release-mode retrieval benchmark: the pool index scored with ``lucene`` (``splits.retrieval.bm25``)
side by side with real Lucene through pyserini (the release's ``LuceneSearcher``) on the same
posts and phrase-OR queries, in one run: index build, then per query the ranked and padded list
of ``doc_count`` posts (the release's ``query_bm25_index``: search, then padding). Checks that
both give the same ranked ids on every query.

    python bench/bench_release_retrieval.py --posts 20000 --queries 50

Posts are real Reddit posts (Dreaddit, from ../shared/reference, repeated with distinct ids to
reach ``--posts``); queries are 3-keyword lexicons (a word and two two-word phrases of the
corpus). Needs pyserini 0.21.0 and Java (the ``lucene`` extra).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))

from splits.hypotheses.release import release_list  # noqa: E402
from splits.hypotheses.retrieval import Pool, PoolIndex  # noqa: E402
from splits.retrieval.bm25 import BM25Params  # noqa: E402
from splits.text import words  # noqa: E402
from tiny import parse_args  # noqa: E402 - bench/, the script's folder


def corpus(n_posts: int) -> tuple[list[str], list[str]]:
    frame = pd.read_csv(
        REPO.parent / "shared" / "reference" / "realdata" / "dreaddit" / "dreaddit-train.csv"
    )
    texts = frame["text"].astype(str).tolist()
    out = [texts[i % len(texts)] for i in range(n_posts)]
    return [f"p{i:08d}" for i in range(n_posts)], out


def queries(texts: list[str], count: int, seed: int = 0) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        tokens = words(texts[int(rng.integers(len(texts)))])
        if len(tokens) < 6:
            continue
        i, j, k = (int(v) for v in rng.integers(0, len(tokens) - 1, size=3))
        out.append([tokens[i], f"{tokens[j]} {tokens[j + 1]}", f"{tokens[k]} {tokens[k + 1]}"])
    return out


def lucene(ids, texts, lexicons, doc_count) -> tuple[float, float, list[list[str]]]:
    code = r"""
import json, sys, time, random, hashlib, subprocess
from pathlib import Path
request = json.loads(Path(sys.argv[1]).read_text())
tmp = Path(sys.argv[2])
(tmp / "docs").mkdir()
with open(tmp / "docs" / "d.jsonl", "w") as out:
    for i, t in zip(request["ids"], request["tokens"]):
        out.write(json.dumps({"id": i, "contents": t}) + "\n")
start = time.perf_counter()
subprocess.run([sys.executable, "-m", "pyserini.index.lucene", "--collection", "JsonCollection",
    "--input", str(tmp / "docs"), "--index", str(tmp / "index"), "--generator",
    "DefaultLuceneDocumentGenerator", "--threads", "1", "--storePositions", "--storeDocvectors",
    "--storeRaw", "--pretokenized", "--quiet"], check=True, capture_output=True)
build = time.perf_counter() - start
from pyserini.pyclass import autoclass
from pyserini.search.lucene import LuceneSearcher
searcher = LuceneSearcher(str(tmp / "index"))
searcher.set_bm25(0.9, 0.4)
parser = autoclass("org.apache.lucene.queryparser.flexible.standard.StandardQueryParser")()
parser.setAnalyzer(autoclass("org.apache.lucene.analysis.core.WhitespaceAnalyzer")())
order = [i for i, t in zip(request["ids"], request["tokens"]) if t]
lists = []
start = time.perf_counter()
for keywords in request["lexicons"]:
    text = " OR ".join(f'"{k}"' for k in keywords)
    hits = [h.docid for h in searcher.search(parser.parse(text, "contents"), request["k"])]
    if len(hits) < request["k"]:  # the release pads from its index order (ids kept in memory)
        seen = set(hits)
        pool = [i for i in order if i not in seen]
        random.Random(int(hashlib.md5(text.encode()).hexdigest(), 16) % 2**32).shuffle(pool)
        hits += pool[: request["k"] - len(hits)]
    lists.append(hits)
query = time.perf_counter() - start
print(json.dumps({"build": build, "query": query, "lists": lists}))
"""
    with tempfile.TemporaryDirectory() as tmp:
        request = Path(tmp) / "request.json"
        request.write_text(
            json.dumps(
                {
                    "ids": ids,
                    "tokens": [" ".join(words(t)) for t in texts],
                    "lexicons": lexicons,
                    "k": doc_count,
                }
            )
        )
        work = Path(tmp) / "work"
        work.mkdir()
        done = subprocess.run(
            [sys.executable, "-c", code, str(request), str(work)], capture_output=True, text=True
        )
        if done.returncode:
            raise SystemExit(done.stderr[-3000:])
        result = json.loads(done.stdout.strip().splitlines()[-1])
    return result["build"], result["query"], result["lists"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--doc-count", type=int, default=1000)
    args = parse_args(parser, posts=2000, queries=5, doc_count=100)
    ids, texts = corpus(args.posts)
    lexicons = queries(texts, args.queries)

    start = time.perf_counter()
    pool = Pool("t", "a", "b", np.array(ids, dtype=object), texts, np.arange(len(ids)) % 2 == 0)
    # lucene with its own k1 and b (null in the config); delta is not used by lucene
    index = PoolIndex(pool, params=BM25Params("lucene", None, None, 0.5))
    build = time.perf_counter() - start
    start = time.perf_counter()
    ours = [release_list(index, lex, args.doc_count).docs for lex in lexicons]
    query = time.perf_counter() - start
    ours_ids = [[ids[d] for d in docs] for docs in ours]

    l_build, l_query, l_lists = lucene(ids, texts, lexicons, args.doc_count)
    same = sum(a == b for a, b in zip(ours_ids, l_lists, strict=True))
    print(f"posts {args.posts:,}, queries {args.queries}, doc_count {args.doc_count}")
    print(f"index build   splits {build:8.2f} s   pyserini {l_build:8.2f} s (indexer, new JVM)")
    print(
        f"per query     splits {1000 * query / len(lexicons):8.2f} ms  pyserini "
        f"{1000 * l_query / len(lexicons):8.2f} ms (search + padding)"
    )
    print(f"identical padded lists: {same} of {len(lexicons)}")


if __name__ == "__main__":
    main()
