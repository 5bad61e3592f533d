"""Self-ID phrase search over a demographic's posts (docs/method.md §2.5, step 1).

Every self-ID and anti-self-ID phrase of d, compiled into ONE regex ``(?i)\\b(?:p1|p2|...)\\b``
(longest phrase first, so "I'm a Roman Catholic" wins over "I'm a Roman"), case-insensitive, on
word boundaries, where an apostrophe in a phrase matches straight and curly apostrophes (' ’ ‘ ʼ)
and a space matches any run of spaces, tabs or no-break spaces. Matching is vectorised in polars
(Rust regex): a ``contains`` filter, then one ``replace_all`` that brackets every match with NUL
markers and a ``split`` whose piece lengths give each match's character offsets; no Python loop
over posts. Offsets (``start``, ``end``) are Python string indices (characters) into the post's
text, as ``re.finditer`` reports them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import polars as pl

from splits.config.definitions import Demographic
from splits.errors import ConfigError

log = logging.getLogger(__name__)

APOSTROPHES = "'\u2019\u2018\u02bc"  # ' ’ ‘ ʼ
APOSTROPHE_CLASS = "['\u2019\u2018\u02bc]"
SPACE_CLASS = "[ \\t\\xa0]+"
REGEX_META = set("\\.+*?()|[]{}^$#&-~")
MARK = "\x00"
MATCH_COLUMNS = [
    "post_id",
    "author",
    "phrase",
    "kind",
    "match",
    "start",
    "end",
    "context",
    "left_context",
    "right_context",
]


def normalise_phrase(phrase: str) -> str:
    """Lowercase, apostrophes made straight, whitespace runs made one space."""
    text = phrase.lower()
    for ch in APOSTROPHES:
        text = text.replace(ch, "'")
    return " ".join(text.split())


def phrase_regex(phrase: str) -> str:
    """The regex of one phrase (without boundaries): escaped literal characters, any
    apostrophe for an apostrophe, any run of blanks for a space. Valid in Rust and Python."""
    parts = []
    for word in normalise_phrase(phrase).split(" "):
        out = []
        for ch in word:
            if ch == "'":
                out.append(APOSTROPHE_CLASS)
            elif ch in REGEX_META:
                out.append("\\" + ch)
            else:
                out.append(ch)
        parts.append("".join(out))
    return SPACE_CLASS.join(parts)


@dataclass(frozen=True)
class PhraseSet:
    """The phrases of one demographic: normalised phrase -> kind ("self" | "anti")."""

    kinds: dict[str, str]

    @classmethod
    def from_lists(cls, self_phrases, anti_phrases, where: str = "phrases") -> PhraseSet:
        kinds: dict[str, str] = {}
        for kind, phrases in (("self", self_phrases), ("anti", anti_phrases)):
            for phrase in phrases:
                key = normalise_phrase(str(phrase))
                if not key:
                    raise ConfigError(f"{where}: empty phrase")
                if kinds.get(key, kind) != kind:
                    raise ConfigError(
                        f"{where}: phrase {phrase!r} is both self-ID and anti-self-ID"
                    )
                kinds[key] = kind  # case-insensitive duplicates collapse to one phrase
        if not kinds:
            raise ConfigError(f"{where}: no self-ID or anti-self-ID phrases")
        return cls(kinds)

    @classmethod
    def from_demographic(cls, demographic: Demographic) -> PhraseSet:
        return cls.from_lists(
            demographic.self_id_phrases,
            demographic.anti_self_id_phrases,
            where=f"demographics.file: {demographic.key}",
        )

    @property
    def ordered(self) -> list[str]:
        """Longest first (then alphabetical): the alternation prefers the longest phrase."""
        return sorted(self.kinds, key=lambda p: (-len(p), p))

    @property
    def pattern(self) -> str:
        """The exact pattern: case-insensitive, Unicode word boundaries."""
        alternation = "|".join(phrase_regex(p) for p in self.ordered)
        return f"(?i)\\b(?:{alternation})\\b"

    @property
    def ascii_pattern(self) -> str:
        """The same with ASCII word boundaries (fast in Rust; see ``find_phrases``)."""
        alternation = "|".join(phrase_regex(p) for p in self.ordered)
        return f"(?i)(?-u:\\b)(?:{alternation})(?-u:\\b)"

    def table(self) -> pl.DataFrame:
        return pl.DataFrame(
            {"phrase": list(self.kinds), "kind": list(self.kinds.values())},
            schema={"phrase": pl.String, "kind": pl.String},
        )


def normalise_match_expr(column: str) -> pl.Expr:
    return (
        pl.col(column)
        .str.to_lowercase()
        .str.replace_all(APOSTROPHE_CLASS, "'")
        .str.replace_all(SPACE_CLASS, " ")
    )


def _locate(candidates: pl.LazyFrame, pattern: str) -> pl.LazyFrame:
    """One row per regex match in ``candidates`` (``_row``, text, ...): the matched text and
    its character offsets. Each match is bracketed by NUL marks with one ``replace_all``; the
    lengths of the pieces between the marks give the offsets (NULs of the text itself are
    replaced by another single character first, so offsets do not move)."""
    return (
        candidates.with_columns(
            pl.col("text")
            .str.replace_all(MARK, "\x01", literal=True)
            .str.replace_all(pattern, MARK + "${0}" + MARK)
            .str.split(MARK)
            .alias("_pieces")
        )
        .explode("_pieces")
        .with_columns(
            pl.int_range(pl.len()).over("_row").alias("_piece"),
            pl.col("_pieces").str.len_chars().cast(pl.Int64).alias("_len"),
        )
        .with_columns((pl.col("_len").cum_sum().over("_row") - pl.col("_len")).alias("start"))
        .filter(pl.col("_piece") % 2 == 1)
        .rename({"_pieces": "match"})
        .with_columns((pl.col("start") + pl.col("_len")).alias("end"))
        .drop("_piece", "_len")
    )


def find_phrases(
    posts: pl.LazyFrame | pl.DataFrame, phrases: PhraseSet, context_chars: int
) -> pl.DataFrame:
    """Every phrase occurrence in ``posts`` (columns post_id, author, text): one row per match
    with its normalised phrase, kind, matched text, character offsets and context window.

    Semantics are those of ``phrases.pattern`` (Unicode word boundaries, as Python's ``re``).
    Speed: Rust's fast DFA engines do not support Unicode word boundaries, so the search runs
    with ASCII boundaries (``phrases.ascii_pattern``) and then checks the character on each
    side of every match. Every phrase starts and ends with an ASCII word character, so a
    Unicode boundary is always an ASCII one; where all matches of a post also have Unicode
    boundaries the two searches agree match for match. The few posts with a match next to a
    non-ASCII word character (e.g. "éI'm") are searched again with the exact pattern."""
    posts = posts.lazy() if isinstance(posts, pl.DataFrame) else posts
    candidates = (
        posts.select("post_id", "author", "text")
        .filter(pl.col("text").str.contains(phrases.ascii_pattern))
        # one streaming pass over the texts, holding only the candidates (a row index before
        # the filter would make polars load every text); candidates keep the input order
        .collect(engine="streaming")
        .with_row_index("_row")
    )
    fast = (
        _locate(candidates.lazy(), phrases.ascii_pattern)
        .with_columns(
            (
                pl.col("text")
                .str.slice(
                    (pl.col("start") - 1).clip(lower_bound=0), (pl.col("start") > 0).cast(pl.Int64)
                )
                .str.contains(r"^\w")
                | pl.col("text").str.slice(pl.col("end"), 1).str.contains(r"^\w")
            ).alias("_not_unicode_boundary")
        )
        .collect()
    )
    redo = fast.filter(pl.col("_not_unicode_boundary"))["_row"].unique()
    hits = pl.concat(
        [
            fast.filter(~pl.col("_row").is_in(redo.implode())).drop("_not_unicode_boundary"),
            _locate(
                candidates.lazy().filter(pl.col("_row").is_in(redo.implode())), phrases.pattern
            ).collect(),
        ]
    )
    hits = (
        hits.lazy()
        .with_columns(
            (pl.col("start") - context_chars).clip(lower_bound=0).alias("_left_start"),
            normalise_match_expr("match").alias("phrase"),
        )
        .with_columns(
            pl.col("text")
            .str.slice(pl.col("_left_start"), pl.col("start") - pl.col("_left_start"))
            .alias("left_context"),
            pl.col("text").str.slice(pl.col("end"), context_chars).alias("right_context"),
        )
        .with_columns(
            pl.concat_str("left_context", "match", "right_context").alias("context"),
        )
        .join(phrases.table().lazy(), on="phrase", how="left")
        .sort("_row", "start")
        .select(MATCH_COLUMNS)
        .collect()
    )
    unmapped = hits.filter(pl.col("kind").is_null())
    if unmapped.height:
        # a case-folding corner (e.g. the Kelvin sign) matched but normalises differently
        log.warning(
            "%d matches whose text does not normalise to a phrase: dropped", unmapped.height
        )
        hits = hits.filter(pl.col("kind").is_not_null())
    return hits
