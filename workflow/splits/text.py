"""Words of a text, one implementation for every stage that reads words.

- ``words``: the text lowercased and cut into maximal runs of Unicode letters and numbers
  (general categories L* and N*; Python regex ``[^\\W_]+``, polars ``[\\p{L}\\p{N}]+``, which
  agree except on code points assigned after Unicode 15). Punctuation, underscores, apostrophes
  and emoji joiners split words, so "don't" gives "don", "t". Stop words are kept: lexicon
  entries match on these (lexical features are often function words: "he be", "y'all").
- ``content_words``: ``words`` without ``STOP_WORDS``: the BM25 topic splits' documents and
  queries (scored exactly as ``rank_bm25`` scores these token lists).
- ``word_frame``: ``words`` (or ``content_words``) of a polars Series of texts at once, as
  (doc, tok) rows: the same rows as ``reference_word_frame`` (polars' lowercase and regex, the
  definition), found faster for ASCII texts (``word_frame``'s docstring says how).
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
from typing import TYPE_CHECKING

from splits.errors import ConfigError

# numpy and polars load where the frames are made: every Snakemake start checks the topics'
# words with the definitions below alone, and the two imports would cost it ~0.15 s
if TYPE_CHECKING:
    import numpy as np
    import polars as pl

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


@functools.cache
def stop_words_series() -> pl.Series:
    """The stop words as a polars Series, for ``is_in`` inside lazy queries."""
    import polars as pl

    return pl.Series("stop", sorted(STOP_WORDS), dtype=pl.String)


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


# --------------------------------------------------------------------------- (doc, tok) rows


#: each byte of an ASCII text as the fast path reads it (a ``bytes.translate`` table): a letter
#: or digit lowercased, any other byte (punctuation, space, control, and every byte of a
#: multi-byte character) a space
_ASCII_WORD_TABLE = bytes(
    c + 32 if 65 <= c <= 90 else c if 97 <= c <= 122 or 48 <= c <= 57 else 32 for c in range(256)
)


_DOC_MARK = "\x01"  # between two texts (as the middle byte of _DOC_SEPARATOR): never a word
_DOC_SEPARATOR = " \x01 "
_MAX_JOINED_BYTES = 2**31  # the most bytes joined into one string (polars: below 4 GiB)


def reference_word_frame(texts: pl.Series, drop_stop_words: bool = False) -> pl.DataFrame:
    """(doc, tok) rows of ``texts``: each text's ``words`` (``content_words`` with
    ``drop_stop_words``) in text order, documents in order (``doc``: the row index, polars'
    index type); a null text has no words. The definition ``word_frame`` is checked against,
    and its path for texts that are not ASCII."""
    import polars as pl

    frame = (
        pl.DataFrame({"text": texts.cast(pl.String)})
        .with_row_index("doc")
        .select(
            pl.col("doc"),
            pl.col("text")
            .fill_null("")
            .str.to_lowercase()
            .str.extract_all(POLARS_WORD_PATTERN)
            .alias("tok"),
        )
        .explode("tok")
    )
    kept = pl.col("tok").is_not_null()
    if drop_stop_words:
        kept = kept & ~pl.col("tok").is_in(stop_words_series().implode())
    return frame.filter(kept)


def word_frame(texts: pl.Series, drop_stop_words: bool = False) -> pl.DataFrame:
    """``reference_word_frame``, the same rows, found without a regular expression for ASCII texts.

    In ASCII, polars' lowercase maps A-Z to a-z and nothing else, and ``[\\p{L}\\p{N}]`` is
    ``[A-Za-z0-9]`` (no other ASCII character is a letter or a number), so the words of an ASCII
    text are the maximal runs of ``[a-z0-9]`` of the text with A-Z lowered. The texts are joined
    into one string, each byte mapped by one table (``_ASCII_WORD_TABLE``: a letter or digit
    lowered, any other byte a space) with a mark between texts (``_DOC_MARK`` between spaces),
    and the string split on the space: the pieces that are neither empty nor the mark are the
    words, in order, and the marks before a piece count its document. Texts holding a byte
    >= 0x80 (any non-ASCII character) are blanked there and go through ``reference_word_frame``;
    its rows are put back in document order by a stable sort (each document's rows come from
    one path, in text order). No pyarrow: the jobs that tokenise do not import it."""
    import polars as pl

    texts = texts.cast(pl.String)
    n = texts.len()
    if n == 0:
        return reference_word_frame(texts, drop_stop_words)
    filled = texts.fill_null("")
    lengths = filled.str.len_bytes().cast(pl.Int64).to_numpy()
    if int(lengths.sum()) + len(_DOC_SEPARATOR) * n > _MAX_JOINED_BYTES and n > 1:
        half = n // 2  # a polars string holds less than 4 GiB: two halves, each joined alone
        first = word_frame(texts.slice(0, half), drop_stop_words)
        second = word_frame(texts.slice(half), drop_stop_words)
        shift = pl.lit(half, dtype=first.schema["doc"])
        return pl.concat([first, second.with_columns(pl.col("doc") + shift)])
    joined, unicode_docs = _ascii_word_text(filled, lengths)
    dropped = pl.Series(["", _DOC_MARK], dtype=pl.String)
    if drop_stop_words:
        dropped = dropped.append(stop_words_series())
    fast = (
        pl.DataFrame({"tok": [joined]}, schema={"tok": pl.String})
        .lazy()
        .select(pl.col("tok").str.split(" "))
        .explode("tok")
        .select(
            doc=(pl.col("tok") == _DOC_MARK).cum_sum().cast(pl.get_index_type()),
            tok=pl.col("tok"),
        )
        .filter(~pl.col("tok").is_in(dropped.implode()))
        .collect()
    )
    if len(unicode_docs) == 0:
        return fast
    slow = reference_word_frame(texts.gather(unicode_docs), drop_stop_words)
    global_doc = pl.Series("doc", unicode_docs).cast(fast.schema["doc"])
    slow = slow.with_columns(global_doc.gather(slow.get_column("doc")))
    return pl.concat([fast, slow]).sort("doc", maintain_order=True)  # stable: text order kept


def _ascii_word_text(filled: pl.Series, lengths: np.ndarray) -> tuple[str, np.ndarray]:
    """The texts ``filled`` (String, no nulls; ``lengths`` their lengths in bytes) joined by
    ``_DOC_SEPARATOR`` with every byte mapped by ``_ASCII_WORD_TABLE``, each separator's middle
    byte then set to ``_DOC_MARK``, and every byte of a text holding a byte >= 0x80 made a
    space; and the indices of those texts, ascending."""
    import numpy as np
    import polars as pl

    joined = filled.str.join(_DOC_SEPARATOR).cast(pl.Binary).item()
    data = np.frombuffer(joined, dtype=np.uint8)
    starts = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths + len(_DOC_SEPARATOR), out=starts[1:])
    unicode = np.zeros(len(lengths), dtype=bool)
    unicode[np.searchsorted(starts, np.flatnonzero(data >= 0x80), side="right") - 1] = True
    # every byte mapped in one C pass, into a buffer of its own (written below); numpy's
    # table[data] first made each byte an 8-byte index: 8x the text in memory, 3.6x the time
    words = np.frombuffer(bytearray(joined.translate(_ASCII_WORD_TABLE)), dtype=np.uint8)
    if unicode.any():
        words[np.repeat(unicode, lengths + len(_DOC_SEPARATOR))[: len(words)]] = 32
    words[starts[1:-1] - 2] = ord(_DOC_MARK)
    return str(memoryview(words), "ascii"), np.flatnonzero(unicode)


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
