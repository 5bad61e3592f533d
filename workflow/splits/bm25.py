"""Tokeniser, sparse BM25 Okapi index and the BM25 topic splits (SPEC 2.6).

Tokenisation (shared by documents and queries): the text is lowercased, cut into maximal runs of
Unicode letters and numbers (general categories L* and N*; Python regex ``[^\\W_]+``, polars
``[\\p{L}\\p{N}]+``, which agree except on code points assigned after Unicode 15; punctuation,
underscores, apostrophes, emoji joiners split words, so "don't" gives "don", "t"), and English stop
words (``ENGLISH_STOP_WORDS``, shipped here) are removed. A topic's query is the concatenation of
the tokens of all its keyword phrases, in order and with repetition ("basketball", "college
basketball" -> basketball, college, basketball), exactly what ``rank_bm25`` would score for that
token list.

Scoring is ``rank_bm25.BM25Okapi``'s definition, reproduced operation by operation so that scores
are bit-identical to it: idf(t) = log(N - df + 0.5) - log(df + 0.5); terms with a negative idf get
``epsilon * mean idf`` (the mean over the whole vocabulary); a query scores
sum over its tokens (with repetition) of idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)).
The per-(document, term) factor is precomputed in a CSC matrix (documents x terms), so a query
touches only the posting lists of its own tokens (no per-document Python loop).

Topic splits: the posts of users at or above each demographic's threshold percentile form one
shared index (default ``--index shared``: idf and average length are the same for every group, so
scores compare across groups directly); ``--index per_demographic`` builds one index per group
instead. Either way ``norm_score`` = score / ((k1 + 1) * sum of the query tokens' idf in the index
used), the fraction of the largest score the query can reach there, which corrects for the
different idf scales of separate indexes (with a shared index it is the raw score divided by one
constant per topic). The top ``--top-k`` posts (only posts containing at least one query token;
ties broken by post order) are kept per (demographic, topic); a topic's rows are pooled over the
demographics and the bottom ``--drop-fraction`` by ``norm_score`` dropped (rows tied with the
lowest kept score are kept).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import scipy.sparse as sp

from splits.config import ConfigError, Topic, load_topics
from splits.io import read_json, write_parquet, write_text

log = logging.getLogger(__name__)

TOKEN_PATTERN = r"[^\W_]+"  # Python: letters (L*) and numbers (N*), i.e. \w without "_"
BUILD_BLOCK_DOCS = 200_000  # documents tokenised at once while building an index
POLARS_TOKEN_PATTERN = r"[\p{L}\p{N}]+"  # the same class for polars' (Rust) regex engine
_TOKEN_RE = re.compile(TOKEN_PATTERN)

# The classic English stop-word list (Glasgow IR group's list as shipped by scikit-learn).
ENGLISH_STOP_WORDS = frozenset(
    """
