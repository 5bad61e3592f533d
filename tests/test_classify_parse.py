"""The CM answer parser against a table of realistic answers (docs/method.md §2.9).

Each case: the completion text (what follows the pre-filled "1. Explanation: I think "), what our
parser must return ("A" = Post Set 1 is A's, "B" = it is B's, None = undetected, with the reason),
and what docs/method.md §2.9's literal rule (the public evaluator's code, re-implemented below) returns.
Where the two differ, ``note`` says why the literal rule errs and what we do instead.
Demographic A is ``catholic`` (display name Catholic), B is ``teacher``.
"""

from __future__ import annotations

import pytest
from splits.evaluation.classify import parse_answer

NAMES_A = ["catholic", "Catholic"]
NAMES_B = ["teacher"]
EXPLAIN = "that Post Set 1 goes with {} because the posts mention it.\n"

# (answer, ours, reason, literal, note)
CASES = [
    (EXPLAIN.format("A") + "2. Post Set 1: A\n3. Post Set 2: B", "A", "ok", "A", ""),
    (EXPLAIN.format("B") + "2. Post Set 1: B\n3. Post Set 2: A", "B", "ok", "B", ""),
    ("2. Post Set 2: A\n3. Post Set 1: B", "B", "ok", "B", "both orders"),
    ("2. Post Set 1: A\n3. Post Set 2: B\n\nI hope this helps!", "A", "ok", "A", "extra prose"),
    ("2. Post Set 1: Group A\n3. Post Set 2: Group B", "A", "ok", "A", ""),
    ("2. Post Set 1: <B>\n3. Post Set 2: <A>", "B", "ok", "B", ""),
    ("2. Post Set 1: <Group B>\n3. Post Set 2: <Group A>", "B", "ok", "B", ""),
    ("2. Post Set 1: A\n3. Post Set 2: A", None, "same", None, "both sets the same"),
    ("2. Post Set 1: <B>\n3. Post Set 2: Group B", None, "same", None, "both sets the same"),
    ("2. Post Set 1: A", None, "missing", None, "missing line"),
    (EXPLAIN.format("A") + "3. Post Set 2: B", None, "missing", None, "missing line"),
    ("", None, "missing", None, "empty answer"),
    ("I cannot determine which group wrote which set.", None, "missing", None, "refusal"),
    (
        "that Post Set 1 goes with B because of lesson plans and Post Set 2 goes with A.",
        None,
        "missing",
        None,
        "prose only: never guessed from the explanation",
    ),
    (
        "**Post Set 1:** B\n**Post Set 2:** A",
        "B",
        "ok",
        None,
        "literal misses markdown bold (':**' is not ': '); we drop markup first",
    ),
    (
        "Post Set 1: Group B (teacher)\nPost Set 2: Group A (catholic)",
        "B",
        "ok",
        None,
        "literal keeps '(teacher)' and fails; we read the letter and the name, which agree",
    ),
    (
        "Post Set 1: teacher\nPost Set 2: catholic",
        "B",
        "ok",
        None,
        "literal only knows letters; a group label names its group unambiguously",
    ),
    (
        "Post Set 1: Catholic\nPost Set 2: Teacher",
        "A",
        "ok",
        None,
        "display names, any case",
    ),
    ("Post Set 1:A\nPost Set 2:B", "A", "ok", None, "literal needs a space after the colon"),
    ("Post Set 1 : A\nPost Set 2 : B", "A", "ok", None, "literal needs 'Post Set 1: ' exactly"),
    ("post set 1: b\npost set 2: a", "B", "ok", None, "literal is case-sensitive"),
    ("Post Set 1: A.\nPost Set 2: B.", "A", "ok", None, "literal keeps the full stop"),
    (
        "Post Set 1: Demographic B\nPost Set 2: Demographic A",
        "B",
        "ok",
        None,
        "literal strips only the characters of 'Group'",
    ),
    (
        "Post Set 1: A (Catholic)\nPost Set 2: B (teacher)",
        "A",
        "ok",
        None,
        "letter plus agreeing name",
    ),
    (
        "Post Set 1: B (Catholic)\nPost Set 2: A (teacher)",
        None,
        "unrecognised",
        None,
        "letter and name disagree: undetected",
    ),
    (
        "Post Set 1: A, Post Set 2: B",
        "A",
        "ok",
        None,
        "both on one line: literal reads 'A, Post Set 2: B' as set 1",
    ),
    (
        "2. Post Set 1: A\n3. Post Set 2: A (the teacher set)",
        None,
        "unrecognised",
        "A",
        "literal ERRS: set 2 says A and teacher (B) at once, literal still counts A",
    ),
    (
        "2. Post Set 1: B\n3. Post Set 2: B, as both sets seem similar",
        None,
        "same",
        "B",
        "literal ERRS: takes set 2's whole rest of text, so 'B, as ...' != 'B' and a "
        "both-the-same answer counts as B; we read set 2's line and see B twice",
    ),
    (
        "Post Set 1: A\nPost Set 2: B\nWait, on reflection:\nPost Set 1: B\nPost Set 2: A",
        None,
        "conflicting",
        "A",
        "literal ERRS: takes the first of two contradicting answers (a guess); we call it undetected",
    ),
    (
        "Post Set 1: A\nPost Set 2: B\nFinal answer:\nPost Set 1: A\nPost Set 2: B",
        "A",
        "ok",
        "A",
        "repeated, consistent",
    ),
    (
        "Post Set 1: this set talks about grading papers.\nSo:\n2. Post Set 1: B\n3. Post Set 2: A",
        "B",
        "ok",
        None,
        "literal reads the first (descriptive) 'Post Set 1:' line; we skip lines naming no group",
    ),
    ("Post Set 1: A or B\nPost Set 2: B or A", None, "unrecognised", None, "undecided"),
    ("Post Set 1: Group\nPost Set 2: Group", None, "unrecognised", None, ""),
    ("Post Set 1: C\nPost Set 2: D", None, "unrecognised", None, ""),
    (
        "Post Set 1: A\nPost Set 2: C",
        None,
        "unrecognised",
        "A",
        "literal ERRS: only checks set 2 differs from set 1; 'C' names no group",
    ),
    ("2. Post Set 1: B\n3. Post Set 2: A<|eot_id|>", "B", "ok", "B", "special token left in"),
    (
        "Post Set 1: A teacher\nPost Set 2: B",
        None,
        "unrecognised",
        None,
        "'A teacher' is ambiguous",
    ),
    ("Post Set 1: teacher\nPost Set 2: Teacher", None, "same", None, "same group by name"),
    (
        "2. Post Set 1: B\n3. Post Set 2: A\n\nPost Set 1: A lot of the posts mention grading.",
        "B",
        "ok",
        "B",
        "a prose line after the answer: its article 'A' is no group letter; the answer lines win",
    ),
    (
        "2. Post Set 1: A\n3. Post Set 2: B\n\nPost Set 1: A lot of the posts mention the parish."
        "\nPost Set 2: A few posts mention grading.",
        "A",
        "ok",
        "A",
        "prose lines for both sets after the answer",
    ),
    (
        "Post Set 1: A, because the posts mention the parish\nPost Set 2: B, grading",
        "A",
        "ok",
        None,
        "no bare answer line: the letters in the prose are read (literal keeps the prose)",
    ),
]


