"""Real Lucene (pyserini's Anserini jar) as an oracle, run in its own process (the JVM stays out
of the test process).

    python tests/lucene_oracle.py REQUEST.json RESULT.json

REQUEST: {"docs": [{"id", "contents"}], "pretokenized": bool, "tokenizer": path or null,
"queries": [query string], "k": int, "k1": float, "b": float}. ``pretokenized`` indexes the
contents split on whitespace (``WhitespaceAnalyzer``) and parses queries with it; ``tokenizer``
(a local ``tokenizer.json``) indexes and parses with Anserini's ``hgf_tokenizer`` analyzer
instead, as the 2026 release does. Every index stores positions (phrase queries need them).

RESULT: per query the ranked external ids, Lucene's raw float scores (``IndexSearcher`` with
``BM25Similarity(k1, b)`` sorted as Anserini sorts: score, then id), and the ids and scores of
pyserini's ``LuceneSearcher.search`` (the displayed ``hit.score``); ``num_docs``; ``terms``: the
analyzer's tokens of each document (hgf only, for checking the analyzer); with ``"index_order":
true``, ``index_ids``: the external ids in the index's internal document order, read from each
document's raw JSON as the release's padding reads them (``searcher.doc(docnum)`` for docnum in
``range(searcher.num_docs)``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path


def main(request_path: str, result_path: str) -> None:
    request = json.loads(Path(request_path).read_text())
    if request.get("release_jar"):
        Path(result_path).write_text(json.dumps(release_jar(request)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        collection = Path(tmp) / "docs"
        collection.mkdir()
        with open(collection / "docs.jsonl", "w") as out:
            for doc in request["docs"]:
                out.write(json.dumps(doc) + "\n")
        index = Path(tmp) / "index"
        command = [
            sys.executable,
            "-m",
            "pyserini.index.lucene",
            "--collection",
            "JsonCollection",
            "--input",
            str(collection),
            "--index",
            str(index),
            "--generator",
            "DefaultLuceneDocumentGenerator",
            "--threads",
            "1",
            "--storePositions",
            "--storeDocvectors",
            "--storeRaw",
        ]
        if request.get("tokenizer"):
            command += ["--analyzeWithHuggingFaceTokenizer", request["tokenizer"]]
        else:
            command += ["--pretokenized"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(done.stdout[-3000:] + done.stderr[-3000:])
        result = search(str(index), request)
    Path(result_path).write_text(json.dumps(result))


def search(index: str, request: dict) -> dict:
    from pyserini.analysis import get_lucene_analyzer
    from pyserini.pyclass import autoclass
    from pyserini.search.lucene import LuceneSearcher

    k1, b, k = float(request["k1"]), float(request["b"]), int(request["k"])
    if request.get("tokenizer"):
        analyzer = get_lucene_analyzer(
            language="hgf_tokenizer", huggingFaceTokenizer=request["tokenizer"]
        )
    else:
        analyzer = autoclass("org.apache.lucene.analysis.core.WhitespaceAnalyzer")()
    parser = autoclass("org.apache.lucene.queryparser.flexible.standard.StandardQueryParser")()
    parser.setAnalyzer(analyzer)
    searcher = LuceneSearcher(index)
    searcher.set_bm25(k1, b)

    File = autoclass("java.io.File")
    reader = autoclass("org.apache.lucene.index.DirectoryReader").open(
        autoclass("org.apache.lucene.store.FSDirectory").open(File(index).toPath())
    )
    raw = autoclass("org.apache.lucene.search.IndexSearcher")(reader.getContext())
    raw.setSimilarity(autoclass("org.apache.lucene.search.similarities.BM25Similarity")(k1, b))
    SortField = autoclass("org.apache.lucene.search.SortField")
    Type = autoclass("org.apache.lucene.search.SortField$Type")
    sort = autoclass("org.apache.lucene.search.Sort")(
        SortField.FIELD_SCORE, SortField("id", Type.STRING_VAL)
    )
    out = {"num_docs": searcher.num_docs, "queries": []}
    for text in request["queries"]:
        query = parser.parse(text, "contents")
        top = raw.search(query, k, sort, True)
        raw_ids = [raw.doc(d.doc).get("id") for d in top.scoreDocs]
        raw_scores = [float(d.score) for d in top.scoreDocs]
        hits = searcher.search(query, k)
        out["queries"].append(
            {
                "query": text,
                "parsed": query.toString(),
                "raw_ids": raw_ids,
                "raw_scores": raw_scores,
                "ids": [h.docid for h in hits],
                "scores": [float(h.score) for h in hits],
            }
        )
    if request.get("index_order"):
        out["index_ids"] = [
            json.loads(searcher.doc(docnum).raw())["id"] for docnum in range(searcher.num_docs)
        ]
    if request.get("tokenizer"):
        out["terms"] = {}
        for doc in request["docs"][: int(request.get("analyze_docs", 0))]:
            stream = analyzer.tokenStream("contents", doc["contents"])
            term = stream.addAttribute(
                autoclass("org.apache.lucene.analysis.tokenattributes.CharTermAttribute")
            )
            stream.reset()
            tokens = []
            while stream.incrementToken():
                tokens.append(term.toString())
            stream.end()
            stream.close()
            out["terms"][doc["id"]] = tokens
    return out


def release_jar(request: dict) -> dict:
    """The same searches with the Anserini jar of the release's pyserini 0.44.0 (Anserini 0.39.0,
    Lucene 9.9.1; ``request["release_jar"]``) on a Java >= 21 (``request["java_home"]``), through
    pyjnius directly: raw Lucene scores and Anserini's displayed ones (pretokenized only)."""
    import os

    os.environ["JAVA_HOME"] = request["java_home"]
    import jnius_config

    jnius_config.set_classpath(request["release_jar"])
    from jnius import autoclass

    with tempfile.TemporaryDirectory() as tmp:
        collection = Path(tmp) / "docs"
        collection.mkdir()
        with open(collection / "docs.jsonl", "w") as out:
            for doc in request["docs"]:
                out.write(json.dumps(doc) + "\n")
        index = str(Path(tmp) / "index")
        autoclass("io.anserini.index.IndexCollection").main(
            ["-collection", "JsonCollection", "-input", str(collection), "-index", index]
            + ["-generator", "DefaultLuceneDocumentGenerator", "-threads", "1"]
            + ["-storePositions", "-storeDocvectors", "-storeRaw", "-pretokenized"]
        )
        k1, b, k = float(request["k1"]), float(request["b"]), int(request["k"])
        reader = autoclass("org.apache.lucene.index.DirectoryReader").open(
            autoclass("org.apache.lucene.store.FSDirectory").open(
                autoclass("java.io.File")(index).toPath()
            )
        )
        raw = autoclass("org.apache.lucene.search.IndexSearcher")(reader.getContext())
        raw.setSimilarity(autoclass("org.apache.lucene.search.similarities.BM25Similarity")(k1, b))
        stored = raw.storedFields()
        SortField = autoclass("org.apache.lucene.search.SortField")
        Type = autoclass("org.apache.lucene.search.SortField$Type")
        sort = autoclass("org.apache.lucene.search.Sort")(
            SortField.FIELD_SCORE, SortField("id", Type.STRING_VAL)
        )
        parser = autoclass("org.apache.lucene.queryparser.flexible.standard.StandardQueryParser")()
        parser.setAnalyzer(autoclass("org.apache.lucene.analysis.core.WhitespaceAnalyzer")())
        searcher = autoclass("io.anserini.search.SimpleSearcher")(index)
        searcher.set_bm25(k1, b)
        out = {
            "lucene": autoclass("org.apache.lucene.util.Version").LATEST.toString(),
            "queries": [],
        }
        for text in request["queries"]:
            query = parser.parse(text, "contents")
            top = raw.search(query, k, sort, True)
            hits = searcher.search(query, k)
            out["queries"].append(
                {
                    "query": text,
                    "raw_ids": [stored.document(d.doc).get("id") for d in top.scoreDocs],
                    "raw_scores": [float(d.score) for d in top.scoreDocs],
                    "ids": [h.docid for h in hits],
                    "scores": [float(h.score) for h in hits],
                }
            )
        searcher.close()
        reader.close()
    return out


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
