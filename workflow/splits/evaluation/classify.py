"""Classification-model (CM) stage of the Group Theorization evaluation (docs/method.md §2.9).

The CM gets the theory, the two demographic labels and two unlabeled post sets (one by A, one by
B; ``switched`` says whether Post Set 1 is B's) and must say which set is which group's.

- Prompt templates: a plain text file with the five slots ``{demo_a} {demo_b} {post_set1}
  {post_set2} {theories}`` (every other character, braces included, is literal), or a file that
  holds a Python f-string literal (``f\"\"\"...\"\"\"``), as the paper's
  ``classify_with_theory_and_demo.txt`` does. The public evaluator ``eval``-uates that file; we
  parse it with ``ast`` instead (never executing it), accept only bare slot names inside the
  braces and concatenate the literal parts and the slot values, which is what the f-string would
  evaluate to (escape sequences and ``{{``/``}}`` included) (``splits.evaluation.common.parse_template``).
- Rendering follows the public evaluator: each post's newlines become tabs, the post is cut to
  2,000 characters and wrapped in triple double quotes; a post set is ``"\\n"`` + the posts joined
  by ``"\\n\\n"``; the theory's non-empty lines, stripped, joined by ``"\\n"``. The prompt goes to
  the model as a raw completion (``Request.prompt``) ending in its pre-filled answer.
- Parsing (:func:`parse_answer`) reads the ``Post Set 1: X`` / ``Post Set 2: Y`` lines robustly
  (markdown, case, "Group A", "<B>", group names instead of letters); a bare answer line wins
  over prose lines for the same set ("Post Set 1: A lot of the posts ..." after the answer);
  anything ambiguous, missing, contradictory or with both sets given the same group is
  *undetected* (counted, never guessed).
- Builtin CM ``lexical`` (no model): scores each post set against each group's statements in the
  theory by word overlap and answers in the CM format, through the same parser.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from splits.errors import ConfigError
from splits.evaluation.common import (
    PromptTemplate,
    check_builtin_keys,
    format_theory,
    group_names,
    names_pattern,
    sampling_params,
    statements_by_group,
)
from splits.evaluation.settings import CMSettings
from splits.llm.base import Backend, Completion, Request
from splits.text import content_terms, words

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- rendering


def format_post(text: str, max_chars: int) -> str:
    """One post as the public evaluator writes it: newlines -> tabs, cut, triple-quoted."""
    return '"""' + str(text).replace("\n", "\t")[:max_chars] + '"""'


def format_post_set(posts: Iterable[str], max_chars: int) -> str:
    return "\n" + "\n\n".join(format_post(p, max_chars) for p in posts)


def post_sets(sample_a: Sequence[str], sample_b: Sequence[str], switched: bool):
    """(Post Set 1, Post Set 2): A's sample first unless ``switched``."""
    return (list(sample_b), list(sample_a)) if switched else (list(sample_a), list(sample_b))


def cm_slot_values(
    demo_a: str,
    demo_b: str,
    sample_a: Sequence[str],
    sample_b: Sequence[str],
    switched: bool,
    theory: str | None,
    max_chars: int,
) -> dict[str, str]:
    set1, set2 = post_sets(sample_a, sample_b, switched)
    return {
        "demo_a": demo_a,
        "demo_b": demo_b,
        "post_set1": format_post_set(set1, max_chars),
        "post_set2": format_post_set(set2, max_chars),
        "theories": format_theory(theory),
    }


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class ParsedAnswer:
    """``predicted_switched``: True = the CM says Post Set 1 is B's; None = undetected."""

    predicted_switched: bool | None
    reason: str  # ok | missing | same | unrecognised | conflicting

    @property
    def detected(self) -> bool:
        return self.predicted_switched is not None


_ANSWER_LINE = re.compile(
    r"post[\s_]*set[\s_]*([12])\s*[:：]\s*(.*?)(?=post[\s_]*set[\s_]*[12]\s*[:：]|$)",
    re.IGNORECASE,
)
_MARKUP = re.compile(r"[*`#]+")
_GROUP_WORD = re.compile(r"\b(?:group|demographic)\b", re.IGNORECASE)
_ARTICLE = re.compile(r"^(?:a|an|the)\s+", re.IGNORECASE)


