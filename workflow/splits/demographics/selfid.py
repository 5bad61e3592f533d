"""Self-identification validation and thresholds (docs/method.md §2.5).

``splits selfid search`` (one demographic d):

1. Phrase search over D_d: every self-ID and anti-self-ID phrase of d, compiled into ONE regex
   ``(?i)\\b(?:p1|p2|...)\\b`` (longest phrase first, so "I'm a Roman Catholic" wins over
   "I'm a Roman"), case-insensitive, on word boundaries, where an apostrophe in a phrase matches
   straight and curly apostrophes (' ’ ‘ ʼ) and a space matches any run of spaces, tabs or
   no-break spaces. Matching is vectorised in polars (Rust regex): a ``contains`` filter, then one
   ``replace_all`` that brackets every match with NUL markers and a ``split`` whose piece lengths
   give each match's character offsets; no Python loop over posts. Offsets (``start``, ``end``)
   are Python string indices (characters) into the post's text, as ``re.finditer`` reports them.
2. Verification of each occurrence in its context window (``context_chars`` each side):
   ``rules`` (default; vectorised regex rules, first that fires wins): ``quoted`` (inside
   quotation marks on its line, or right after an opening quote), ``reported_speech`` ("says",
   "said", "told me that", "was like" right before it; not "I say", "I tell them"), ``sarcasm`` ("/s", "yeah right", "jk"
   near it), ``hypothetical`` ("if", "imagine", "pretend", "what if", "even if" shortly before
   it), ``negated`` ("not", "never", "don't think", "wouldn't say" shortly before it),
   ``question`` (the clause ends in "?", or the sentence opens with a question word), ``visit``
   (a visitor, not a member: the phrase names a visit ("I'm visiting") or the clause after it
   names an occasion ("I'm at Emory for the debate tournament", "... for a campus tour"), a
   passing time ("this weekend", "next Tuesday"), an event as the place ("I was at a pledge
   party") or "in town"; never for a phrase of past membership such as "I graduated"), otherwise
   ``statement`` (verified); or ``llm``: a registry model answers YES/NO to the prompt
   ``resources/prompts/selfid_verify.txt``; answers without YES/NO are counted as undetected
   and not verified.
3. Curves: users of U_d binned by group-ness percentile (``bins`` equal bins, default 20); per
   bin the verified self-ID and anti-self-ID occurrences per user, divided by the bin's mean
   posts per user (= occurrences per post; shown per 1,000 posts).
4. Threshold: the demographics file's value, or with ``auto`` the breakpoint of a segmented
   ("hinge") least-squares fit of the self-ID curve: constant below the breakpoint, a straight
   line above it, bins weighted by their posts, breakpoints at bin edges with at least two
   non-empty bins on each side; the breakpoint with the smallest weighted squared error wins
   (ties: the lower one). This finds where the self-ID rate leaves its low floor and starts
   rising with group-ness, whether it then jumps (a step) or climbs (a ramp). Without any
   verified self-ID, or with fewer than four non-empty bins (massive ties), ``auto`` falls
   back to the 75th percentile with a warning (``source: auto_fallback`` in threshold.json).
5. Formula comparison: for each group-ness formula (``sum_log``, ``breadth_x_volume``,
   ``entropy``): ROC AUC of the score for users with verified self-IDs (and no verified
   anti-self-ID) against users with verified anti-self-IDs (and no verified self-ID), the
   self-ID and anti-self-ID rates above the threshold and their ratio, the share of self-ID
   users above the threshold, and the formula's own ``auto`` threshold.

``splits selfid summary`` gathers the per-demographic thresholds into ``thresholds.json`` and the
comparisons into one CSV and one Markdown table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from splits.config.definitions import THRESHOLDS_SUPPORT_KEY, Demographic
from splits.config.templates import PROMPT_SLOTS, unknown_slot_error, unknown_slots
from splits.demographics.groupness import FORMULAS, find_demographic, groupness_column
from splits.errors import ConfigError
from splits.health import Finding, log_findings, write_findings
from splits.io import read_json, write_json, write_parquet, write_text
from splits.plots import message_figure, save_figure

log = logging.getLogger(__name__)

APOSTROPHES = "'\u2019\u2018\u02bc"  # ' ’ ‘ ʼ
APOSTROPHE_CLASS = "['\u2019\u2018\u02bc]"
SPACE_CLASS = "[ \\t\\xa0]+"
REGEX_META = set("\\.+*?()|[]{}^$#&-~")
MARK = "\x00"
VERIFIERS = ("rules", "llm")
AUTO_FALLBACK = 75.0  # the paper's most common threshold, used when "auto" has no curve to read
SUPPORT_PERMUTATIONS = 999  # shuffles of the users over the percentiles (existence of a rise)
SUPPORT_MAX_P = 0.05  # above: a rise as large comes by chance, warn
SUPPORT_REPLICATES = 200  # bootstrap resamples of the users (location of the breakpoint)
SUPPORT_MIN_AGREEMENT = 0.5  # below: the breakpoint moves with the sample, warn
OPT_IN_KEY = "demographics.accept_unsupported_thresholds"
STAGE = "selfid"
SUPPORT_MIN_SELF_IDS = 20  # fewer verified self-IDs: no curve to read a threshold from
REASONS = (
    "quoted",
    "reported_speech",
    "sarcasm",
    "hypothetical",
    "negated",
    "question",
    "visit",
    "statement",
)
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


# --------------------------------------------------------------------------- phrases


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
    posts: pl.LazyFrame | pl.DataFrame, phrases: PhraseSet, context_chars: int = 150
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


# --------------------------------------------------------------------------- rule verifier

_QUOTE_OPEN_BEFORE = r"[\"“‘']\s*$"
_REPORTING_VERBS = (
    r"says?|said|saying|tells?|told|telling|claims?|claimed|claiming|"
    r"writes?|wrote|writing|yells?|yelled|shouts?|shouted|screams?|screamed|repl(?:y|ies|ied)|"
    r"answer(?:s|ed)?|insists?|insisted|announc(?:e|es|ed)|goes|went|quote|quoting|joke[sd]?|"
    r"joking|typed|posted|texted|mutter(?:s|ed)?|whisper(?:s|ed)?"
)
_REPORTED_SPEECH = (
    rf"(?i)(?:\b(?:{_REPORTING_VERBS})(?:\s+(?:to\s+)?(?:me|us|him|her|them|everyone|people|"
    r"you|my\s+\w+|the\s+\w+))?(?:\s+(?:that|like))?"
    r"|\b(?:was|were|is|are|'s|’s|be|being)\s+(?:all\s+)?like)[\s,:\-–—]*$"
)
# the author reporting their own words ("when people ask, I say I'm Catholic") is a claim
_FIRST_PERSON_REPORT = (
    r"(?i)\bI(?:\s+(?:always|usually|just|often|then|simply))?\s+(?:say|said|tell|told|write|"
    r"wrote|answer|answered|reply|replied)(?:\s+(?:them|him|her|you|people|everyone))?"
    r"(?:\s+that)?[\s,:\-–—]*$"
)
_SARCASM_LEFT = (
    r"(?i)\b(?:yeah,?\s+right|yea,?\s+right|oh,?\s+sure|sure,?\s+jan|oh\s+yeah,?\s+totally|"
    r"totally|obviously|because\s+apparently|apparently)\b[\s,]*$"
)
_SARCASM_RIGHT = r"(?i)(?:^|\s|[.!,])/s\b|\b(?:jk|j/k|just\s+kidding|kidding|not\s+really|lol\s+no|yeah\s+right|sarcasm)\b"
_HYPOTHETICAL = (
    r"(?i)\b(?:if|unless|suppose|supposing|imagine|imagining|pretend|pretending|assume|assuming|"
    r"hypothetically|wish|whether|as\s+though|in\s+case)\b(?:\W+\w+){0,2}[\W]*$"
)
# a visit, not membership: "I'm at Emory for the debate tournament", "I'm in town", "I'm
# visiting Cornell this Tuesday", "I was at a pledge party" - the clause after the phrase names
# an occasion, a passing time, or an event as the place
_VISIT_OCCASION = (
    r"tournaments?|conferences?|competitions?|meets?|matche?s?|games?|interviews?|visits?|tours?|"
    r"open\s+house|weekends?|days?|nights?|weeks?|events?|workshops?|summits?|debates?|"
    r"hackathons?|weddings?|funerals?|concerts?|part(?:y|ies)|reunions?|talks?|shows?|festivals?"
)
_VISIT_RIGHT = (
    r"(?i)^\W*(?:town\b|(?:\S+\s+){0,3}?for\s+(?:the\s+|a\s+|an\s+|this\s+|our\s+|my\s+)"
    r"(?:[\w&'-]+\s+){0,4}?(?:" + _VISIT_OCCASION + r")\b"
    r"|(?:\S+\s+){0,3}?(?:this|next|until|till)\s+(?:morning|afternoon|evening|weekend|week|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b"
    r"|(?:a|an|the)\s+(?:[\w&'-]+\s+){0,2}?(?:" + _VISIT_OCCASION + r")\b)"
)
_VISIT_PHRASE = r"(?i)\bvisit(?:ing|s)?\b"
_PAST_MEMBERSHIP = r"(?i)graduat|\balum|\bclass\s+of\b|\bdegree\b"  # never a visit
_NEGATED = (
    r"(?i)(?:\b(?:not|never|no\s+longer|nor|neither|hardly|deny|denied|doubt|no\s+way)\b"
    r"|\w+n['’]t\b|\bcannot\b)(?:\W+\w+){0,3}[\W]*$"
)
_QUESTION_OPENER = (
    r"(?i)^\s*(?:am|are|is|was|were|do|does|did|can|could|would|should|will|how|why|what|who|"
    r"whom|when|where|which|isn['’]t|aren['’]t|don['’]t|doesn['’]t)\b"
)
_CLAUSE_TO_QUESTION = r"^[^.!?,;:\n]*\?"
_CLAUSE_BREAK_WORDS = (
    r"(?i)\b(?:so|and|but|what|how|why|who|where|when|which|do|does|can|could|should|would|"
    r"will|is|are|any|anyone|anybody)\b"
)


def _left_sentence(column: str) -> pl.Expr:
    """The part of the left context after the last sentence end or line break."""
    return pl.col(column).str.extract(r"([^.!?\n]*)$", 1).fill_null("")


def _left_line(column: str) -> pl.Expr:
    return pl.col(column).str.extract(r"([^\n]*)$", 1).fill_null("")


def _right_sentence(column: str) -> pl.Expr:
    """The right context up to and including the first sentence end or line break."""
    return pl.col(column).str.extract(r"^([^.!?\n]*[.!?\n]?)", 1).fill_null("")


def rule_reasons(matches: pl.DataFrame) -> pl.Series:
    """The rule verifier's reason for each match (``statement`` = verified self-claim)."""
    frame = matches.select(
        _left_sentence("left_context").alias("ls"),
        _left_line("left_context").alias("ll"),
        _right_sentence("right_context").alias("rs"),
        pl.col("right_context").alias("rc"),
    )
    straight = pl.col("ll").str.count_matches('"')
    curly_open = pl.col("ll").str.count_matches("“")
    curly_close = pl.col("ll").str.count_matches("”")
    quoted = (
        (straight % 2 == 1)
        | (curly_open > curly_close)
        | pl.col("left_context").str.contains(_QUOTE_OPEN_BEFORE)
    )
    to_question = pl.col("rs").str.extract(_CLAUSE_TO_QUESTION, 0)
    question = (
        to_question.is_not_null() & ~to_question.fill_null("").str.contains(_CLAUSE_BREAK_WORDS)
    ) | (pl.col("ls").str.contains(_QUESTION_OPENER) & pl.col("rs").str.ends_with("?"))
    reason = (
        pl.when(quoted)
        .then(pl.lit("quoted"))
        .when(
            pl.col("ls").str.contains(_REPORTED_SPEECH)
            & ~pl.col("ls").str.contains(_FIRST_PERSON_REPORT)
        )
        .then(pl.lit("reported_speech"))
        .when(pl.col("ls").str.contains(_SARCASM_LEFT) | pl.col("rc").str.contains(_SARCASM_RIGHT))
        .then(pl.lit("sarcasm"))
        .when(pl.col("ls").str.contains(_HYPOTHETICAL))
        .then(pl.lit("hypothetical"))
        .when(pl.col("ls").str.contains(_NEGATED))
        .then(pl.lit("negated"))
        .when(question)
        .then(pl.lit("question"))
        .when(
            (pl.col("rs").str.contains(_VISIT_RIGHT) | pl.col("match").str.contains(_VISIT_PHRASE))
            & ~pl.col("match").str.contains(_PAST_MEMBERSHIP)
        )
        .then(pl.lit("visit"))
        .otherwise(pl.lit("statement"))
    )
    return (
        pl.concat([frame, matches.select("left_context", "match")], how="horizontal")
        .select(reason.alias("reason"))
        .to_series()
    )


