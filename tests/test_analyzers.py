"""The WordPiece analyzer against Anserini's ``hgf_tokenizer`` analyzer (real Lucene through
pyserini, on a tokenizer.json built here from real posts: nothing is downloaded), and its
handling of long posts against the tokenizers library's own truncation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from splits.errors import ConfigError
from splits.hypotheses.retrieval import PoolIndex
from splits.retrieval.analyzers import WordPieceAnalyzer, make_analyzer
from splits.retrieval.bm25 import anserini_display, anserini_order
from test_bm25_variants import LUCENE_MISSING, pool_of, run_lucene, variant

QUERIES = [
    ["stress"],
    ["anxiety", "panic attack"],
    ["i feel"],
    ["don't", "can't"],
    ["my boyfriend", "my girlfriend"],
    ["ptsd", "flashbacks"],
    ["landlord", "eviction"],
    ["gaslighting"],  # a word cut into several pieces: a phrase of pieces
    ["therapist", "therapy", "therapy"],
    ["money", "debt"],
    ["school", "university"],
    ["insomnia", "nightmares"],
    ["job", "my boss"],
    ["help me", "please help"],
    ["zzzqqq"],
    ["really really"],
    ["abusive relationship"],
    ["I'm so tired"],
    ["Husband", "wife"],
    ["credit card", "loan"],
    ["sleep"],
]


@pytest.fixture(scope="module")
def vocabulary(reference_dir, tmp_path_factory):
    """A WordPiece vocabulary trained on Dreaddit's test split (3,000 pieces), saved as the
    vocab.txt the analyzer reads and the tokenizer.json Anserini reads."""
    from tokenizers.implementations import BertWordPieceTokenizer

    folder = tmp_path_factory.mktemp("vocab")
    texts = pd.read_csv(reference_dir / "realdata" / "dreaddit" / "dreaddit-test.csv")["text"]
    trainer = BertWordPieceTokenizer(lowercase=True)
    trainer.train_from_iterator(
        texts.astype(str).tolist(), vocab_size=3000, min_frequency=2, show_progress=False
    )
    trainer.save_model(str(folder))
    trainer.save(str(folder / "tokenizer.json"))
    return folder


def train_posts(reference_dir):
    frame = pd.read_csv(reference_dir / "realdata" / "dreaddit" / "dreaddit-train.csv")
    ids = [f"{p}_{i}" for p, i in zip(frame["post_id"], frame["id"], strict=True)]
    return ids, frame["text"].astype(str).tolist()


@pytest.mark.skipif(bool(LUCENE_MISSING), reason=LUCENE_MISSING or "-")
def test_wordpiece_lucene_equals_anserini_hgf_analyzer(reference_dir, vocabulary, tmp_path):
    """2,838 real posts indexed by Anserini with the hgf_tokenizer analyzer (pyserini 0.21: no
    truncation) and 21 phrase-OR queries parsed with it: our tokens, ranked ids, float scores
    and displayed scores are Lucene's."""
    ids, texts = train_posts(reference_dir)
    result = run_lucene(
        tmp_path,
        {
            "docs": [{"id": i, "contents": t} for i, t in zip(ids, texts, strict=True)],
            "queries": [" OR ".join(f'"{kw}"' for kw in q) for q in QUERIES],
            "k": 3000,
            "k1": 0.9,
            "b": 0.4,
            "tokenizer": str(vocabulary / "tokenizer.json"),
            "analyze_docs": 400,
        },
    )
    analyzer = WordPieceAnalyzer(vocabulary / "vocab.txt", max_tokens=None)
    for doc_id, text in zip(ids[:400], texts[:400], strict=True):
        assert analyzer.tokenize(text) == result["terms"][doc_id]
    index = PoolIndex(pool_of(ids, texts), params=variant("lucene"), analyzer=analyzer)
    assert any(len(index.entry_tokens(q[0])) > 1 for q in QUERIES if len(q[0].split()) == 1)
    compared = 0
    for keywords, expected in zip(QUERIES, result["queries"], strict=True):
        scores, matched = index.variant_scores(index.clauses(keywords, merged=True))
        hits = np.flatnonzero(matched)
        order = hits[anserini_order(scores[hits], [ids[d] for d in hits])]
        assert [ids[d] for d in order] == expected["raw_ids"], expected["parsed"]
        got = scores[order].astype(np.float32)
        assert np.array_equal(got, np.array(expected["raw_scores"], dtype=np.float32))
        assert np.array_equal(anserini_display(got), np.array(expected["scores"], np.float32))
        assert expected["ids"] == expected["raw_ids"]
        compared += len(got)
    assert compared > 2000


def test_long_posts_all_pieces_by_default_or_the_first_512(vocabulary):
    """By default every piece of a long post is indexed (pyserini 0.44.0, the release's, sets
    the tokenizer's maximum length to Integer.MAX_VALUE); ``max_tokens=512`` keeps the first 512
    pieces as later Anserini versions do, the same pieces as the tokenizers library's own
    truncation, and a word after them is then not found."""
    from tokenizers import Tokenizer

    reference = Tokenizer.from_file(str(vocabulary / "tokenizer.json"))
    long_text = " ".join(["my anxiety is getting worse every day"] * 120) + " landlord"
    full = WordPieceAnalyzer(vocabulary / "vocab.txt").tokenize(long_text)
    assert len(full) > 512
    assert full == reference.encode(long_text, add_special_tokens=False).tokens
    reference.enable_truncation(512)
    analyzer = WordPieceAnalyzer(vocabulary / "vocab.txt", max_tokens=512)
    pieces = analyzer.tokenize(long_text)
    assert len(pieces) == 512 and full[:512] == pieces
    assert pieces == reference.encode(long_text, add_special_tokens=False).tokens
    pool = pool_of(["a", "b"], [long_text, "my landlord"])
    for chosen, found in (
        (analyzer, [False, True]),
        (WordPieceAnalyzer(vocabulary / "vocab.txt"), [True, True]),
    ):
        index = PoolIndex(pool, params=variant("lucene"), analyzer=chosen)
        _, matched = index.variant_scores(index.clauses(["landlord"], merged=True))
        assert matched.tolist() == found
    assert index.doc_len.tolist()[0] == len(full)


def test_analyzer_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        WordPieceAnalyzer(tmp_path / "missing.txt")
    with pytest.raises(ConfigError, match="needs a vocabulary"):
        make_analyzer("wordpiece", None)
    with pytest.raises(ConfigError, match="unknown value"):
        make_analyzer("spacy")
    assert make_analyzer("words") is None