a about above across after afterwards again against all almost alone along already also although
always am among amongst amoungst amount an and another any anyhow anyone anything anyway anywhere
are around as at back be became because become becomes becoming been before beforehand behind
being below beside besides between beyond bill both bottom but by call can cannot cant co con
could couldnt cry de describe detail do done down due during each eg eight either eleven else
elsewhere empty enough etc even ever every everyone everything everywhere except few fifteen
fifty fill find fire first five for former formerly forty found four from front full further get
give go had has hasnt have he hence her here hereafter hereby herein hereupon hers herself him
himself his how however hundred i ie if in inc indeed interest into is it its itself keep last
latter latterly least less ltd made many may me meanwhile might mill mine more moreover most
mostly move much must my myself name namely neither never nevertheless next nine no nobody none
noone nor not nothing now nowhere of off often on once one only onto or other others otherwise
our ours ourselves out over own part per perhaps please put rather re same see seem seemed
seeming seems serious several she should show side since sincere six sixty so some somehow
someone something sometime sometimes somewhere still such system take ten than that the their
them themselves then thence there thereafter thereby therefore therein thereupon these they
thick thin third this those though three through throughout thru thus to together too top toward
towards twelve twenty two un under until up upon us very via was we well were what whatever when
whence whenever where whereafter whereas whereby wherein whereupon wherever whether which while
whither who whoever whole whom whose why will with within without would yet you your yours
yourself yourselves
""".split()
)
_STOP_WORDS_SERIES = pl.Series("stop", sorted(ENGLISH_STOP_WORDS), dtype=pl.String)

K1 = 1.5
B = 0.75
EPSILON = 0.25


# --------------------------------------------------------------------------- tokenisation


def tokenize(text: str | None) -> list[str]:
    """Tokens of one text (lowercase letter/digit runs, stop words removed)."""
    if not text:
        return []
    return [t for t in _TOKEN_RE.findall(text.lower()) if t not in ENGLISH_STOP_WORDS]


def query_tokens(keywords: Iterable[str]) -> list[str]:
    """The query of a topic: the tokens of every keyword phrase, in order, with repetition."""
    return [token for phrase in keywords for token in tokenize(phrase)]


def _token_frame(texts: pl.Series) -> pl.DataFrame:
    """(doc, tok) rows in document order and, within a document, text order."""
    return (
        pl.DataFrame({"text": texts.cast(pl.String)})
        .with_row_index("doc")
        .select(
            pl.col("doc"),
            pl.col("text")
            .fill_null("")
            .str.to_lowercase()
            .str.extract_all(POLARS_TOKEN_PATTERN)
            .alias("tok"),
        )
        .explode("tok")
        .filter(pl.col("tok").is_not_null() & ~pl.col("tok").is_in(_STOP_WORDS_SERIES.implode()))
    )


# --------------------------------------------------------------------------- index


@dataclass(frozen=True)
class BM25Index:
    """BM25 Okapi over ``n_docs`` documents. ``weights[d, t]`` = tf*(k1+1)/(tf + k1*(1-b+b*dl/avgdl))
    (CSC, documents x terms); ``idf[t]`` after the epsilon floor; ``vocabulary`` maps token -> t."""

    vocabulary: dict[str, int]
    idf: np.ndarray
    weights: sp.csc_matrix
    doc_len: np.ndarray
    avgdl: float
    average_idf: float
    k1: float = K1
    b: float = B
    epsilon: float = EPSILON

    @property
    def n_docs(self) -> int:
        return int(self.doc_len.shape[0])

    # ----------------------------------------------------------------- construction

    @classmethod
    def from_texts(
        cls,
        texts: Sequence[str | None] | pl.Series,
        k1: float = K1,
        b: float = B,
        epsilon: float = EPSILON,
        block_docs: int = BUILD_BLOCK_DOCS,
    ) -> BM25Index:
        """Index raw texts with the module's tokeniser (vectorised with polars), ``block_docs``
        documents at a time so that memory holds one block's tokens, not the corpus's."""
        series = (
            texts
            if isinstance(texts, pl.Series)
            else pl.Series("text", list(texts), dtype=pl.String)
        )
        block_docs = max(int(block_docs), 1)
        blocks = (
            (start, _token_frame(series.slice(start, block_docs)))
            for start in range(0, len(series), block_docs)
        )
        return cls._from_token_blocks(blocks, len(series), k1, b, epsilon)

    @classmethod
    def from_token_lists(
        cls, corpus: Sequence[Sequence[str]], k1: float = K1, b: float = B, epsilon: float = EPSILON
    ) -> BM25Index:
        """Index pre-tokenised documents as given (no stop-word removal), like ``BM25Okapi(corpus)``."""
        docs = np.repeat(np.arange(len(corpus), dtype=np.uint32), [len(d) for d in corpus])
        tokens = [str(t) for d in corpus for t in d]
        frame = pl.DataFrame(
            {"doc": pl.Series(docs, dtype=pl.UInt32), "tok": pl.Series(tokens, dtype=pl.String)}
        )
        return cls._from_token_blocks([(0, frame)], len(corpus), k1, b, epsilon)

    @classmethod
    def _from_token_blocks(
        cls,
        blocks: Iterable[tuple[int, pl.DataFrame]],
        n_docs: int,
        k1: float,
        b: float,
        epsilon: float,
    ) -> BM25Index:
        """The index from ``(first doc, (doc, tok) rows)`` blocks in document order, each
        block's doc ids local (from 0). Term ids follow first appearance over the whole corpus
        (rank_bm25's dict order, which fixes the float sum behind the epsilon floor). Each
        block leaves only its postings (term, doc, tf: 12 bytes each), sorted by (term, doc);
        they are then placed straight into CSC order (12 bytes each) with one cursor per term,
        so the peak is at most 24 bytes per posting plus one block's tokens."""
        if n_docs == 0:
            raise ValueError("cannot build a BM25 index over zero documents")
        vocab = pl.DataFrame(schema={"tok": pl.String, "term": pl.Int64})
        doc_len = np.zeros(n_docs, dtype=np.int64)
        postings: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for start, frame in blocks:
            if frame.height:
                vocab, block = _block_postings(frame, start, vocab, doc_len)
                postings.append(block)
        n_terms = vocab.height
        doc_freq = np.zeros(n_terms, dtype=np.int64)
        for term, _, _ in postings:
            doc_freq += np.bincount(term, minlength=n_terms)
        indptr = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(doc_freq, out=indptr[1:])
        index_dtype = _id_dtype(max(int(indptr[-1]), n_docs))
        avgdl = int(doc_len.sum()) / n_docs
        # the same float operations, in the same order, as rank_bm25's get_scores
        length_norm = (
            k1 * (1 - b + b * doc_len / avgdl) if avgdl > 0 else np.full(n_docs, k1 * (1 - b))
        )
        indices = np.empty(int(indptr[-1]), dtype=index_dtype)
        weight = np.empty(int(indptr[-1]), dtype=np.float64)
        cursor = indptr[:-1].copy()  # next free slot of each term
        postings.reverse()
        while postings:  # blocks in doc order, so docs ascend within each term's slots
            term, doc, tf_count = postings.pop()
            run_start = np.flatnonzero(np.r_[True, term[1:] != term[:-1]])
            run_len = np.diff(np.r_[run_start, len(term)])
            slot = cursor[term] + np.arange(len(term)) - np.repeat(run_start, run_len)
            cursor[term[run_start]] += run_len
            tf = tf_count.astype(np.float64)
            indices[slot] = doc
            weight[slot] = tf * (k1 + 1) / (tf + length_norm[doc])
        idf_raw = _idf(doc_freq, n_docs)
        average_idf = float(np.cumsum(idf_raw)[-1]) / n_terms if n_terms else 0.0
        idf = np.where(idf_raw < 0, epsilon * average_idf, idf_raw)
        weights = sp.csc_matrix(
            (weight, indices, indptr.astype(index_dtype)), shape=(n_docs, n_terms), copy=False
        )
        return cls(
            vocabulary=dict(zip(vocab.get_column("tok").to_list(), range(n_terms), strict=True)),
            idf=idf,
            weights=weights,
            doc_len=doc_len,
            avgdl=avgdl,
            average_idf=average_idf,
            k1=k1,
            b=b,
            epsilon=epsilon,
        )

    # ----------------------------------------------------------------- queries

    def term_ids(self, query: Sequence[str]) -> np.ndarray:
        """Ids of the query's known tokens, in order, with repetition (unknown tokens score 0)."""
        ids = [self.vocabulary.get(t) for t in query]
        return np.asarray([i for i in ids if i is not None], dtype=np.int64)

    def get_scores(self, query: Sequence[str]) -> np.ndarray:
        """Dense scores of every document, equal to ``BM25Okapi.get_scores(query)``."""
        scores = np.zeros(self.n_docs)
        docs, doc_scores = self.score_matching(self.term_ids(query))
        scores[docs] = doc_scores
        return scores

    def score_matching(self, term_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(doc ids ascending, scores) of the documents holding at least one of the terms.

        The posting lists of the query's terms are gathered in query order and summed per
        document with ``np.bincount``, which adds in input order: each document's score is
        ((0 + term1) + term2) + ..., the same float operations as rank_bm25's loop over the
        query (documents without a term add exactly 0 there)."""
        indptr = self.weights.indptr
        starts = indptr[term_ids]
        lengths = indptr[term_ids + 1] - starts
        total = int(lengths.sum())
        if total == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        offsets = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
        positions = np.arange(total, dtype=np.int64) + offsets
        rows = self.weights.indices[positions]
        contributions = np.repeat(self.idf[term_ids], lengths) * self.weights.data[positions]
        docs, inverse = np.unique(rows, return_inverse=True)
        return docs.astype(np.int64), np.bincount(
            inverse, weights=contributions, minlength=len(docs)
        )

    def search(
        self, query: Sequence[str], k: int, doc_mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` documents containing at least one query token (restricted to ``doc_mask``),
        as (doc ids, scores) ordered by score descending, then doc id ascending."""
        docs, scores = self.score_matching(self.term_ids(query))
        if doc_mask is not None:
            keep = doc_mask[docs]
            docs, scores = docs[keep], scores[keep]
        return top_k(docs, scores, k)

    def max_score(self, query: Sequence[str]) -> float:
        """The supremum of a document's score for ``query``: (k1 + 1) * sum of its tokens' idf."""
        ids = self.term_ids(query)
        return float((self.k1 + 1) * self.idf[ids].sum()) if len(ids) else 0.0


def _idf(doc_freq: np.ndarray, n_docs: int) -> np.ndarray:
    """rank_bm25's idf with math.log (computed once per distinct document frequency)."""
    distinct, inverse = np.unique(doc_freq, return_inverse=True)
    values = np.array([math.log(n_docs - f + 0.5) - math.log(f + 0.5) for f in distinct.tolist()])
    return values[inverse] if len(distinct) else np.zeros(0)


def _id_dtype(largest: int) -> type:
    """int32 for ids and offsets below 2**31 - 1, else int64."""
    return np.int32 if largest < np.iinfo(np.int32).max else np.int64


def _block_postings(
    frame: pl.DataFrame, start: int, vocab: pl.DataFrame, doc_len: np.ndarray
) -> tuple[pl.DataFrame, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """One block of (local doc, tok) rows: the vocabulary extended by the block's new terms (in
    first-appearance order, after every earlier term), its documents' lengths added into
    ``doc_len`` and its postings (term, global doc, tf) sorted by (term, doc)."""
    first_seen = frame.get_column("tok").unique(maintain_order=True)
    new = first_seen.filter(~first_seen.is_in(vocab.get_column("tok").implode()))
    if new.len():
        added = pl.DataFrame({"tok": new}).with_row_index("term", offset=vocab.height)
        vocab = pl.concat([vocab, added.select("tok", pl.col("term").cast(pl.Int64))])
    local_doc = frame.get_column("doc").to_numpy().astype(np.int64)
    block_len = int(local_doc.max()) + 1
    doc_len[start : start + block_len] += np.bincount(local_doc, minlength=block_len)
    term_of_token = (
        frame.select("tok")
        .join(vocab, on="tok", how="left", maintain_order="left")
        .get_column("term")
        .to_numpy()
    )
    keys, counts = np.unique(term_of_token * block_len + local_doc, return_counts=True)
    term, doc = np.divmod(keys, block_len)
    return vocab, (
        term.astype(_id_dtype(vocab.height)),
        (doc + start).astype(_id_dtype(len(doc_len))),
        counts.astype(np.int32),
    )


def top_k(doc_ids: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best (doc id, score) pairs: score descending, doc id ascending among ties."""
    if k <= 0 or len(doc_ids) == 0:
        return doc_ids[:0], scores[:0]
    if len(doc_ids) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = scores >= kth  # every tie with the k-th score, cut after sorting
        doc_ids, scores = doc_ids[keep], scores[keep]
    order = np.lexsort((doc_ids, -scores))[:k]
    return doc_ids[order], scores[order]


# --------------------------------------------------------------------------- topic splits


@dataclass(frozen=True)
class TopicSplitParams:
    top_k: int = 3000
    drop_fraction: float = 0.25
    index: str = "shared"  # or "per_demographic"


def load_demographic_posts(
    posts_files: dict[str, str | Path], thresholds: dict[str, float]
) -> pl.DataFrame:
    """Posts of users at or above each demographic's threshold: post_id, author, subreddit, text,
    demographic (one row per (demographic, post))."""
    frames = []
    for key in sorted(posts_files):
        if key not in thresholds:
            raise ConfigError(f"thresholds: no threshold for demographic {key!r}")
        path = Path(posts_files[key])
        if not path.exists():
            raise ConfigError(f"{path}: demographic posts file does not exist")
        schema = pl.read_parquet_schema(path)
        missing = {"post_id", "author", "subreddit", "text", "percentile"} - set(schema)
        if missing:
            raise ConfigError(f"{path}: missing columns {sorted(missing)}")
        frames.append(
            pl.scan_parquet(path)
            .filter(pl.col("percentile") >= float(thresholds[key]))
            .select(
                pl.col("post_id").cast(pl.String),
                pl.col("author").cast(pl.String),
                pl.col("subreddit").cast(pl.String),
                pl.col("text").cast(pl.String),
                pl.lit(key).alias("demographic"),
            )
            .unique(subset="post_id", keep="first", maintain_order=True)
            .sort("post_id")
            .collect()
        )
    if not frames:
        raise ConfigError("topic splits: no demographic posts given")
    for key, frame in zip(sorted(posts_files), frames, strict=True):
        if frame.is_empty():
            log.warning("%s: no posts of users at or above the threshold %s", key, thresholds[key])
        else:
            log.info("%s: %d posts at or above the threshold %s", key, len(frame), thresholds[key])
    return pl.concat(frames)


def _search_rows(
    index: BM25Index,
    doc_post_ids: np.ndarray,
    masks: dict[str, np.ndarray | None],
    topics: Sequence[Topic],
    top_k_posts: int,
) -> list[pl.DataFrame]:
    rows = []
    for topic in topics:
        query = query_tokens(topic.keywords)
        ids = index.term_ids(query)
        matching, scores = index.score_matching(ids)
        max_score = index.max_score(query)
        for key, mask in masks.items():
            keep = slice(None) if mask is None else mask[matching]
            docs, doc_scores = top_k(matching[keep], scores[keep], top_k_posts)
            rows.append(
                pl.DataFrame(
                    {
                        "post_id": pl.Series(doc_post_ids[docs], dtype=pl.String),
                        "demographic": pl.Series([key] * len(docs), dtype=pl.String),
                        "category": pl.Series([topic.category] * len(docs), dtype=pl.String),
                        "topic": pl.Series([topic.topic] * len(docs), dtype=pl.String),
                        "score": pl.Series(doc_scores, dtype=pl.Float64),
                        "norm_score": pl.Series(
                            doc_scores / max_score if max_score > 0 else doc_scores,
                            dtype=pl.Float64,
                        ),
                        "rank": pl.Series(np.arange(1, len(docs) + 1), dtype=pl.Int64),
                    }
                )
            )
    return rows


def drop_bottom(topic_rows: pl.DataFrame, fraction: float) -> pl.DataFrame:
    """Per topic, drop the bottom ``fraction`` of the pooled rows by norm_score (ties with the
    lowest kept score are kept)."""
    if fraction <= 0:
        return topic_rows
    return (
        topic_rows.with_columns(
            pl.col("norm_score")
            .sort()
            .gather((pl.len() * fraction).floor().cast(pl.Int64).clip(0, pl.len() - 1))
            .first()
            .over("topic")
            .alias("_cut")
        )
        .filter(pl.col("norm_score") >= pl.col("_cut"))
        .drop("_cut")
    )


def topic_splits(
    posts: pl.DataFrame, topics: Sequence[Topic], params: TopicSplitParams = TopicSplitParams()
) -> pl.DataFrame:
    """The topic_posts table from the (demographic, post) rows of ``load_demographic_posts``."""
    if posts.is_empty():
        raise ConfigError(
            "topic splits: no posts of users at or above the demographics' thresholds"
        )
    keys = sorted(posts.get_column("demographic").unique().to_list())
    rows: list[pl.DataFrame] = []
    if params.index == "shared":
        docs = posts.unique(subset="post_id", keep="first").sort("post_id")
        doc_post_ids = docs.get_column("post_id").to_numpy()
        log.info("shared BM25 index over %d posts of %d demographics", len(docs), len(keys))
        index = BM25Index.from_texts(docs.get_column("text"))
        position = pl.DataFrame({"post_id": docs.get_column("post_id")}).with_row_index("doc")
        masks = {}
        for key in keys:
            members = posts.filter(pl.col("demographic") == key).join(position, on="post_id")
            mask = np.zeros(len(docs), dtype=bool)
            mask[members.get_column("doc").to_numpy()] = True
            masks[key] = mask
        rows = _search_rows(index, doc_post_ids, masks, topics, params.top_k)
    elif params.index == "per_demographic":
        for key in keys:
            docs = posts.filter(pl.col("demographic") == key).sort("post_id")
            log.info("BM25 index of %s over %d posts", key, len(docs))
            index = BM25Index.from_texts(docs.get_column("text"))
            rows += _search_rows(
                index, docs.get_column("post_id").to_numpy(), {key: None}, topics, params.top_k
            )
    else:
        raise ConfigError(
            f"topics.index: unknown value {params.index!r} (shared or per_demographic)"
        )
    topic_order = pl.DataFrame({"topic": [t.topic for t in topics]}).with_row_index("_topic_order")
    hits = pl.concat(rows) if rows else pl.DataFrame(schema=_HIT_SCHEMA)
    meta = posts.select("post_id", "demographic", "author", "subreddit", "text")
    return (
        drop_bottom(hits, params.drop_fraction)
        .join(meta, on=["post_id", "demographic"], how="left")
        .join(topic_order, on="topic", how="left")
        .sort("_topic_order", "demographic", "rank")
        .select(TOPIC_POSTS_COLUMNS)
    )


_HIT_SCHEMA = {
    "post_id": pl.String,
    "demographic": pl.String,
    "category": pl.String,
    "topic": pl.String,
    "score": pl.Float64,
    "norm_score": pl.Float64,
    "rank": pl.Int64,
}
TOPIC_POSTS_COLUMNS = [
    "post_id",
    "author",
    "subreddit",
    "text",
    "demographic",
    "category",
    "topic",
    "score",
    "norm_score",
    "rank",
]


def topics_frame(topics: Sequence[Topic]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "category": [t.category for t in topics],
            "topic": [t.topic for t in topics],
            "keywords": [list(t.keywords) for t in topics],
        },
        schema={"category": pl.String, "topic": pl.String, "keywords": pl.List(pl.String)},
    )


def counts_table(
    topic_posts: pl.DataFrame, topics: Sequence[Topic], demographics: Sequence[str]
) -> pl.DataFrame:
    """Posts per topic (rows) and demographic (columns) after the cut, with totals."""
    counts = topic_posts.group_by("topic", "demographic").len()
    table = topics_frame(topics).select("category", "topic")
    for key in demographics:
        table = table.join(
            counts.filter(pl.col("demographic") == key).select("topic", pl.col("len").alias(key)),
            on="topic",
            how="left",
            maintain_order="left",
        )
    table = table.with_columns(pl.col(list(demographics)).fill_null(0).cast(pl.Int64))
    return table.with_columns(pl.sum_horizontal(list(demographics)).alias("total"))


# --------------------------------------------------------------------------- command line


def parse_key_paths(values: Sequence[str]) -> dict[str, str]:
    """``key=path`` pairs, or paths ``.../<key>/posts.parquet`` (the key is the folder name)."""
    out = {}
    for value in values:
        key, sep, path = value.partition("=")
        if not sep:
            path, key = value, Path(value).parent.name
        if key in out:
            raise ConfigError(f"--demographic-posts: demographic {key!r} given twice")
        out[key] = path
    return out


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--demographic-posts",
        nargs="+",
        required=True,
        metavar="[KEY=]FILE",
        help="D_d posts files (results/demographics/<d>/posts.parquet)",
    )
    parser.add_argument(
        "--thresholds", required=True, help="thresholds.json {demographic: percentile}"
    )
    parser.add_argument(
        "--topics-file", required=True, help="topic list (our YAML or release JSON)"
    )
    parser.add_argument(
        "--top-k", type=int, default=3000, help="posts kept per (demographic, topic)"
    )
    parser.add_argument(
        "--drop-fraction", type=float, default=0.25, help="pooled bottom share dropped"
    )
    parser.add_argument("--index", choices=["shared", "per_demographic"], default="shared")
    parser.add_argument("--out-topics", required=True, help="topics.parquet")
    parser.add_argument("--out-topic-posts", required=True, help="topic_posts.parquet")
    parser.add_argument("--out-counts", required=True, help="counts CSV (topic x demographic)")


def run(args: argparse.Namespace) -> int:
    if args.top_k < 1:
        raise ConfigError("topics.top_k: must be at least 1")
    if not 0 <= args.drop_fraction < 1:
        raise ConfigError("topics.drop_fraction: must be in [0, 1)")
    topics = load_topics(args.topics_file)
    if not Path(args.thresholds).exists():
        raise ConfigError(f"{args.thresholds}: thresholds file does not exist")
    try:
        thresholds = read_json(args.thresholds)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{args.thresholds}: not valid JSON ({err})") from err
    posts_files = parse_key_paths(args.demographic_posts)
    for key, value in thresholds.items():
        if key in posts_files and not isinstance(value, int | float):
            raise ConfigError(
                f"{args.thresholds}: threshold of {key!r} is not a number ({value!r})"
            )
    posts = load_demographic_posts(posts_files, thresholds)
    params = TopicSplitParams(top_k=args.top_k, drop_fraction=args.drop_fraction, index=args.index)
    table = topic_splits(posts, topics, params)
    write_parquet(topics_frame(topics), args.out_topics)
    write_parquet(table, args.out_topic_posts)
    counts = counts_table(table, topics, sorted(posts_files))
    write_text(counts.write_csv(), args.out_counts)
    log.info(
        "%d topic posts over %d topics and %d demographics",
        len(table),
        len(topics),
        len(posts_files),
    )
    return 0
