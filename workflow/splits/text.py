"""Words of a text, one implementation for every stage that reads words.

- ``words``: the text lowercased and cut into maximal runs of Unicode letters and numbers
  (general categories L* and N*; Python regex ``[^\\W_]+``, polars ``[\\p{L}\\p{N}]+``, which
  agree except on code points assigned after Unicode 15). Punctuation, underscores, apostrophes
  and emoji joiners split words, so "don't" gives "don", "t". Stop words are kept: lexicon
  entries match on these (lexical features are often function words: "he be", "y'all").
- ``content_words``: ``words`` without ``STOP_WORDS``: the BM25 topic splits' documents and
  queries (scored exactly as ``rank_bm25`` scores these token lists).
- ``STOP_WORDS``: the one English stop-word list of the project (the Glasgow IR group's list as
  shipped by scikit-learn).

- ``content_terms``: the terms the builtin lexical TM and CM compare: ``words`` that are not stop
  words, have two characters or more and are not numbers, plus adjacent pairs of them within a
  stretch of text without punctuation.
- ``compile_token_pattern``: a scikit-learn style token pattern (Fighting Words'
  ``token_pattern``), checked: a regular expression with at most one group.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

import polars as pl

from splits.errors import ConfigError

WORD_PATTERN = r"[^\W_]+"  # Python: letters (L*) and numbers (N*), i.e. \w without "_"
POLARS_WORD_PATTERN = r"[\p{L}\p{N}]+"  # the same class for polars' (Rust) regex engine
WORD_RE = re.compile(WORD_PATTERN)

# The classic English stop-word list (Glasgow IR group's list as shipped by scikit-learn).
STOP_WORDS = frozenset(
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
#: the stop words as a polars list literal, for ``is_in`` inside lazy queries
STOP_WORDS_SERIES = pl.Series("stop", sorted(STOP_WORDS), dtype=pl.String)


def words(text: str | None) -> list[str]:
    """Lowercase letter/digit runs of ``text``, in order, stop words kept."""
    if not text:
        return []
    return WORD_RE.findall(str(text).lower())


def content_words(text: str | None) -> list[str]:
    """``words`` without the stop words (the BM25 tokens of a document or keyword phrase)."""
    return [t for t in words(text) if t not in STOP_WORDS]


_PUNCTUATION = re.compile(r"[,.;:!?()\[\]\"\n]+")


@functools.lru_cache(maxsize=1 << 16)
def _is_content(token: str) -> bool:
    return token not in STOP_WORDS and len(token) > 1 and not token.isdigit()


def content_terms(text: str, bigrams: bool = True) -> list[str]:
    """Content words, plus (with ``bigrams``) each pair of adjacent content words as "w1 w2"."""
    out = [t for t in words(text) if _is_content(t)]
    if bigrams:
        for chunk in _PUNCTUATION.split(str(text)):  # a pair never spans punctuation
            raw = words(chunk)
            out += [
                f"{a} {b}"
                for a, b in zip(raw, raw[1:], strict=False)
                if _is_content(a) and _is_content(b)
            ]
    return out


def query_tokens(keywords: Iterable[str]) -> list[str]:
    """The query of a topic: the tokens of every keyword phrase, in order, with repetition."""
    return [token for phrase in keywords for token in content_words(phrase)]


def compile_token_pattern(token_pattern: str) -> re.Pattern:
    """The pattern compiled; ConfigError when it is not a regular expression or captures more
    than one group (scikit-learn takes a single group's text as the token)."""
    try:
        pattern = re.compile(token_pattern)
    except re.error as err:
        raise ConfigError(
            f"hypotheses.fighting_words.token_pattern: not a regular expression ({err})"
        ) from None
    if pattern.groups > 1:
        raise ConfigError(
            "hypotheses.fighting_words.token_pattern: more than one group (at most one: its "
            "text is the token)"
        )
    return pattern
