"""The one word splitter and stop-word list (``splits.text``) and the builtin lexical models'
content terms built on it, by hand."""

from __future__ import annotations

import re

from splits.text import STOP_WORDS, content_terms, content_words, words


def test_words_split_on_anything_but_letters_and_digits():
    assert words("The NBA's Three-Pointer, café snake_case 3pt") == [
        "the", "nba", "s", "three", "pointer", "café", "snake", "case", "3pt",
    ]  # fmt: skip
    assert words("") == [] and words(None) == []


def test_content_words_drop_exactly_the_stop_words():
    text = "We were never going to find the answer in all of this, were we?"
    expected = [w for w in re.findall(r"[^\W_]+", text.lower()) if w not in STOP_WORDS]
    assert content_words(text) == expected == ["going", "answer"]
    assert {"the", "we", "never", "find"} <= STOP_WORDS and len(STOP_WORDS) == 318


def test_content_terms_of_the_builtin_models():
    # stop words, one-letter pieces ("t" of "don't") and numbers go; a pair never spans a comma
    assert content_terms("I don't like 42 basketball games, honestly", bigrams=False) == [
        "don", "like", "basketball", "games", "honestly",
    ]  # fmt: skip
    terms = content_terms("basketball games, honestly fun", bigrams=True)
    assert "basketball games" in terms and "games honestly" not in terms
    assert "honestly fun" in terms