_LETTER_WITH_NAME = re.compile(r"^([AB])\s*[(\[][^)\]]*[)\]]$")


def _letter_of(value: str, names: Mapping[str, re.Pattern | None]) -> tuple[str | None, bool]:
    """(the group letter a ``Post Set N:`` value names or None when unclear, whether the value is
    a bare answer). A bare answer is only a letter, a group name, or a letter with a bracketed
    name ("A", "Group B", "<A>", "teacher", "A (Catholic)"); anything else is prose, whose
    letters and names are evidence only when no bare answer is given for that set (prose such as
    "A lot of the posts ..." uses "A" as an article)."""
    value = _GROUP_WORD.sub(" ", value)
    bare = value.strip().strip("<>[](){}\"'.,;:!-–— \t").strip()
    if bare.lower() in ("a", "b"):
        return bare.upper(), True
    evidence = set(re.findall(r"(?<![A-Za-z0-9'])([AB])(?![A-Za-z0-9'])", value))
    stripped_article = _ARTICLE.sub("", bare)
    by_name = set()
    for letter, pattern in names.items():
        if pattern is not None and (pattern.search(value) or pattern.fullmatch(stripped_article)):
            evidence.add(letter)
            if pattern.fullmatch(bare) or pattern.fullmatch(stripped_article):
                by_name.add(letter)
    with_name = _LETTER_WITH_NAME.match(bare)
    is_bare = bool(by_name) or with_name is not None
    letter = evidence.pop() if len(evidence) == 1 else None
    return letter, is_bare and letter is not None


def parse_answer(
    text: str | None,
    names_a: Iterable[str] = (),
    names_b: Iterable[str] = (),
) -> ParsedAnswer:
    """Parse a CM answer (docs/method.md §2.9, made robust).

    Each line ``Post Set N: value`` (any case, markdown emphasis, numbering, missing space after
    the colon) is read; the value names a group by letter (``A``, ``Group B``, ``<A>``,
    ``Demographic B``, ``A (teacher)``) or by one of ``names_a``/``names_b`` (labels and display
    names). When a set has bare answer lines (only a letter or a name), its prose lines ("Post
    Set 1: A lot of the posts ...") are ignored, as the public evaluator reads the answer line;
    otherwise the letters and names in the prose count. Lines whose value names no group or both
    are ignored when another line for the same set names one; repeated lines that disagree make
    the answer ``conflicting``. Both sets must be named, with different groups; otherwise the
    answer is undetected (``missing``, ``same``, ``unrecognised``).
    """
    names = {"A": names_pattern(names_a), "B": names_pattern(names_b)}
    found: dict[str, list[tuple[str | None, bool]]] = {"1": [], "2": []}
    for raw_line in str(text or "").splitlines():
        line = _MARKUP.sub("", raw_line)
        for match in _ANSWER_LINE.finditer(line):
            # the value ends at the line's end or at the next "Post Set N:"
            found[match.group(1)].append(_letter_of(match.group(2), names))
    if not found["1"] or not found["2"]:
        return ParsedAnswer(None, "missing")
    letters = {}
    for key, values in found.items():
        named = {letter for letter, is_bare in values if is_bare}
        if not named:
            named = {letter for letter, _ in values if letter is not None}
        if len(named) > 1:
            return ParsedAnswer(None, "conflicting")
        if not named:
            return ParsedAnswer(None, "unrecognised")
        letters[key] = named.pop()
    if letters["1"] == letters["2"]:
        return ParsedAnswer(None, "same")
    return ParsedAnswer(letters["1"] == "B", "ok")


def answer_text(set1_letter: str, explanation: str) -> str:
    """A completion in the CM's answer format (continuing ``1. Explanation: I think ``)."""
    other = "B" if set1_letter == "A" else "A"
    return f"{explanation}\n2. Post Set 1: {set1_letter}\n3. Post Set 2: {other}"


