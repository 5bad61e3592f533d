"""CM prompt rendering with the paper's template equals an independent rendering written here
from docs/method.md §2.9's rules; template parsing (f-string files, plain slots) and the builtin lexical CM."""

from __future__ import annotations

import polars as pl
import pytest
from splits.config.templates import CM_SLOTS
from splits.errors import ConfigError
from splits.evaluation.classify import LexicalCM, cm_slot_values, lexical_decision, parse_answer
from splits.evaluation.common import (
    format_theory,
    load_template,
    parse_template,
    statements_by_group,
)
from splits.evaluation.subsample import normalise_quadruplets
from splits.llm.base import Request

PAPER_CUT = 2000  # characters of a post the paper's evaluator keeps
LONG = "x" * 1990 + "\nline two of a very long post " + "y" * 100
SAMPLE_A = ['I said "hello"\nto the class', "tabs\tand\nnew\nlines", LONG]
SAMPLE_B = ["a 'quoted' {brace} post", '"""triple quotes"""', "plain"]
THEORY = "\n  Group A: talks about Mass.  \n\n\nGroup B: grades papers\n   \n"


def independent_rendering(template_text: str, demo_a, demo_b, sample_a, sample_b, switched, theory):
    """docs/method.md §2.9 spelled out: the file is f\"\"\"...\"\"\" with no escapes or doubled braces (checked),
    so its body with the five names substituted is what the f-string evaluates to."""
    assert template_text.startswith('f"""') and template_text.endswith('"""')
    body = template_text[4:-3]
    assert "\\" not in body and "{{" not in body and "}}" not in body

    def post_set(posts):
        quoted = []
        for post in posts:
            text = post.replace("\n", "\t")
            quoted.append('"""' + text[:2000] + '"""')
        return "\n" + "\n\n".join(quoted)

    first, second = (sample_b, sample_a) if switched else (sample_a, sample_b)
    lines = [line.strip() for line in theory.splitlines()]
    values = {
        "{demo_a}": demo_a,
        "{demo_b}": demo_b,
        "{post_set1}": post_set(first),
        "{post_set2}": post_set(second),
        "{theories}": "\n".join(line for line in lines if line),
    }
    # substitute in one left-to-right pass so that slot-like text inside values stays literal
    out, i = [], 0
    while i < len(body):
        for slot, value in values.items():
            if body.startswith(slot, i):
                out.append(value)
                i += len(slot)
                break
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


@pytest.fixture(scope="module")
def paper_template_path(reference_dir):
    return reference_dir / "splits-upstream" / "classify_with_theory_and_demo.txt"


@pytest.mark.parametrize("switched", [False, True])
def test_paper_template_rendering_matches_spec(paper_template_path, switched):
    template = load_template(paper_template_path, CM_SLOTS, CM_SLOTS)
    assert template.fstring
    values = cm_slot_values("catholic", "teacher", SAMPLE_A, SAMPLE_B, switched, THEORY, PAPER_CUT)
    rendered = template.render(values)
    expected = independent_rendering(
        paper_template_path.read_text(encoding="utf-8"),
        "catholic",
        "teacher",
        SAMPLE_A,
        SAMPLE_B,
        switched,
        THEORY,
    )
    assert rendered == expected
    assert rendered.endswith("RESPONSE\n1. Explanation: I think ")
    assert "<|start_header_id|>system<|end_header_id|>" in rendered
    # the long post is cut to 2,000 characters after its newline became a tab
    assert '"""' + "x" * 1990 + "\tline two" in rendered
    assert "y" * 100 not in rendered
    first = rendered.index("Post Set 1:\n")
    second = rendered.index("Post Set 2:\n")
    in_first = rendered[first:second]
    assert ("I said" in in_first) != switched
    assert "Group A: talks about Mass.\nGroup B: grades papers\n\nNow" in rendered


def test_fstring_file_is_not_executed(tmp_path):
    evil = tmp_path / "evil.txt"
    evil.write_text('f"""{__import__("os").getcwd()} {demo_a}"""')
    with pytest.raises(ConfigError, match="unsupported placeholder"):
        load_template(evil, CM_SLOTS)


def test_fstring_escapes_and_doubled_braces_are_evaluated():
    template = parse_template('f"""a\\tb {{x}} {demo_a}"""', "t", CM_SLOTS)
    assert template.render({"demo_a": "{post_set1}"}) == "a\tb {x} {post_set1}"


def test_plain_template_keeps_other_braces_literal():
    template = parse_template('{demo_a} { "json": 1 } {{demo_b}}', "t", CM_SLOTS)
    assert template.render({"demo_a": "A", "demo_b": "B"}) == 'A { "json": 1 } {B}'


def test_plain_template_refuses_a_misspelt_slot():
    with pytest.raises(ConfigError, match=r"t: unknown slot \{theory\}"):
        parse_template("{demo_a} {demo_b} {post_set1} {post_set2} {theory}", "t", CM_SLOTS)


