"""Phrase matching (splits.retrieval.phrases) against a brute-force oracle: a sliding window over each
text's words, and a regular expression over the raw text."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest
from splits.retrieval.phrases import PositionalIndex, match_phrases, phrase_tokens
from splits.text import words


def brute_force(texts, phrase):
    """{document: occurrences} of the phrase's words as a consecutive window of each text's words."""
    target = list(words(phrase))
    out = {}
    if not target:
        return out
    for doc, text in enumerate(texts):
        toks = words(text)
        n = sum(toks[i : i + len(target)] == target for i in range(len(toks) - len(target) + 1))
        if n:
            out[doc] = n
    return out


def as_dict(docs, tf):
    return dict(zip(docs.tolist(), tf.tolist(), strict=True))


def regex_docs(texts, phrase):
    """Documents where the phrase's words occur separated by non-word characters only."""
    pattern = re.compile(
        r"(?<![^\W_])" + r"[\W_]+".join(map(re.escape, words(phrase))) + r"(?![^\W_])",
        re.IGNORECASE,
    )
    return {i for i, t in enumerate(texts) if t and pattern.search(t)}


def cornell_texts(reference_dir):
    path = reference_dir / "realdata" / "convokit_cornell" / "utterances.jsonl"
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line).get("text") for line in handle]


def test_phrase_tokens_keep_stop_words_and_split_hyphens():
    assert phrase_tokens("Three Pointer") == ("three", "pointer")
    assert phrase_tokens("need-based") == ("need", "based")
    assert phrase_tokens("out of bounds") == ("out", "of", "bounds")
    assert phrase_tokens("--") == ()


def test_small_cases_counts_and_boundaries():
    texts = [
        "Fair enough, I guess.",
        "The career fair is on Monday; career-fair booths open at 9.",
        "based",
        "Financial aid is need-based here, need based everywhere.",
        "ha ha ha",
        None,
        "",
        "career\nfair",
    ]
    found = match_phrases(texts, ["career fair", "need-based", "ha ha", "fair", "nothing here"])
    assert as_dict(*found.of("career fair")) == {1: 2, 7: 1}
    assert as_dict(*found.of("need-based")) == {3: 2}
    assert as_dict(*found.of("ha ha")) == {4: 2}  # overlapping occurrences count
    assert as_dict(*found.of("fair")) == {0: 1, 1: 2, 7: 1}
    assert found.of("nothing here")[0].size == 0
    assert found.any_docs(["career fair", "need-based"]).tolist() == [1, 3, 7]
    assert found.mask(["ha ha"]).tolist() == [False] * 4 + [True] + [False] * 3


def test_phrase_never_spans_two_documents():
    found = match_phrases(["we went to the career", "fair enough"], ["career fair"])
    assert found.docs[0].size == 0


def test_candidates_restrict_and_keep_document_ids():
    texts = ["home gardening tips", "my home", "gardening at home", "home gardening again"]
    found = match_phrases(texts, ["home gardening"], candidates=np.array([3, 0, 3]))
    assert as_dict(*found.of("home gardening")) == {0: 1, 3: 1}
    assert found.n_docs == 4
    only_one = match_phrases(texts, ["home gardening"], candidates=np.array([3]))
    assert only_one.docs[0].tolist() == [3]
    none = match_phrases(texts, ["home gardening"], candidates=np.array([], dtype=np.int64))
    assert none.docs[0].size == 0
    with pytest.raises(ValueError):
        match_phrases(texts, ["home"], candidates=np.array([4]))


def test_random_corpus_equals_brute_force():
    rng = random.Random(7)
    vocab = ["a", "b", "c", "the", "of", "home", "care", "plant", "x"]
    texts = [
        rng.choice(["", " ", "-", ". "]).join(rng.choice(vocab) for _ in range(rng.randint(0, 30)))
        for _ in range(400)
    ]
    phrases = ["a b", "b a b", "home care", "plant care", "the of", "a", "x x x", "c a c a", "zz"]
    index = PositionalIndex(texts)
    for phrase in phrases:
        assert as_dict(*index.phrase_frequency(phrase)) == brute_force(texts, phrase), phrase
    subset = np.array(sorted(rng.sample(range(len(texts)), 150)))
    found = match_phrases(texts, phrases, candidates=subset)
    for phrase in phrases:
        expected = {d: n for d, n in brute_force(texts, phrase).items() if d in set(subset)}
        assert as_dict(*found.of(phrase)) == expected, phrase


def test_real_cornell_text_career_fair_and_need_based(reference_dir):
    texts = cornell_texts(reference_dir)
    phrases = ["career fair", "career fairs", "need-based", "financial aid", "fair", "based"]
    found = match_phrases(texts, phrases)
    for phrase in phrases:
        assert as_dict(*found.of(phrase)) == brute_force(texts, phrase), phrase
        assert set(found.of(phrase)[0].tolist()) == regex_docs(texts, phrase), phrase
    # r/Cornell has "To be fair" (several times) and "career fairs" once: the phrase "career
    # fair" matches neither (no stemming), "career fairs" only the post about career fairs
    to_be_fair = {i for i, t in enumerate(texts) if t and re.search(r"to be fair", t, re.I)}
    assert len(to_be_fair) >= 3 and to_be_fair <= set(found.of("fair")[0].tolist())
    assert found.of("career fair")[0].size == 0
    (fairs,) = found.of("career fairs")[0].tolist()
    assert "career fairs each semester" in texts[fairs] and fairs not in to_be_fair
    # "need-based" (twice, as "need-based aid") is not any of the 20-odd posts with "based"
    need_based, based = set(found.of("need-based")[0].tolist()), set(found.of("based")[0].tolist())
    assert len(need_based) == 2 and len(based) >= 15
    assert all("need-based" in texts[d] for d in need_based)
    assert not any(re.search(r"need\W+based", texts[d], re.I) for d in based - need_based)