# --------------------------------------------------------------------------- words


# --------------------------------------------------------------------------- builtin CM


_THEORY_FILLER = frozenset(
    "group groups post posts use uses used words word like write writes written writing "
    "demographic demographics members member set sets mention mentions talk talks tend tends "
    "often more less".split()
)


def _name_words(names: Iterable[str]) -> set[str]:
    return {t for n in names for t in words(n)}


def lexical_decision(payload: Mapping[str, Any]) -> tuple[str, str]:
    """(letter of Post Set 1, explanation) for the builtin ``lexical`` CM."""
    names_a = list(payload.get("names_a") or [])
    names_b = list(payload.get("names_b") or [])
    statements = statements_by_group(payload.get("theory"), names_a, names_b)
    ignore = _THEORY_FILLER | _name_words(names_a) | _name_words(names_b) | {"a", "b"}
    vocab = {g: {t for s in statements[g] for t in content_terms(s)} for g in ("A", "B")}
    vocab = {g: {t for t in v if not set(t.split()) & ignore} for g, v in vocab.items()}
    shared = vocab["A"] & vocab["B"]
    vocab = {g: v - shared for g, v in vocab.items()}

    with_bigrams = any(" " in t for v in vocab.values() for t in v)

    def scores(posts: Sequence[str]) -> tuple[int, int]:
        # a phrase of the theory found in a post counts for each of its words
        terms = Counter(t for p in posts for t in content_terms(p, with_bigrams))
        return tuple(
            sum(n * len(t.split()) for t, n in terms.items() if t in vocab[g]) for g in "AB"
        )

    set1 = list(payload.get("post_set1") or [])
    set2 = list(payload.get("post_set2") or [])
    (s1a, s1b), (s2a, s2b) = scores(set1), scores(set2)
    margin = (s1a - s1b) - (s2a - s2b)
    if margin > 0:
        letter, why = "A", "Post Set 1 shares more words with A's statements"
    elif margin < 0:
        letter, why = "B", "Post Set 1 shares more words with B's statements"
    else:
        digest = hashlib.sha256(json.dumps([set1, set2], ensure_ascii=False).encode()).digest()
        letter = "A" if digest[0] % 2 == 0 else "B"
        why = "the theory does not separate the sets, so this is a guess"
    explanation = f"that {why} (overlap: set 1 A={s1a} B={s1b}, set 2 A={s2a} B={s2b})."
    return letter, explanation


class LexicalCM(Backend):
    """Builtin CM: word overlap between each post set and each group's statements."""

    def __init__(self, name: str, spec: Mapping[str, Any]):
        check_builtin_keys(name, spec, set())
        self.name = name
        self.spec = dict(spec)

    def identity(self) -> dict[str, Any]:
        return {"backend": "builtin", "kind": "lexical", "version": 1}

    def generate(self, requests: list[Request]) -> list[Completion]:
        out = []
        for request in requests:
            if not request.payload or "post_set1" not in request.payload:
                out.append(Completion("", "error", 0, 0, 0.0))
                continue
            letter, explanation = lexical_decision(request.payload)
            text = answer_text(letter, explanation)
            out.append(Completion(text, "stop", 0, len(text.split()), 0.0))
        return out


# --------------------------------------------------------------------------- evaluation rows


def build_cm_requests(
    rows: pl.DataFrame,
    theories: Mapping[str, str],
    template: PromptTemplate,
    names: Mapping[str, str],
    settings: CMSettings,
) -> list[Request]:
    """One CM request per row with the theory ``theories`` holds for it."""
    params = sampling_params(settings)
    max_chars = settings.max_post_chars
    requests = []
    for row in rows.iter_rows(named=True):
        theory = theories.get(row["quadruplet_id"], "")
        values = cm_slot_values(
            row["demographic_A"],
            row["demographic_B"],
            row["sample_A"],
            row["sample_B"],
            bool(row["switched"]),
            theory,
            max_chars,
        )
        set1, set2 = post_sets(row["sample_A"], row["sample_B"], bool(row["switched"]))
        payload = {
            "theory": format_theory(theory),
            "demo_a": row["demographic_A"],
            "demo_b": row["demographic_B"],
            "names_a": group_names(row["demographic_A"], names),
            "names_b": group_names(row["demographic_B"], names),
            "post_set1": [str(p)[:max_chars] for p in set1],
            "post_set2": [str(p)[:max_chars] for p in set2],
        }
        requests.append(Request(prompt=template.render(values), params=params, payload=payload))
    return requests