def test_missing_slot_is_a_config_error(tmp_path):
    path = tmp_path / "cm.txt"
    path.write_text("{demo_a} {demo_b} {post_set1} {post_set2}")
    with pytest.raises(ConfigError, match="theories"):
        load_template(path, CM_SLOTS, CM_SLOTS)
    with pytest.raises(ConfigError, match="does not exist"):
        load_template(tmp_path / "nope.txt", CM_SLOTS, CM_SLOTS)


def test_own_templates_have_the_five_slots(repo_root):
    for name in ("classify.txt", "classify_llama3.txt"):
        template = load_template(repo_root / "resources" / "prompts" / name, CM_SLOTS, CM_SLOTS)
        rendered = template.render(cm_slot_values("a", "b", ["p"], ["q"], False, "t", PAPER_CUT))
        assert rendered.endswith("1. Explanation: I think ")


def test_format_theory_drops_blank_lines():
    assert format_theory(THEORY) == "Group A: talks about Mass.\nGroup B: grades papers"
    assert format_theory(None) == ""


def test_statements_by_group_reads_labels_and_names():
    theory = (
        "Group A (Catholic) posts use words like: mass, rosary\n"
        "B: grading, lesson plans\n"
        "Teachers mention students while Catholics mention parish\n"
        "Both groups like coffee"
    )
    got = statements_by_group(theory, ["catholic", "Catholics"], ["teacher", "Teachers"])
    assert got["A"][0].startswith("Group A (Catholic)")
    assert "Catholics mention parish" in got["A"][1]
    assert got["B"][0] == "B: grading, lesson plans"
    assert "Teachers mention students" in got["B"][1]
    assert len(got["A"]) == 2 and len(got["B"]) == 2


def test_lexical_cm_follows_the_theory_and_goes_through_the_parser():
    theory = "Group A (Catholic) posts use words like: rosary, parish\nGroup B (teacher) posts use words like: grading, students"
    payload = {
        "theory": theory,
        "names_a": ["catholic"],
        "names_b": ["teacher"],
        "post_set1": ["grading all weekend", "my students", "nice day"],
        "post_set2": ["the parish fair", "rosary beads", "nice day"],
    }
    assert lexical_decision(payload)[0] == "B"
    swapped = {**payload, "post_set1": payload["post_set2"], "post_set2": payload["post_set1"]}
    assert lexical_decision(swapped)[0] == "A"
    model = LexicalCM("lexical", {"backend": "builtin", "kind": "lexical"})
    completions = model.generate([Request(prompt="x", payload=payload), Request(prompt="x")])
    assert parse_answer(completions[0].text).predicted_switched is True
    assert completions[1].finish_reason == "error"


def test_lexical_cm_without_theory_is_a_deterministic_fair_coin():
    letters = []
    for i in range(400):
        payload = {"theory": "", "post_set1": [f"post {i}"], "post_set2": [f"other {i}"]}
        first = lexical_decision(payload)
        assert first == lexical_decision(payload)
        letters.append(first[0])
    assert 160 < letters.count("A") < 240


@pytest.mark.parametrize("switched", [False, True])
def test_release_layout_renders_like_the_public_evaluator(paper_template_path, switched):
    """In the public release (v4) sample_A already is Post Set 1 (B's posts when switched) and
    its evaluator shows sample_A first; after the subsample's by_post_set conversion, docs/method.md §2.9's
    rendering gives the evaluator's prompt."""
    release = pl.DataFrame(
        {
            "description": ["Basketball"],
            "demographic_A": ["catholic"],
            "demographic_B": ["teacher"],
            "example_posts": [["e1", "e2"]],
            "sample_A": [SAMPLE_A],
            "sample_B": [SAMPLE_B],
            "switched": [switched],
        }
    )
    rows, counts = normalise_quadruplets(release, {"Basketball": "Sports"}, "release", "auto")
    assert counts["layout"] == "by_post_set"
    row = rows.row(0, named=True)
    template = load_template(paper_template_path, CM_SLOTS, CM_SLOTS)
    values = cm_slot_values(
        "catholic", "teacher", row["sample_A"], row["sample_B"], row["switched"], THEORY, PAPER_CUT
    )
    evaluator = independent_rendering(
        paper_template_path.read_text(encoding="utf-8"),
        "catholic",
        "teacher",
        SAMPLE_A,
        SAMPLE_B,
        False,  # the evaluator never swaps
        THEORY,
    )
    assert template.render(values) == evaluator
    pipeline, counts = normalise_quadruplets(
        release.with_columns(pl.lit([["A", "B"]]).alias("example_labels")), {}, "pipeline", "auto"
    )
    assert counts["layout"] == "by_group"
    assert pipeline["sample_A"].to_list() == [SAMPLE_A]
