"""Verification of self-ID phrase occurrences in their context (docs/method.md §2.5, step 2).

``rules`` (vectorised regex rules, first that fires wins): ``quoted`` (inside quotation marks on
its line, or right after an opening quote), ``reported_speech`` ("says", "said", "told me that",
"was like" right before it; not "I say", "I tell them"), ``sarcasm`` ("/s", "yeah right", "jk"
near it), ``hypothetical`` ("if", "imagine", "pretend", "what if", "even if" shortly before it),
``negated`` ("not", "never", "don't think", "wouldn't say" shortly before it), ``question`` (the
clause ends in "?", or the sentence opens with a question word), ``visit`` (a visitor, not a
member), otherwise ``statement`` (verified); or ``llm``: a registry model answers YES/NO to the
verifier prompt; answers without YES/NO are counted as undetected and not verified.
"""

from __future__ import annotations

import re

import polars as pl

from splits.config.definitions import Demographic

VERIFIERS = ("rules", "llm")
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
