"""Fighting Words (splits.hypotheses.fighting_words) against ConvoKit's FightingWords, configured
alike (the same tokens, vocabulary bounds and prior; no text cleaning on either side), on real
Reddit posts (Dreaddit: r/ptsd and r/anxiety against r/relationships), and against the formula
of Monroe et al. written here."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from splits.hypotheses.fighting_words import (
    document_terms,
    fighting_words,
    limit_vocabulary,
    z_scores,
)
from splits.text import words

SETTINGS = dict(ngram_range=(1, 3), min_df=10, max_df=0.5, max_features=None)


@pytest.fixture(scope="module")
def dreaddit(reference_dir):
    frame = pl.read_csv(
        reference_dir / "realdata" / "dreaddit" / "dreaddit-train.csv",
        columns=["subreddit", "id", "text"],
    )
    texts_a = frame.filter(pl.col("subreddit").is_in(["ptsd", "anxiety"]))["text"].to_list()
    texts_b = frame.filter(pl.col("subreddit") == "relationships")["text"].to_list()
    return texts_a, texts_b


def convokit_z(texts_a, texts_b, prior, vocabulary=None):
    convokit = pytest.importorskip("convokit")
    from sklearn.feature_extraction.text import CountVectorizer

    utterances = [
        convokit.Utterance(
            id=f"{side}{i}",
            speaker=convokit.Speaker(id=f"s{side}{i}"),
            text=text,
            meta={"side": side},
        )
        for side, texts in (("a", texts_a), ("b", texts_b))
        for i, text in enumerate(texts)
    ]
    corpus = convokit.Corpus(utterances=utterances)
    vectorizer = CountVectorizer(
        tokenizer=words,
        lowercase=False,
        token_pattern=None,
        ngram_range=SETTINGS["ngram_range"],
        **(
            {"vocabulary": list(vocabulary)}
            if vocabulary is not None
            else {"min_df": SETTINGS["min_df"], "max_df": SETTINGS["max_df"]}
        ),
    )
    model = convokit.FightingWords(cv=vectorizer, prior=prior, text_func=lambda utt: utt.text)
    model.fit(
        corpus,
        class1_func=lambda utt: utt.meta["side"] == "a",
        class2_func=lambda utt: utt.meta["side"] == "b",
    )
    return model.get_ngram_zscores()["z-score"].to_dict()


def test_uniform_prior_equals_convokit_on_real_posts(dreaddit):
    texts_a, texts_b = dreaddit
    ours = fighting_words(
        texts_a, texts_b, prior="uniform", uniform_prior=0.1, prior_scale=1.0, **SETTINGS
    )
    # ConvoKit's prior must be a Python float: a numpy float is taken for a vector
    theirs = convokit_z(texts_a, texts_b, 0.1)
    assert set(ours.terms) == set(theirs)
    assert len(ours.terms) > 1000
    for term, z in zip(ours.terms, ours.z, strict=True):
        assert z == pytest.approx(theirs[term], abs=1e-9), term


def test_informative_prior_equals_convokit_given_the_same_vector(dreaddit):
    texts_a, texts_b = dreaddit
    background = texts_a[::2] + texts_b[::3]
    ours = fighting_words(
        texts_a,
        texts_b,
        prior="informative",
        uniform_prior=0.1,
        prior_scale=500.0,
        background=background,
        **SETTINGS,
    )
    theirs = convokit_z(texts_a, texts_b, ours.prior, vocabulary=ours.terms)
    for term, z in zip(ours.terms, ours.z, strict=True):
        assert z == pytest.approx(theirs[term], abs=1e-9), term


def test_z_scores_follow_the_papers_formula():
    rng = np.random.default_rng(3)
    y_a, y_b = rng.integers(0, 50, 40), rng.integers(0, 50, 40)
    a = rng.uniform(0.01, 2.0, 40)
    n_a, n_b, a0 = y_a.sum(), y_b.sum(), a.sum()
    for w in range(40):
        delta = math.log((y_a[w] + a[w]) / (n_a + a0 - y_a[w] - a[w])) - math.log(
            (y_b[w] + a[w]) / (n_b + a0 - y_b[w] - a[w])
        )
        expected = delta / math.sqrt(1 / (y_a[w] + a[w]) + 1 / (y_b[w] + a[w]))
        assert z_scores(y_a, y_b, a)[w] == pytest.approx(expected, rel=1e-12)


def test_vocabulary_limit_keeps_the_most_frequent_ties_alphabetically():
    texts = ["b a c", "a b", "c d", "d e", "e a"]  # counts: a 3, b 2, c 2, d 2, e 2
    matrix, vocabulary = document_terms(texts, (1, 1))
    _, kept = limit_vocabulary(
        matrix, vocabulary, min_df=1, max_df=1.0, max_features=3, ties="alphabetical"
    )
    assert kept.terms == ("a", "b", "c")  # b, c, d, e tie at 2: the first two alphabetically
    _, kept = limit_vocabulary(
        matrix, vocabulary, min_df=3, max_df=1.0, max_features=None, ties="alphabetical"
    )
    assert kept.terms == ("a",)
    _, kept = limit_vocabulary(
        matrix, vocabulary, min_df=1, max_df=0.5, max_features=None, ties="alphabetical"
    )
    assert kept.terms == ("b", "c", "d", "e")  # a is in 3 of 5 documents


def test_document_terms_count_consecutive_token_ngrams():
    matrix, vocabulary = document_terms(["The cat, the CAT!", "cat"], (1, 2))
    counts = dict(zip(vocabulary.terms, np.asarray(matrix.sum(axis=0)).ravel(), strict=True))
    assert counts == {"cat": 3, "cat the": 1, "the": 2, "the cat": 2}


def test_informative_prior_ranks_one_groups_words_above_function_words():
    """The issue's finding on real Reddit, planted: a word only group A uses ("emory", as
    Cornell's students on every topic) against function words both use, group A a little more often.
    Under ConvoKit's uniform 0.1 prior the function words rank first (the variance of a word the
    other group never uses is dominated by 1/0.1); under the informative prior, whose background
    is the two groups' posts elsewhere, the group's own word does."""
    rng = np.random.default_rng(0)
    filler = [f"w{i}" for i in range(300)]

    def post(group: str) -> str:
        tokens = list(rng.choice(filler, 12))
        tokens += ["they"] * (11 if group == "a" else 10) + ["are"] * (6 if group == "a" else 5)
        if group == "a" and rng.random() < 0.25:
            tokens.append("emory")
        return " ".join(tokens)

    texts_a = [post("a") for _ in range(400)]
    texts_b = [post("b") for _ in range(400)]
    background = [post(g) for g in "ab" * 1000]
    common = dict(ngram_range=(1, 1), min_df=1, max_df=1.0, max_features=None)
    uniform = fighting_words(
        texts_a, texts_b, prior="uniform", uniform_prior=0.1, prior_scale=None, **common
    )
    informative = fighting_words(
        texts_a,
        texts_b,
        prior="informative",
        uniform_prior=0.1,
        prior_scale=None,
        background=background,
        **common,
    )
    assert uniform.top("a", 1) == ["are"]  # "emory" only after a function word
    assert informative.top("a", 1) == ["emory"]


def _section(**changes):
    from splits.hypotheses.settings import FightingWordsSection

    values = dict(
        prior="informative",
        uniform_prior=0.1,
        prior_scale=None,
        text_cleaning="none",
        token_pattern=None,
        ngram_max=3,
        min_df=2,
        max_df=0.5,
        max_features=None,
        max_features_ties="alphabetical",
        min_z=1.96,
        lexicon_size=None,
        lexicon_size_without_models=10,
    )
    return FightingWordsSection(**{**values, **changes})


def _corpus(seed: int) -> list[str]:
    """Short texts over a small vocabulary (many shared n-grams and count ties), with what the
    tokenizers split on or may treat apart: non-ASCII letters and digits, case, punctuation,
    underscores, an empty text, a text of no word, and a letter of Unicode 15 (U+1E030), which
    polars' regex takes for a letter and Python 3.11's does not (the background's tokens then
    differ from the discovery side's)."""
    rng = np.random.default_rng(seed)
    vocab = "Ab ab ba b2 Émile émile straße ß ½ ١٢ naïve x_y don't a-b Ωmega ω z".split()
    vocab.append("a\U0001e030b")
    texts = [
        " ".join(rng.choice(vocab, size=rng.integers(0, 12))) + rng.choice(["", ".", " !", "\n"])
        for _ in range(60)
    ]
    return texts + ["", "?!", texts[0], texts[1]]


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"max_features": 7},
        {"max_features": 7, "max_features_ties": "scikit-learn"},
        {"ngram_max": 1, "min_df": 1, "max_df": 1.0},
        {"ngram_max": 4, "min_df": 3, "max_df": 0.9, "max_features": 11},
        {"token_pattern": r"(?u)\b\w\w+\b", "max_features": 9},
    ],
)
def test_gram_table_counts_equal_the_pool_by_pool_counts(changes):
    """The baseline's n-gram table (splits.hypotheses.gram_table, every text cut once) gives the
    discovery counts of fighting_words.side_counts and the background counts of
    a plain count of the tokenizer's n-grams exactly: the same vocabulary in the same order, the
    same integers."""
    from collections import Counter

    from splits.hypotheses.fighting_words import side_counts
    from splits.hypotheses.gram_table import GramTable
    from splits.text import reference_word_frame, words

    section = _section(**changes)
    tokenizer = section.tokenizer()
    for seed in range(3):
        texts = _corpus(seed)
        table = GramTable(list(dict.fromkeys(texts)), section.ngram_max, tokenizer)
        texts_a, texts_b = texts[: len(texts) // 2], texts[len(texts) // 2 :]
        expected = side_counts(texts_a, texts_b, section, tokenizer)
        vocabulary, counts_a, counts_b, ids = table.side_counts(texts_a, texts_b, section)
        assert vocabulary == expected[0] and vocabulary.terms
        assert counts_a.dtype == expected[1].dtype == np.int64
        np.testing.assert_array_equal(counts_a, expected[1])
        np.testing.assert_array_equal(counts_b, expected[2])

        # the background: every text (with repetition) and a part of them, counted plainly;
        # the project's words as polars' regex cuts them (splits.text.reference_word_frame, the
        # definition), which differs from Python's on the newest letters (U+1E030 here)
        def plain_counts(some: list[str]) -> Counter:
            counted = Counter()
            for text in some:
                if tokenizer is words:
                    tokens = reference_word_frame(pl.Series([text]))["tok"].to_list()
                else:
                    tokens = tokenizer(text)
                for n in range(1, section.ngram_max + 1):
                    counted.update(" ".join(tokens[i : i + n]) for i in range(len(tokens) - n + 1))
            return counted

        totals = table.background_counts(texts)
        assert {table.terms[i]: int(n) for i, n in enumerate(totals) if n} == plain_counts(texts)
        part = texts[::3]
        held = plain_counts(part)
        assert table.heldout_counts(part, ids).tolist() == [
            held.get(t, 0) for t in vocabulary.terms
        ]