def theories_by_row(theories: pl.DataFrame, rows: pl.DataFrame) -> dict[str, str]:
    """quadruplet_id -> theory; a ConfigError when the theories lack some evaluation row."""
    theory_of = dict(zip(theories["quadruplet_id"], theories["theory"], strict=True))
    missing = [q for q in rows["quadruplet_id"] if q not in theory_of]
    if missing:
        raise ConfigError(f"theories lack {len(missing)} evaluation rows (e.g. {missing[0]})")
    return theory_of


def read_theories(path: str | Path) -> pl.DataFrame:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"theories {path} do not exist")
    return pl.read_parquet(path)


PREDICTION_SCHEMA = {
    "quadruplet_id": pl.String,
    "eval_row": pl.Int64,
    "tm": pl.String,
    "k": pl.Int64,
    "cm": pl.String,
    "switched": pl.Boolean,
    "answer": pl.String,
    "finish_reason": pl.String,
    "predicted_switched": pl.Boolean,
    "detected": pl.Boolean,
    "undetected_reason": pl.String,
    "correct": pl.Boolean,
    "prompt_tokens": pl.Int64,
    "output_tokens": pl.Int64,
}


def classify_rows(
    rows: pl.DataFrame,
    theories: pl.DataFrame,
    model,
    template: PromptTemplate,
    names: Mapping[str, str],
    cm_name: str,
    settings: CMSettings,
) -> pl.DataFrame:
    """Run the CM on every row; one prediction row per evaluation row."""
    theory_of = theories_by_row(theories, rows)
    tm = theories["tm"][0] if theories.height else ""
    k = int(theories["k"][0]) if theories.height else 0
    requests = build_cm_requests(rows, theory_of, template, names, settings)
    completions = model.generate(requests)
    records = []
    for row, completion in zip(rows.iter_rows(named=True), completions, strict=True):
        parsed = parse_answer(
            completion.text,
            group_names(row["demographic_A"], names),
            group_names(row["demographic_B"], names),
        )
        reason = parsed.reason
        if completion.finish_reason == "error":
            parsed, reason = ParsedAnswer(None, "error"), "error"
        switched = bool(row["switched"])
        records.append(
            {
                "quadruplet_id": row["quadruplet_id"],
                "eval_row": row["eval_row"],
                "tm": tm,
                "k": k,
                "cm": cm_name,
                "switched": switched,
                "answer": completion.text,
                "finish_reason": completion.finish_reason,
                "predicted_switched": parsed.predicted_switched,
                "detected": parsed.detected,
                "undetected_reason": None if parsed.detected else reason,
                "correct": parsed.detected and parsed.predicted_switched == switched,
                "prompt_tokens": completion.prompt_tokens,
                "output_tokens": completion.output_tokens,
            }
        )
    return pl.DataFrame(records, schema=PREDICTION_SCHEMA)


def summary_counts(predictions: pl.DataFrame) -> dict[str, Any]:
    reasons = Counter(r for r in predictions["undetected_reason"].to_list() if r is not None)
    n = predictions.height
    n_correct = int(predictions["correct"].sum() or 0)
    n_detected = int(predictions["detected"].sum() or 0)
    return {
        "rows": n,
        "correct": n_correct,
        "detected": n_detected,
        "undetected": n - n_detected,
        "undetected_by_reason": dict(sorted(reasons.items())),
        "accuracy": n_correct / n if n else None,
    }