def verify_rules(matches: pl.DataFrame) -> pl.DataFrame:
    reasons = rule_reasons(matches) if matches.height else pl.Series("reason", [], pl.String)
    return matches.with_columns(reasons.alias("reason"), (reasons == "statement").alias("verified"))


# --------------------------------------------------------------------------- LLM verifier

_ANSWER = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


def parse_verdict(text: str) -> bool | None:
    """YES -> True, NO -> False, neither (or empty) -> None (undetected); the first of the two
    words in the answer decides."""
    found = _ANSWER.search(text or "")
    if not found:
        return None
    return found.group(1).lower() == "yes"


def render_verify_prompt(
    template: str, demographic: Demographic, phrase: str, left: str, match: str, right: str
) -> str:
    context = f"{left}<<{match}>>{right}".replace("\n", " ")
    return (
        template.replace("{demographic}", demographic.display_name)
        .replace("{phrase}", phrase)
        .replace("{context}", context)
    )


def verify_llm(
    matches: pl.DataFrame,
    demographic: Demographic,
    model,
    template: str,
    max_tokens: int = 8,
) -> tuple[pl.DataFrame, int]:
    """Verify matches with a registry model; returns the matches with ``reason`` (llm_yes,
    llm_no, llm_undetected) and ``verified``, and the number of undetected answers."""
    from splits.llm import Request, SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    requests = [
        Request(
            messages=(
                {
                    "role": "user",
                    "content": render_verify_prompt(
                        template,
                        demographic,
                        row["phrase"],
                        row["left_context"],
                        row["match"],
                        row["right_context"],
                    ),
                },
            ),
            params=params,
            payload={
                "phrase": row["phrase"],
                "kind": row["kind"],
                "context": row["context"],
                "left_context": row["left_context"],
                "match": row["match"],
                "right_context": row["right_context"],
            },
        )
        for row in matches.iter_rows(named=True)
    ]
    completions = model.generate(requests) if requests else []
    verdicts = [parse_verdict(c.text) for c in completions]
    reasons = ["llm_undetected" if v is None else ("llm_yes" if v else "llm_no") for v in verdicts]
    undetected = sum(v is None for v in verdicts)
    out = matches.with_columns(
        pl.Series("reason", reasons, dtype=pl.String),
        pl.Series("verified", [bool(v) for v in verdicts], dtype=pl.Boolean),
    )
    return out, undetected