def test_match_keywords_from_bm25_postings_equals_brute_force(reference_dir):
    from splits.config.settings import schema_defaults
    from splits.topics.corpus import CorpusStats, ShardCounts
    from splits.topics.index import BM25Index, match_keywords
    from splits.topics.settings import TopicBM25Settings

    robertson = schema_defaults(TopicBM25Settings).params()  # topics.bm25's default

    texts = cornell_texts(reference_dir)
    phrases = ["career fairs", "need-based", "fair", "based", "to be", "of", "Cornell", "free"]
    phrases += ["financial aid", "be fair", "zzzz unknown", "cornell cornell"]
    full = BM25Index.from_texts(texts, params=robertson)
    # a shard's index with the corpus statistics holds only the phrases' content words
    half = len(texts) // 2
    terms = {t for p in phrases for t in words(p)}
    stats = CorpusStats.combine(
        [ShardCounts.from_texts(texts[:half]), ShardCounts.from_texts(texts[half:])], terms
    )
    shard = BM25Index.from_texts(texts[half:], stats=stats, params=robertson)
    for index, docs in ((full, texts), (shard, texts[half:])):
        found = match_keywords(index, docs, phrases)
        assert found.phrases == tuple(phrases) and found.n_docs == len(docs)
        for phrase in phrases:
            assert as_dict(*found.of(phrase)) == brute_force(docs, phrase), phrase
    with pytest.raises(ValueError):
        match_keywords(full, texts[:10], phrases)


def test_index_of_the_asked_words_only_answers_as_the_full_index():
    """PositionalIndex(only=...) keeps the positions of the asked words alone (every other word
    one id that no query asks for): its phrases' documents and counts equal the full index's and
    the brute force's, with stop words, repeats and overlaps; a word it was not asked to index
    matches nothing, and its postings hold the asked words' positions only."""
    rng = random.Random(11)
    vocab = ["a", "b", "c", "the", "of", "home", "care", "plant", "x", "y", "zz9"]
    texts = [
        rng.choice([" ", "-", ". ", "\n"]).join(
            rng.choice(vocab) for _ in range(rng.randint(0, 40))
        )
        for _ in range(500)
    ] + [None, ""]
    phrases = ["a b", "b a b", "home care", "the of", "x x x", "c a c a", "zz9 a", "a"]
    asked = {w for p in phrases for w in phrase_tokens(p)}
    full, restricted = PositionalIndex(texts), PositionalIndex(texts, only=asked)
    assert set(restricted.vocabulary) == asked
    assert len(restricted.postings) < len(full.postings)
    assert restricted.doc_len.tolist() == full.doc_len.tolist()
    for phrase in phrases:
        expected = brute_force(texts, phrase)
        assert expected or phrase == "zz9 a", phrase  # the cases can fail
        assert as_dict(*restricted.phrase_frequency(phrase)) == expected, phrase
        assert as_dict(*full.phrase_frequency(phrase)) == expected, phrase
    assert restricted.phrase_frequency("plant care")[0].size == 0  # "plant" not asked
    assert full.phrase_frequency("plant care")[0].size > 0
    found = match_phrases(texts, phrases)  # the whole texts, through the restricted index
    for phrase in phrases:
        assert as_dict(*found.of(phrase)) == brute_force(texts, phrase), phrase


def test_subset_equals_the_index_of_the_kept_texts():
    """PositionalIndex.subset (the lift's pools read from their topic's index, and their held-out
    halves from the pool's) holds what an index of the kept texts holds: the same vocabulary in
    the same (first-appearance) order, positions, postings and lengths."""
    rng = random.Random(11)
    vocab = ["a", "B", "c", "the", "Émile", "x_y", "don't", "½"]
    texts = [
        rng.choice(["", " ", "-", ". "]).join(rng.choice(vocab) for _ in range(rng.randint(0, 12)))
        for _ in range(120)
    ] + [None, "", "?!"]
    full = PositionalIndex(texts)
    for share in (0.0, 0.3, 0.5, 1.0):
        keep = np.array([rng.random() < share for _ in texts])
        made = full.subset(keep)
        expected = PositionalIndex([t for t, k in zip(texts, keep, strict=True) if k])
        assert list(made.vocabulary.items()) == list(expected.vocabulary.items())
        for name in ("tokens", "postings", "term_start", "doc_start", "doc_len"):
            got, want = getattr(made, name), getattr(expected, name)
            assert got.dtype == want.dtype and np.array_equal(got, want), name
    order = [rng.randrange(len(texts)) for _ in range(80)]  # any order, repeats
    made, expected = full.subset(np.array(order)), PositionalIndex([texts[i] for i in order])
    assert list(made.vocabulary.items()) == list(expected.vocabulary.items())
    for name in ("tokens", "postings", "term_start", "doc_start", "doc_len"):
        assert np.array_equal(getattr(made, name), getattr(expected, name)), name
    with pytest.raises(ValueError, match="only"):
        PositionalIndex(texts, only={"a"}).subset(np.ones(len(texts), dtype=bool))
