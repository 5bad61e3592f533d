"""Phrase matching, phrase scoring and the ranked list of a pool index.

Oracles: a brute-force implementation written here from the definition (a phrase occurs at every
position where its tokens follow each other inside one post; its idf is the sum of its tokens'
idf; BM25 Okapi term weight), with ``rank_bm25.BM25Okapi`` supplying idf and checking one-word
lexicons bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rank_bm25 import BM25Okapi
from splits.config.settings import schema_defaults
from splits.hypotheses.lexicon import canonical_lexicon, entry_tokens
from splits.hypotheses.retrieval import Pool, PoolIndex, matched_spans, query_key
from splits.hypotheses.settings import LiftSettings, RetrievalSettings

K1, B = 1.5, 0.75  # rank_bm25's, which the schema's defaults (robertson, k1 and b null) give
#: the BM25 parameters of the schema's hypotheses.retrieval
DEFAULT = schema_defaults(RetrievalSettings).bm25


def make_pool(texts, is_a=None, post_ids=None) -> Pool:
    n = len(texts)
    return Pool(
        topic="t",
        group_a="a",
        group_b="b",
        post_ids=np.array(post_ids or [f"p{i:04d}" for i in range(n)], dtype=object),
        texts=list(texts),
        is_a=np.array(is_a if is_a is not None else [i % 2 == 0 for i in range(n)]),
    )


def brute_force(texts, lexicon, k1=K1, b=B):
    """Scores and match flags from the definition, one post and one entry at a time."""
    docs = [list(entry_tokens(t)) for t in texts]
    reference = BM25Okapi(docs)
    avgdl = sum(len(d) for d in docs) / len(docs)
    scores, matched = [], []
    for doc in docs:
        total, hit = 0.0, False
        for entry in canonical_lexicon(lexicon):
            size = len(entry)
            tf = sum(1 for i in range(len(doc) - size + 1) if tuple(doc[i : i + size]) == entry)
            if tf == 0:
                continue
            hit = True
            idf = sum(reference.idf[t] for t in entry)
            total += idf * (tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(doc) / avgdl)))
        scores.append(total)
        matched.append(hit)
    return np.array(scores), np.array(matched)


WORDS = ["ha", "he", "be", "finna", "go", "the", "y", "all"]
texts_strategy = st.lists(
    st.lists(st.sampled_from(WORDS), min_size=0, max_size=14).map(" ".join),
    min_size=2,
    max_size=25,
).filter(any)  # rank_bm25 (the idf oracle) needs one non-empty post
lexicon_strategy = st.lists(
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
    min_size=1,
    max_size=5,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=texts_strategy, lexicon=lexicon_strategy)
def test_phrase_scores_match_brute_force(texts, lexicon):
    index = PoolIndex(make_pool(texts), DEFAULT)
    scores, matched = index.scores(lexicon)
    expected_scores, expected_matched = brute_force(texts, lexicon)
    assert np.array_equal(matched, expected_matched)
    assert scores == pytest.approx(expected_scores, abs=1e-12, rel=1e-12)


def test_k1_and_b_come_from_the_settings():
    """hypotheses.retrieval.k1 and b reach the robertson index (it once used rank_bm25's 1.5 and
    0.75 whatever the config said)."""
    texts = ["finna go ha", "ha ha he be", "go go finna finna the y", "all y all", "be"]
    from splits.hypotheses.lift import pool_index

    chosen = schema_defaults(RetrievalSettings, k1=0.6, b=0.2)
    assert chosen.is_default  # robertson: the index's own scoring
    scores, _ = pool_index(make_pool(texts), chosen).scores(["finna go", "ha"])
    expected, _ = brute_force(texts, ["finna go", "ha"], k1=0.6, b=0.2)
    assert scores == pytest.approx(expected, abs=1e-12, rel=1e-12)
    default, _ = brute_force(texts, ["finna go", "ha"])
    assert not np.allclose(expected, default)


def test_repeated_and_overlapping_occurrences():
    texts = ["ha ha ha", "ha he ha", "he ha", "ha", "nothing here at all", "ha ha"]
    index = PoolIndex(make_pool(texts), DEFAULT)
    docs, tf = index.phrase_frequency(index.clause_ids(("ha", "ha")))
    # "ha ha ha" holds "ha ha" twice (overlapping), "ha ha" once; nowhere else
    assert dict(zip(docs.tolist(), tf.tolist(), strict=True)) == {0: 2, 5: 1}
    docs, tf = index.phrase_frequency(index.clause_ids(("ha",)))
    assert dict(zip(docs.tolist(), tf.tolist(), strict=True)) == {0: 3, 1: 2, 2: 1, 3: 1, 5: 2}
    # a lexicon with overlapping entries sums both entries' contributions
    both, _ = index.scores(["ha ha", "ha"])
    alone_phrase, _ = index.scores(["ha ha"])
    alone_word, _ = index.scores(["ha"])
    assert both == pytest.approx(alone_phrase + alone_word)


def test_phrase_never_spans_two_posts():
    index = PoolIndex(make_pool(["one two finna", "go three", "finna go"]), DEFAULT)
    docs, tf = index.phrase_frequency(index.clause_ids(("finna", "go")))
    assert docs.tolist() == [2] and tf.tolist() == [1]


def test_one_word_lexicon_equals_rank_bm25_bit_for_bit():
    rng = np.random.default_rng(5)
    vocab = [f"w{i}" for i in range(60)] + ["the", "and", "of"]
    texts = [" ".join(rng.choice(vocab, size=rng.integers(0, 30))) for _ in range(300)]
    index = PoolIndex(make_pool(texts), DEFAULT)
    reference = BM25Okapi([list(entry_tokens(t)) for t in texts])
    for _ in range(20):
        words = sorted(set(rng.choice(vocab, size=4).tolist()))  # sorted: the summing order
        scores, _ = index.scores(words)
        assert np.array_equal(scores, reference.get_scores(words))


def test_stop_words_and_apostrophes_are_tokens():
    # the lexicon's tokens are the retrieval tokens: stop words kept, "y'all" -> "y", "all"
    index = PoolIndex(make_pool(["y'all be finna go", "you all go", "he be going", "x"]), DEFAULT)
    _, matched = index.scores(["y'all"])
    assert matched.tolist() == [True, False, False, False]
    _, matched = index.scores(["he be"])
    assert matched.tolist() == [False, False, True, False]


def test_ranked_list_order_ties_and_padding():
    texts = ["finna go", "nothing", "finna", "other words", "finna go finna", "finna", "zz"]
    pool = make_pool(texts)
    index = PoolIndex(pool, DEFAULT)
    ranking = index.rank(["finna"], seed=1)
    scores, matched = index.scores(["finna"])
    n_match = int(matched.sum())
    assert ranking.n_matching == n_match == 4
    assert set(ranking.docs[:n_match].tolist()) == set(np.flatnonzero(matched).tolist())
    assert np.all(np.diff(scores[ranking.docs[:n_match]]) <= 0)  # by score, descending
    assert sorted(ranking.docs.tolist()) == list(range(len(texts)))  # every post once
    keys = index.padding_keys(query_key(["finna"], 1))
    # posts 2 and 5 are both "finna": the tie follows the seeded keys
    tied = [d for d in ranking.docs[:n_match] if texts[d] == "finna"]
    assert tied == sorted([2, 5], key=lambda d: keys[d])
    rest = ranking.docs[n_match:]
    assert rest.tolist() == sorted(rest.tolist(), key=lambda d: keys[d])
    # the same query gives the same list; another seed pads in another order
    assert np.array_equal(index.rank(["finna"], seed=1).docs, ranking.docs)
    orders = {tuple(index.rank(["absent"], seed=s).docs.tolist()) for s in range(6)}
    assert len(orders) > 1
    # a list size cuts the list
    assert index.rank(["finna"], seed=1, list_size=3).docs.tolist() == ranking.docs[:3].tolist()


def test_ranked_posts_do_not_depend_on_row_order():
    rng = np.random.default_rng(2)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(1, 8))) for _ in range(80)]
    ids = [f"post{i}" for i in range(80)]
    first = PoolIndex(make_pool(texts, post_ids=ids), DEFAULT)
    perm = rng.permutation(80)
    second = PoolIndex(
        make_pool(
            [texts[i] for i in perm],
            is_a=[i % 2 == 0 for i in perm],
            post_ids=[ids[i] for i in perm],
        ),
        DEFAULT,
    )
    for lexicon in (["finna go"], ["ha", "the"], ["zzz"]):
        a = [ids[d] for d in first.rank(lexicon, seed=3).docs]
        b = [ids[perm[d]] for d in second.rank(lexicon, seed=3).docs]
        assert a == b


def test_matched_spans():
    text = "Y'all be FINNA go, finna go now. Finna!"
    spans = matched_spans(text, ["finna go", "y'all"])
    assert [text[s:e] for s, e in spans] == ["Y'all", "FINNA go", "finna go"]
    assert [text[s:e] for s, e in matched_spans(text, ["finna"])] == ["FINNA", "finna", "Finna"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=texts_strategy,
    lexicon=lexicon_strategy,
    depth=st.integers(0, 30),
    list_size=st.one_of(st.none(), st.integers(1, 30)),
)
def test_partial_ranking_is_the_prefix_of_the_whole_list(texts, lexicon, depth, list_size):
    index = PoolIndex(make_pool(texts), DEFAULT)
    whole = index.rank(lexicon, seed=9, list_size=list_size)
    part = index.rank(lexicon, seed=9, list_size=list_size, depth=depth)
    assert part.docs.tolist() == whole.docs[:depth].tolist()
    assert part.length == whole.length == len(whole.docs)
    assert part.n_matching == whole.n_matching


def test_empty_posts_rank_without_matches():
    index = PoolIndex(make_pool(["", "", "!!"]), DEFAULT)
    ranking = index.rank(["finna"], seed=1)
    assert ranking.n_matching == 0 and sorted(ranking.docs.tolist()) == [0, 1, 2]


@pytest.mark.parametrize("list_size", [None, 7, 40, 500])
def test_counts_from_the_partial_list_equal_the_whole_lists(list_size):
    from splits.hypotheses.lift import depth_counts, ranked_counts

    rng = np.random.default_rng(4)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(0, 9))) for _ in range(300)]
    index = PoolIndex(make_pool(texts, is_a=(rng.random(300) < 0.3).tolist()), DEFAULT)
    settings = schema_defaults(
        LiftSettings, k_fractions=(0.005, 0.01, 0.05, 0.1, 0.3), list_size=list_size, seed=5
    )
    for lexicon in (["ha"], ["finna go", "the"], ["absent"]):
        for target in ("a", "b"):
            whole = index.rank(lexicon, 5, list_size)
            expected = depth_counts(index.pool.is_target(target), whole.docs, settings.k_fractions)
            _, counts = ranked_counts(index, lexicon, target, settings)
            assert counts == expected


def test_canonical_lexicon_of_any_iterable_and_unhashable_entries():
    """The canonical form is cached per lexicon (the lift asks for it four times a hypothesis);
    a generator, a repeated call and an entry that cannot be a cache key (a list, as a
    hand-written sandbox query may hold) give what the uncached form gives: each entry's words
    (str of the entry), distinct and sorted."""
    expected = (("a", "b"), ("c",))
    assert canonical_lexicon(["c", "A b", "a  B"]) == expected
    assert canonical_lexicon(e for e in ["c", "A b"]) == expected
    assert canonical_lexicon(["c", "A b"]) == expected
    assert canonical_lexicon(["c", ["a", "b"]]) == (("a", "b"), ("c",))