# --------------------------------------------------------------------------- curves


def bin_expr(bins: int) -> pl.Expr:
    width = 100.0 / bins
    return (pl.col("percentile") / width).floor().cast(pl.Int64).clip(0, bins - 1).alias("bin")


def user_counts(users: pl.DataFrame, matches: pl.DataFrame) -> pl.DataFrame:
    """Per user: verified self-ID and anti-self-ID occurrences (0 where none)."""
    verified = matches.filter(pl.col("verified"))
    counts = verified.group_by("author").agg(
        (pl.col("kind") == "self").sum().cast(pl.Int64).alias("n_self"),
        (pl.col("kind") == "anti").sum().cast(pl.Int64).alias("n_anti"),
    )
    return users.join(counts, on="author", how="left").with_columns(
        pl.col("n_self").fill_null(0), pl.col("n_anti").fill_null(0)
    )


def selfid_curve(per_user: pl.DataFrame, bins: int = 20) -> pl.DataFrame:
    """Per percentile bin (all ``bins`` rows, empty ones with zero users): users, posts, mean
    posts per user, verified occurrences and users, and the normalised rates."""
    width = 100.0 / bins
    frame = pl.DataFrame({"bin": list(range(bins))}, schema={"bin": pl.Int64})
    agg = (
        per_user.with_columns(bin_expr(bins))
        .group_by("bin")
        .agg(
            pl.len().cast(pl.Int64).alias("n_users"),
            pl.col("n_posts").sum().cast(pl.Int64).alias("n_posts"),
            pl.col("n_self").sum().cast(pl.Int64).alias("self_occurrences"),
            pl.col("n_anti").sum().cast(pl.Int64).alias("anti_occurrences"),
            (pl.col("n_self") > 0).sum().cast(pl.Int64).alias("self_users"),
            (pl.col("n_anti") > 0).sum().cast(pl.Int64).alias("anti_users"),
        )
    )
    out = frame.join(agg, on="bin", how="left").with_columns(
        pl.col(c).fill_null(0)
        for c in (
            "n_users",
            "n_posts",
            "self_occurrences",
            "anti_occurrences",
            "self_users",
            "anti_users",
        )
    )
    mean_posts = pl.col("n_posts") / pl.col("n_users")
    return out.with_columns(
        (pl.col("bin") * width).alias("percentile_lo"),
        ((pl.col("bin") + 1) * width).alias("percentile_hi"),
        pl.when(pl.col("n_users") > 0).then(mean_posts).alias("mean_posts_per_user"),
        pl.when(pl.col("n_posts") > 0)
        .then((pl.col("self_occurrences") / pl.col("n_users")) / mean_posts)
        .alias("self_rate"),
        pl.when(pl.col("n_posts") > 0)
        .then((pl.col("anti_occurrences") / pl.col("n_users")) / mean_posts)
        .alias("anti_rate"),
    ).sort("bin")