def literal_rule(response: str) -> str | None:
    """docs/method.md §2.9's parsing, as the public evaluator codes it."""
    try:
        set1 = response.split("Post Set 1: ")[1].split("\n")[0].strip()
        set2 = response.split("Post Set 2: ")[1].strip()
        set1 = set1.strip("<").strip(">").strip("Group").strip()
        set2 = set2.strip("<").strip(">").strip("Group").strip()
    except IndexError:
        return None
    if set1 == set2:
        return None
    return set1 if set1 in ("A", "B") else None


def test_table_is_large_and_varied():
    assert len(CASES) >= 30
    outcomes = {c[1] for c in CASES}
    assert outcomes == {"A", "B", None}
    assert sum(1 for c in CASES if c[1] != c[3]) >= 10  # where the literal rule errs


@pytest.mark.parametrize("answer, ours, reason, literal, note", CASES)
def test_parse_answer(answer, ours, reason, literal, note):
    parsed = parse_answer(answer, NAMES_A, NAMES_B)
    expected_switched = None if ours is None else ours == "B"
    assert parsed.predicted_switched == expected_switched, note
    assert parsed.reason == reason, note
    assert parsed.detected == (ours is not None)


@pytest.mark.parametrize("answer, ours, reason, literal, note", CASES)
def test_literal_rule_column(answer, ours, reason, literal, note):
    """The table's literal column is what docs/method.md §2.9's literal rule really gives; every case where
    it differs from ours is explained."""
    assert literal_rule(answer) == literal
    if literal != ours:
        assert note, "a case where the literal rule differs needs a note"


def test_names_are_optional():
    assert parse_answer("Post Set 1: teacher\nPost Set 2: catholic").reason == "unrecognised"
    assert parse_answer("Post Set 1: B\nPost Set 2: A").predicted_switched is True