def _weighted_sse_constant(y: np.ndarray, w: np.ndarray) -> float:
    if w.sum() <= 0:
        return 0.0
    mean = float(np.average(y, weights=w))
    return float((w * (y - mean) ** 2).sum())


def _weighted_sse_line(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    if len(x) <= 2:
        return 0.0
    sw = np.sqrt(w)
    design = np.column_stack([np.ones_like(x), x]) * sw[:, None]
    coef, *_ = np.linalg.lstsq(design, y * sw, rcond=None)
    resid = y - (coef[0] + coef[1] * x)
    return float((w * resid**2).sum())


def _hinge_fit(
    lo: np.ndarray, hi: np.ndarray, rate: np.ndarray, posts: np.ndarray, min_bins_each_side: int
) -> tuple[float, float, float] | None:
    """(breakpoint, its weighted squared error, that of one straight line over all bins) of the
    non-empty bins given; None with too few bins."""
    if len(lo) < 2 * min_bins_each_side:
        return None
    x = (lo + hi) / 2.0
    w = posts / posts.sum()
    best: tuple[float, float] | None = None
    for i in range(min_bins_each_side, len(x) - min_bins_each_side + 1):
        sse = _weighted_sse_constant(rate[:i], w[:i]) + _weighted_sse_line(x[i:], rate[i:], w[i:])
        if best is None or sse < best[0] - 1e-15:
            best = (sse, float(lo[i]))
    if best is None:
        return None
    return best[1], best[0], _weighted_sse_line(x, rate, w)


def auto_threshold(curve: pl.DataFrame, min_bins_each_side: int = 2) -> float | None:
    """The breakpoint of a weighted hinge fit of the self-ID rate (see the module docstring);
    None when the curve has too few non-empty bins."""
    data = curve.filter(pl.col("n_posts") > 0).sort("bin")
    fit = _hinge_fit(
        data["percentile_lo"].to_numpy().astype(float),
        data["percentile_hi"].to_numpy().astype(float),
        data["self_rate"].to_numpy().astype(float),
        data["n_posts"].to_numpy().astype(float),
        min_bins_each_side,
    )
    return None if fit is None else fit[0]


def breakpoint_support(
    per_user: pl.DataFrame,
    bins: int,
    breakpoint: float,
    seed: int = 0,
    permutations: int = SUPPORT_PERMUTATIONS,
    replicates: int = SUPPORT_REPLICATES,
) -> dict:
    """How well the data support the ``auto`` breakpoint, two ways (both seeded):

    - existence: the rise of the self-ID rate (verified self-IDs per post) from below the
      breakpoint to above it, against ``permutations`` shuffles of the users over the
      percentiles, the breakpoint re-fitted on each (``permutation_p``; a curve without a
      change point rises as much by chance);
    - location: the share of ``replicates`` bootstrap resamples of the users whose re-fitted
      breakpoint lies within one bin of it (``bootstrap_agreement``).

    ``stop_reasons``: why the curve does not support an ``auto`` threshold at all (fewer than
    SUPPORT_MIN_SELF_IDS verified self-IDs, a self-ID rate above the breakpoint not higher than
    below it, or permutation_p > SUPPORT_MAX_P); ``supported``: no stop reason and agreement >=
    SUPPORT_MIN_AGREEMENT."""
    width = 100.0 / bins
    frame = per_user.select(bin_expr(bins), "n_posts", "n_self")
    user_bin = frame["bin"].to_numpy()
    posts = frame["n_posts"].to_numpy().astype(float)
    selfs = frame["n_self"].to_numpy().astype(float)

    def fit(n_posts_of_user: np.ndarray, n_self_of_user: np.ndarray) -> tuple[float, float]:
        """(breakpoint or nan, rise of the rate across it) of one curve."""
        n_posts = np.bincount(user_bin, n_posts_of_user, minlength=bins)
        n_self = np.bincount(user_bin, n_self_of_user, minlength=bins)
        kept = np.nonzero(n_posts > 0)[0]
        found = _hinge_fit(
            kept * width, (kept + 1) * width, n_self[kept] / n_posts[kept], n_posts[kept], 2
        )
        if found is None:
            return math.nan, 0.0
        above = kept * width >= found[0]
        rise = n_self[kept][above].sum() / n_posts[kept][above].sum() - n_self[kept][
            ~above
        ].sum() / max(n_posts[kept][~above].sum(), 1.0)
        return found[0], float(rise)

    n_users = len(posts)
    non_empty = int(np.count_nonzero(np.bincount(user_bin, posts, minlength=bins) > 0))
    _, rise = fit(posts, selfs)
    rng = np.random.default_rng(seed)
    as_large = 0
    for _ in range(permutations):
        order = rng.permutation(n_users)
        as_large += fit(posts[order], selfs[order])[1] >= rise - 1e-15
    p_value = (1 + as_large) / (1 + permutations)
    found = []
    for _ in range(replicates):
        weights = np.bincount(rng.integers(0, n_users, n_users), minlength=n_users)
        found.append(fit(weights * posts, weights * selfs)[0])
    found_arr = np.asarray(found)
    agreement = float(np.mean(np.abs(found_arr - breakpoint) <= width + 1e-9))
    located = found_arr[np.isfinite(found_arr)]
    below = per_user.filter(pl.col("percentile") < breakpoint)
    above = per_user.filter(pl.col("percentile") >= breakpoint)

    def per_1k(part: pl.DataFrame) -> float | None:
        n = int(part["n_posts"].sum())
        return round(1000.0 * int(part["n_self"].sum()) / n, 4) if n else None

    rate_below, rate_above = per_1k(below), per_1k(above)
    stop = stop_reasons(int(selfs.sum()), rate_below, rate_above, p_value)
    return {
        "non_empty_bins": non_empty,
        "verified_self_ids": int(selfs.sum()),
        "self_rate_below_per_1k": rate_below,
        "self_rate_above_per_1k": rate_above,
        "permutations": permutations,
        "permutation_p": round(p_value, 4),
        "bootstrap_replicates": replicates,
        "bootstrap_agreement": round(agreement, 4),
        "bootstrap_breakpoints_p5_p95": (
            [float(np.percentile(located, 5)), float(np.percentile(located, 95))]
            if located.size
            else None
        ),
        "stop_reasons": stop,
        "supported": bool(not stop and agreement >= SUPPORT_MIN_AGREEMENT),
    }


def stop_reasons(
    n_self: int, rate_below: float | None, rate_above: float | None, p_value: float | None
) -> list[str]:
    """Why a self-ID curve cannot set an ``auto`` threshold (empty: it can)."""
    reasons = []
    if n_self < SUPPORT_MIN_SELF_IDS:
        reasons.append(f"only {n_self} verified self-IDs (fewer than {SUPPORT_MIN_SELF_IDS})")
    if rate_above is None or rate_below is None or rate_above <= rate_below:
        reasons.append("the self-ID rate above the threshold is not higher than below it")
    if p_value is None:
        reasons.append("no breakpoint to test")
    elif p_value > SUPPORT_MAX_P:
        reasons.append(f"permutation p = {p_value:.3g} > {SUPPORT_MAX_P}")
    return reasons


def rates_at(per_user: pl.DataFrame, threshold: float) -> tuple[float | None, float | None]:
    """Verified self-IDs per 1,000 posts of the users below and at or above ``threshold``."""

    def per_1k(part: pl.DataFrame) -> float | None:
        n = int(part["n_posts"].sum())
        return round(1000.0 * int(part["n_self"].sum()) / n, 4) if n else None

    return (
        per_1k(per_user.filter(pl.col("percentile") < threshold)),
        per_1k(per_user.filter(pl.col("percentile") >= threshold)),
    )


def unsupported_error(key: str, threshold: dict, demographics_file: str, opt_in: str) -> str | None:
    """The one-line error for an ``auto`` (or ``auto_fallback``) threshold whose self-ID curve
    does not support it, naming the demographic, the rates below and above and the two ways on;
    None for a fixed or supported threshold."""
    support = threshold.get("support") or {}
    reasons = support.get("stop_reasons") or []
    if threshold["source"] == "fixed" or not reasons:
        return None
    below, above = support.get("self_rate_below_per_1k"), support.get("self_rate_above_per_1k")

    def fmt(rate: float | None) -> str:
        return "n/a" if rate is None else f"{rate:g}"

    return (
        f"demographic {key!r}: the auto threshold {threshold['threshold']:g} is not supported by "
        f"its self-ID curve ({'; '.join(reasons)}; verified self-IDs per 1,000 posts: "
        f"{fmt(below)} below, {fmt(above)} above); set a fixed threshold for {key!r} in "
        f"{demographics_file}, or set {opt_in}: true to use it anyway"
    )


# --------------------------------------------------------------------------- formula comparison


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float | None:
    """Mann-Whitney ROC AUC (ties count one half); None without both classes."""
    labels = labels.astype(bool)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = pl.Series(scores).rank(method="average").to_numpy()
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def compare_formulas(
    per_user: pl.DataFrame, threshold: float, bins: int = 20, demographic: str = ""
) -> pl.DataFrame:
    """One row per group-ness formula: how well it separates verified self-ID users from
    verified anti-self-ID users, overall (AUC) and above the threshold (rates, ratio)."""
    rows = []
    self_only = (pl.col("n_self") > 0) & (pl.col("n_anti") == 0)
    anti_only = (pl.col("n_anti") > 0) & (pl.col("n_self") == 0)
    for formula in FORMULAS:
        col = groupness_column(formula)
        frame = per_user.with_columns(
            ((pl.col(col).rank(method="min").cast(pl.Float64) - 1.0) * 100.0 / pl.len()).alias(
                "percentile"
            )
        )
        labelled = frame.filter(self_only | anti_only)
        auc = roc_auc(labelled[col].to_numpy(), (labelled["n_self"] > 0).to_numpy())
        above = frame.filter(pl.col("percentile") >= threshold)
        posts_above = int(above["n_posts"].sum())
        self_above = int(above["n_self"].sum())
        anti_above = int(above["n_anti"].sum())
        self_users = frame.filter(pl.col("n_self") > 0)
        rows.append(
            {
                "demographic": demographic,
                "formula": formula,
                "threshold": float(threshold),
                "users": frame.height,
                "users_above": above.height,
                "self_id_users": self_users.height,
                "anti_id_users": frame.filter(pl.col("n_anti") > 0).height,
                "auc_self_vs_anti": auc,
                "self_rate_above_per_1k": 1000.0 * self_above / posts_above
                if posts_above
                else None,
                "anti_rate_above_per_1k": 1000.0 * anti_above / posts_above
                if posts_above
                else None,
                "self_anti_ratio_above": self_above / anti_above if anti_above else None,
                "self_id_users_above_share": (
                    self_users.filter(pl.col("percentile") >= threshold).height / self_users.height
                    if self_users.height
                    else None
                ),
                "auto_threshold": auto_threshold(selfid_curve(frame, bins)),
            }
        )
    return pl.DataFrame(rows, schema=COMPARISON_SCHEMA)


COMPARISON_SCHEMA = {
    "demographic": pl.String,
    "formula": pl.String,
    "threshold": pl.Float64,
    "users": pl.Int64,
    "users_above": pl.Int64,
    "self_id_users": pl.Int64,
    "anti_id_users": pl.Int64,
    "auc_self_vs_anti": pl.Float64,
    "self_rate_above_per_1k": pl.Float64,
    "anti_rate_above_per_1k": pl.Float64,
    "self_anti_ratio_above": pl.Float64,
    "self_id_users_above_share": pl.Float64,
    "auto_threshold": pl.Float64,
}


# --------------------------------------------------------------------------- plot


def plot_curve(
    curve: pl.DataFrame,
    threshold: float,
    display_name: str,
    source: str,
    path: str | Path,
    unsupported: bool = False,
) -> None:
    """The self-ID and anti-self-ID curves with the threshold; ``unsupported``: the label says
    so beside the threshold (an ``auto`` threshold the curve does not support, used on opt-in)."""
    if unsupported:
        source = f"{source}, unsupported"
    # the object API with the Agg canvas: no pyplot state, no GUI backend, faster import
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    data = curve.filter(pl.col("n_posts") > 0)  # empty bins (tied users) are not drawn
    if data.height == 0:
        message_figure(
            path,
            f"Self-identification: {display_name}",
            f"no user with a post in any percentile bin (threshold {threshold:g}, {source})",
        )
        return
    x = ((data["percentile_lo"] + data["percentile_hi"]) / 2).to_numpy()
    fig = Figure(figsize=(6.4, 4.0), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for column, label, style in (
        ("self_rate", "self-ID", "o-"),
        ("anti_rate", "anti-self-ID", "s--"),
    ):
        y = data[column].cast(pl.Float64).to_numpy() * 1000.0
        ax.plot(x, y, style, label=label, markersize=4)
    ax.axvline(threshold, color="grey", linestyle=":", label=f"threshold {threshold:g} ({source})")
    ax.set_xlabel("group-ness percentile within U_d")
    ax.set_ylabel("verified occurrences per 1,000 posts")
    ax.set_title(f"Self-identification: {display_name}")
    ax.set_xlim(0, 100)
    ax.legend(loc="upper left", frameon=False)
    fig.tight_layout()
    save_figure(fig, path)


# --------------------------------------------------------------------------- stage


@dataclass
class SearchResult:
    matches: pl.DataFrame
    curve: pl.DataFrame
    comparison: pl.DataFrame
    threshold: dict


def resolve_threshold(demographic: Demographic, curve: pl.DataFrame) -> dict:
    """The threshold used downstream: the file's fixed value, or the ``auto`` rule; where the
    curve cannot support the rule (no verified self-ID at all, or fewer than four non-empty
    bins) ``auto`` falls back to AUTO_FALLBACK with a warning (source ``auto_fallback``)."""
    has_signal = int(curve["self_occurrences"].sum()) > 0
    auto = auto_threshold(curve) if has_signal else None
    if demographic.threshold != "auto":
        return {
            "threshold": float(demographic.threshold),
            "source": "fixed",
            "auto_threshold": auto,
        }
    if auto is None:
        log.warning(
            "%s: the self-ID curve cannot place an auto threshold (%s); using %s",
            demographic.key,
            "no verified self-ID" if not has_signal else "too few non-empty bins",
            AUTO_FALLBACK,
        )
        return {"threshold": AUTO_FALLBACK, "source": "auto_fallback", "auto_threshold": None}
    return {"threshold": auto, "source": "auto", "auto_threshold": auto}


def _support(key: str, per_user: pl.DataFrame, bins: int, threshold: dict) -> dict:
    """The breakpoint's support (see :func:`breakpoint_support`), logged; a warning when an
    ``auto`` threshold rests on a breakpoint the data do not support."""
    if threshold["auto_threshold"] is None:
        below, above = rates_at(per_user, threshold["threshold"])
        n_self = int(per_user["n_self"].sum()) if per_user.height else 0
        reasons = ["no auto breakpoint (no verified self-ID, or fewer than four non-empty bins)"]
        if threshold["source"] != "fixed":
            reasons += stop_reasons(n_self, below, above, 0.0)
        return {
            "supported": False,
            "reason": "no auto breakpoint (no curve to read)",
            "verified_self_ids": n_self,
            "self_rate_below_per_1k": below,
            "self_rate_above_per_1k": above,
            "stop_reasons": reasons if threshold["source"] != "fixed" else [],
        }
    seed = int.from_bytes(hashlib.sha256(f"selfid-support:{key}".encode()).digest()[:8], "little")
    support = breakpoint_support(per_user, bins, threshold["auto_threshold"], seed=seed)
    detail = (
        f"breakpoint {threshold['auto_threshold']:g}: self-ID rate "
        f"{support['self_rate_below_per_1k']} -> {support['self_rate_above_per_1k']} per 1,000 "
        f"posts (permutation p = {support['permutation_p']:.3g} over {support['permutations']} "
        f"shuffles of the users); {support['bootstrap_agreement']:.0%} of "
        f"{support['bootstrap_replicates']} bootstrap resamples place it within one bin; "
        f"{support['non_empty_bins']} non-empty bins, {support['verified_self_ids']} verified "
        "self-IDs"
    )
    if threshold["source"] == "auto" and not support["supported"]:
        log.warning(
            "%s: the auto threshold is weakly supported (%s); read the self-ID curve and fix "
            "the threshold in the demographics file if it does not show a change point",
            key,
            detail,
        )
    else:
        log.info("%s: %s", key, detail)
    return support


def selfid_search(
    users: pl.DataFrame,
    posts: pl.LazyFrame,
    demographic: Demographic,
    verifier: str = "rules",
    context_chars: int = 150,
    bins: int = 20,
    model=None,
    template: str | None = None,
) -> SearchResult:
    phrases = PhraseSet.from_demographic(demographic)
    matches = find_phrases(posts, phrases, context_chars)
    undetected = 0
    if verifier == "rules":
        matches = verify_rules(matches)
    elif verifier == "llm":
        if model is None or template is None:
            raise ConfigError("demographics.verifier_model: the llm verifier needs a model")
        matches, undetected = verify_llm(matches, demographic, model, template)
    else:
        raise ConfigError(f"demographics.verifier: {verifier!r} is not one of {VERIFIERS}")
    per_user = user_counts(users, matches)
    curve = selfid_curve(per_user, bins)
    threshold = resolve_threshold(demographic, curve)
    threshold["support"] = _support(demographic.key, per_user, bins, threshold)
    comparison = compare_formulas(per_user, threshold["threshold"], bins, demographic.key)
    threshold.update(
        {
            "demographic": demographic.key,
            "verifier": verifier,
            "matches": matches.height,
            "verified": int(matches["verified"].sum()),
            "verified_self": int(
                matches.filter(pl.col("verified") & (pl.col("kind") == "self")).height
            ),
            "verified_anti": int(
                matches.filter(pl.col("verified") & (pl.col("kind") == "anti")).height
            ),
            "undetected": undetected,
            "reasons": {
                r: int(n) for r, n in matches.group_by("reason").len().sort("reason").iter_rows()
            },
        }
    )
    return SearchResult(matches, curve, comparison, threshold)


def _markdown_table(frame: pl.DataFrame) -> str:
    def fmt(value) -> str:
        if value is None:
            return ""
        if isinstance(value, float):
            return "" if math.isnan(value) else f"{value:.3g}"
        return str(value)

    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(fmt(v) for v in row) + " |" for row in frame.iter_rows()]
    return "\n".join([header, rule, *body]) + "\n"


def summarise(threshold_files: list[str], comparison_files: list[str]) -> tuple[dict, pl.DataFrame]:
    """``thresholds.json``: each demographic's threshold percentile, and under
    THRESHOLDS_SUPPORT_KEY (not a demographic) how each was chosen and how well its breakpoint
    is supported; the formula comparison table."""
    thresholds = {}
    support = {}
    for path in threshold_files:
        data = read_json(path)
        thresholds[data["demographic"]] = data["threshold"]
        support[data["demographic"]] = {
            "source": data.get("source"),
            "auto_threshold": data.get("auto_threshold"),
            "threshold": data["threshold"],
            "accepted_unsupported": bool(data.get("accepted_unsupported")),
            **(data.get("support") or {}),
        }
    comparison = (
        pl.concat([pl.read_parquet(p) for p in comparison_files], how="vertical")
        if comparison_files
        else pl.DataFrame(schema=COMPARISON_SCHEMA)
    ).sort("demographic", "formula")
    out: dict = dict(sorted(thresholds.items()))
    out[THRESHOLDS_SUPPORT_KEY] = dict(sorted(support.items()))
    return out, comparison


# --------------------------------------------------------------------------- CLI


def configure_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    search = sub.add_parser("search", help="phrase search, verification, curve and threshold")
    search.add_argument("--users", required=True, help="results/demographics/<d>/users.parquet")
    search.add_argument("--posts", required=True, help="results/demographics/<d>/posts.parquet")
    search.add_argument("--demographics", required=True, help="demographics file")
    search.add_argument("--demographic", required=True, help="demographic key (demographics file)")
    search.add_argument(
        "--verifier",
        choices=VERIFIERS,
        default="rules",
        help="rules: phrase rules (quotes, negations, questions); llm: a model verifies each match",
    )
    search.add_argument("--verifier-model", default=None, help="registry name (llm verifier)")
    search.add_argument("--models-json", default="{}", help="the model registry as JSON")
    search.add_argument("--prompt", default=None, help="verification prompt template (llm)")
    search.add_argument("--llm-cache", default=None, help="SQLite response cache (llm)")
    search.add_argument(
        "--context-chars",
        type=int,
        default=150,
        help="characters of context kept around each match",
    )
    search.add_argument("--bins", type=int, default=20, help="percentile bins of the self-ID curve")
    search.add_argument("--out-matches", required=True, help="self-ID matches (Parquet)")
    search.add_argument("--out-curve", required=True, help="self-ID rate per group-ness bin (CSV)")
    search.add_argument("--out-threshold", required=True, help="the demographic's threshold (JSON)")
    search.add_argument(
        "--out-comparison", required=True, help="self-ID against anti-self-ID rates (CSV)"
    )
    search.add_argument("--out-plot", required=True, help="self-ID curve plot (SVG)")
    search.add_argument(
        "--accept-unsupported",
        action="store_true",
        help=f"use an auto threshold its self-ID curve does not support ({OPT_IN_KEY})",
    )
    summary = sub.add_parser("summary", help="thresholds.json and the formula comparison table")
    summary.add_argument(
        "--thresholds", nargs="+", required=True, help="per-demographic threshold files (JSON)"
    )
    summary.add_argument(
        "--comparisons", nargs="+", required=True, help="per-demographic comparison files (CSV)"
    )
    summary.add_argument("--out-thresholds", required=True, help="all thresholds (JSON)")
    summary.add_argument("--out-csv", required=True, help="summary table (CSV)")
    summary.add_argument("--out-md", required=True, help="summary table (Markdown)")
    summary.add_argument("--health", help="run-health findings (JSON; splits.health)")


def _run_search(args: argparse.Namespace) -> int:
    if args.context_chars < 0:
        raise ConfigError("demographics.context_chars: must be >= 0")
    if not 2 <= args.bins <= 100:
        raise ConfigError("demographics.bins: must be in [2, 100]")
    demographic = find_demographic(args.demographics, args.demographic)
    for flag, path in (("--users", args.users), ("--posts", args.posts)):
        if not Path(path).exists():
            raise ConfigError(f"{flag}: {path} does not exist")
    users = pl.read_parquet(args.users)
    posts = pl.scan_parquet(args.posts)
    model = template = None
    if args.verifier == "llm":
        if not args.verifier_model:
            raise ConfigError(
                "demographics.verifier_model: required when demographics.verifier is llm"
            )
        if not args.prompt or not Path(args.prompt).exists():
            raise ConfigError(f"demographics.verifier_prompt: {args.prompt} does not exist")
        from splits.llm import load_model

        template = Path(args.prompt).read_text(encoding="utf-8")
        unknown = unknown_slots(template, PROMPT_SLOTS["demographics.verifier_prompt"])
        if unknown:
            raise unknown_slot_error(
                args.prompt, unknown[0], PROMPT_SLOTS["demographics.verifier_prompt"]
            )
        model = load_model(args.verifier_model, json.loads(args.models_json), args.llm_cache)
    try:
        result = selfid_search(
            users, posts, demographic, args.verifier, args.context_chars, args.bins, model, template
        )
    finally:
        if model is not None:
            model.close()
    error = unsupported_error(demographic.key, result.threshold, args.demographics, OPT_IN_KEY)
    if error:
        if not args.accept_unsupported:
            raise ConfigError(error)
        result.threshold["accepted_unsupported"] = True
        log.warning("%s (accepted: %s is true)", error.partition("; set a fixed")[0], OPT_IN_KEY)
    write_parquet(result.matches, args.out_matches)
    write_parquet(result.curve, args.out_curve)
    write_parquet(result.comparison, args.out_comparison)
    write_json(result.threshold, args.out_threshold)
    plot_curve(
        result.curve,
        result.threshold["threshold"],
        demographic.display_name,
        result.threshold["source"],
        args.out_plot,
        unsupported=bool(result.threshold.get("accepted_unsupported")),
    )
    log.info(
        "%s: %d matches, %d verified (%d self, %d anti, %d undetected); threshold %s (%s)",
        demographic.key,
        result.threshold["matches"],
        result.threshold["verified"],
        result.threshold["verified_self"],
        result.threshold["verified_anti"],
        result.threshold["undetected"],
        result.threshold["threshold"],
        result.threshold["source"],
    )
    return 0


def support_findings(support: dict[str, dict]) -> list[Finding]:
    """Run-health findings of the thresholds: an ``auto`` threshold used although its curve does
    not support it (on opt-in), or one whose breakpoint moves with the sample."""
    findings = []
    for key, s in sorted(support.items()):
        if s.get("source") == "fixed":
            continue
        rates = (
            f"verified self-IDs per 1,000 posts {s.get('self_rate_below_per_1k')} below, "
            f"{s.get('self_rate_above_per_1k')} above"
        )
        if s.get("stop_reasons"):
            findings.append(
                Finding(
                    STAGE,
                    "selfid_unsupported_threshold",
                    f"demographic {key}",
                    f"auto threshold {s['threshold']:g} used although its self-ID curve does not "
                    f"support it ({'; '.join(s['stop_reasons'])}; {rates})",
                    f"set a fixed threshold for {key} in the demographics file (and "
                    f"{OPT_IN_KEY}: false)",
                )
            )
        elif not s.get("supported", True):
            findings.append(
                Finding(
                    STAGE,
                    "selfid_unstable_threshold",
                    f"demographic {key}",
                    f"auto threshold {s['threshold']:g}: only "
                    f"{s.get('bootstrap_agreement', 0):.0%} of bootstrap resamples place the "
                    f"breakpoint within one bin of it ({rates})",
                    f"read the self-ID curve and set a fixed threshold for {key} in the "
                    "demographics file",
                )
            )
    return findings


def _run_summary(args: argparse.Namespace) -> int:
    thresholds, comparison = summarise(args.thresholds, args.comparisons)
    if args.health:
        findings = support_findings(thresholds[THRESHOLDS_SUPPORT_KEY])
        log_findings(findings, log)
        write_findings(args.health, findings)
    write_json(thresholds, args.out_thresholds)
    write_text(comparison.write_csv(), args.out_csv)
    intro = (
        "# Group-ness formulas: separation of self-ID from anti-self-ID users\n\n"
        "auc_self_vs_anti: ROC AUC of the formula's score, users with verified self-IDs (and no "
        "verified anti-self-ID) against users with verified anti-self-IDs (and no self-ID). "
        "Rates are verified occurrences per 1,000 posts of the users at or above the threshold "
        "percentile under that formula.\n\n"
    )
    write_text(intro + _markdown_table(comparison), args.out_md)
    log.info("thresholds: %s", {k: v for k, v in thresholds.items() if k != THRESHOLDS_SUPPORT_KEY})
    return 0


def run(args: argparse.Namespace) -> int:
    if args.action == "search":
        return _run_search(args)
    return _run_summary(args)
