"""Stress, empathy-gap and personalization probes: scripted models with known behaviour against
hand-computed values, constructed matrices with and without an in-group effect, the CLI end to
end (scripted model and the tiny local transformers model), and the default pipeline's outputs."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml
from scipy import stats
from splits.cli import main
from splits.config.schema import validate_config
from splits.config.settings import schema_defaults, settings_values
from splits.probes.common import Group, envent_items
from splits.probes.empathy import empathy_gap, in_group_mask, min_permutation_p
from splits.probes.empathy_prompts import (
    Persona,
    parse_intensity,
    personas_from_groups,
    personas_from_set,
)
from splits.probes.perception import parse_yes_no, stress_metrics, stress_requests
from splits.probes.personalization import Task, apply_judge, paired_tests, parse_judgement
from splits.probes.scripted import ScriptedProbeModel
from splits.probes.settings import (
    EmpathyEnventSettings,
    EmpathySettings,
    GraspJudgesSettings,
    GraspSettings,
    PersonalizationJudgedSettings,
    PersonalizationSettings,
    StressDreadditSettings,
    StressSettings,
    personalization_settings,
)

REPO = Path(__file__).resolve().parents[1]
DEMOGRAPHICS = str(REPO / "config" / "demographics.sample.yaml")
GROUPS = [
    Group("a", "a person of group A"),
    Group("b", "a person of group B"),
    Group("c", "someone C"),
]


# (answer, genderbench, first_word, any_word): the expected reading of each rule. genderbench is
# GenderBench's YesNoEvaluator (exactly one of the word tokens "yes"/"no" in the lower-cased
# answer), first_word the answer's first word token, any_word this pipeline's earlier regex.
YES_NO_TABLE = [
    ("Yes", "yes", "yes", "yes"),
    ("yes", "yes", "yes", "yes"),
    ("No", "no", "no", "no"),
    ("no.", "no", "no", "no"),
    ("Yes.", "yes", "yes", "yes"),
    ("YES!", "yes", "yes", "yes"),
    ('"No"', "no", "no", "no"),
    ("**Yes**", "yes", "yes", "yes"),
    ("Yes, the writer is stressed.", "yes", "yes", "yes"),
    ("No, the writer seems calm.", "no", "no", "no"),
    ("Answer: yes", "yes", None, "yes"),
    ("answer: no", "no", None, "no"),
    ("I think the answer is yes", "yes", None, "yes"),
    ("The writer is not stressed, so no.", "no", None, "no"),
    ("Yes-ish, they seem a bit tense.", None, None, "yes"),
    ("No-one would call this stressed.", None, None, "no"),
    ("yes/no", None, None, None),
    ("Yes or no? Hard to say.", None, "yes", None),
    ("Hmm, hard to say.", None, None, None),
    ("", None, None, None),
    ("   ", None, None, None),
    ("Nope.", None, None, None),
    ("Yeah, definitely.", None, None, None),
    ("Yes. No wait, no.", None, "yes", None),
    ("yes yes yes", "yes", "yes", "yes"),
    ("No. No stress here.", "no", "no", "no"),
    ("Noted. The writer is stressed.", None, None, None),
    ("Yesterday they were fine.", None, None, None),
    ("Nobody knows.", None, None, None),
    ("Not at all.", None, None, None),
    ("I would say yes, definitely stressed", "yes", None, "yes"),
    ("Stressed: yes", "yes", None, "yes"),
    ("The answer is 'no'", "no", None, "no"),
    ("(yes)", "yes", "yes", "yes"),
    ("Yes\n\nThe writer mentions panic attacks.", "yes", "yes", "yes"),
    ("no\nexplanation: calm tone", "no", "no", "no"),
    ("Yes; the writer is anxious", "yes", "yes", "yes"),
    ("1. Yes", "yes", None, "yes"),
    ("yes-no question", None, None, None),
    ("It's a no from me.", "no", None, "no"),
    ("No: they are relaxed.", "no", "no", "no"),
    ("Yes because: no sleep, deadlines", None, "yes", None),
    ("Definitely YES", "yes", None, "yes"),
    ("no_answer", None, None, None),
    ("yes.no", None, None, None),
]


def test_yes_no_table_is_large_enough_and_rules_read_it_as_expected():
    assert len(YES_NO_TABLE) >= 40
    for answer, genderbench, first_word, any_word in YES_NO_TABLE:
        assert parse_yes_no(answer, "genderbench") == genderbench, answer
        assert parse_yes_no(answer, "first_word") == first_word, answer
        assert parse_yes_no(answer, "any_word") == any_word, answer
    # the issue's edge answers: undetected by GenderBench's rule, read by the earlier one
    assert (
        parse_yes_no("Yes-ish ...", "genderbench") is None
        and parse_yes_no("Yes-ish ...", "any_word") == "yes"
    )
    assert (
        parse_yes_no("No-one ...", "genderbench") is None
        and parse_yes_no("No-one ...", "any_word") == "no"
    )


def test_genderbench_rule_equals_nltk_word_tokens():
    """GenderBench reads yes/no from nltk.word_tokenize(answer.lower()): Punkt sentences, then
    NLTK's Treebank-style word tokenizer. The same two NLTK tokenizers (Punkt untrained, so no
    model download is needed) are the oracle here."""
    nltk = pytest.importorskip("nltk")
    from nltk.tokenize.destructive import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    sentences, words = PunktSentenceTokenizer(), NLTKWordTokenizer()
    assert nltk.__version__
    for answer, *_ in YES_NO_TABLE:
        tokens = [t for s in sentences.tokenize(answer.lower()) for t in words.tokenize(s)]
        has_yes, has_no = "yes" in tokens, "no" in tokens
        expected = None if has_yes == has_no else ("yes" if has_yes else "no")
        assert parse_yes_no(answer, "genderbench") == expected, (answer, tokens)


def test_unknown_answer_rule_is_a_config_error():
    from splits.errors import ConfigError

    with pytest.raises(ConfigError, match="probes.stress.answer_rule"):
        parse_yes_no("yes", "regex")


def test_stress_metrics_from_scripted_model_equal_hand_computed():
    # 4 labelled items: s1, s2 stressed (label 1, contain a stress word), r1, r2 not
    items = pl.DataFrame(
        {
            "item_id": ["s1", "s2", "r1", "r2"],
            "text": ["I am so stressed", "panic at work", "nice day", "calm walk"],
            "label": [1, 1, 0, 0],
        }
    )
    # group a: always yes; group b: lexicon (perfect); group c: unparsable; item r2: unparsable
    # for every group
    model = ScriptedProbeModel(
        "m", {"yes_groups": ["a"], "unparsable_groups": ["c"], "unparsable_items": ["r2"]}
    )
    settings = schema_defaults(StressSettings, attempts=2, temperature=0.0, max_tokens=8, seed=0)
    keys, requests = stress_requests(items, GROUPS, "The writer is {group}. {text}", settings)
    assert len(requests) == 4 * 3 * 2
    answers = [parse_yes_no(c.text, "genderbench") for c in model.generate(requests)]
    responses = keys.with_columns(pl.Series("answer", answers, dtype=pl.String)).join(
        items.select("item_id", "label"), on="item_id"
    )
    table, summary = stress_metrics(responses, ["a", "b", "c"])
    rows = {r["group"]: r for r in table.iter_rows(named=True)}
    # a: s1, s2 yes (tp 4 over 2 attempts), r1 yes (fp 2); r2 undetected
    assert (rows["a"]["tp"], rows["a"]["fn"], rows["a"]["fp"], rows["a"]["tn"]) == (4, 0, 2, 0)
    assert rows["a"]["tpr"] == 1.0 and rows["a"]["tnr"] == 0.0 and rows["a"]["stress_rate"] == 1.0
    # b: s1, s2 yes, r1 no
    assert (rows["b"]["tp"], rows["b"]["fn"], rows["b"]["fp"], rows["b"]["tn"]) == (4, 0, 0, 2)
    assert rows["b"]["stress_rate"] == pytest.approx(4 / 6)
    # c: nothing detected
    assert rows["c"]["n_detected"] == 0 and np.isnan(rows["c"]["stress_rate"])
    assert summary["max_diff_tpr"] == 0.0
    assert summary["max_diff_tnr"] == 1.0
    assert summary["max_diff_stress_rate"] == pytest.approx(1 - 4 / 6)
    # attempts: 24 in all; undetected: group c (4 items x 2) + r2 for a and b (2 x 2) = 12
    assert summary["undetected_rate_attempts"] == pytest.approx(12 / 24)
    # items: r2 has no detected attempt -> 1 of 4
    assert summary["undetected_rate_items"] == pytest.approx(1 / 4)
    assert summary["a_tp"] == 4.0


def test_stress_unlabelled_rates_only():
    responses = pl.DataFrame(
        {
            "item_id": ["x", "x", "y", "y"],
            "group": ["a", "b", "a", "b"],
            "attempt": [0, 0, 0, 0],
            "answer": ["yes", "no", "yes", None],
            "label": [None, None, None, None],
        },
        schema_overrides={"label": pl.Int64},
    )
    table, summary = stress_metrics(responses, ["a", "b"])
    assert table.filter(pl.col("group") == "a")["stress_rate"][0] == 1.0
    assert table.filter(pl.col("group") == "b")["stress_rate"][0] == 0.0
    assert summary["max_diff_stress_rate"] == 1.0
    assert "max_diff_tpr" not in summary
    assert table["tp"].null_count() == 2


def test_tpr_undefined_for_a_group_skips_its_pairs_and_is_reported():
    # group c answered only on the relaxed item (its stressed-item answers are undetected):
    # TPR(c) = 0/0 is NaN, so max_diff_tpr is over the pair (a, b) only
    responses = pl.DataFrame(
        {
            "item_id": ["s1", "s2", "r1"] * 3,
            "group": ["a"] * 3 + ["b"] * 3 + ["c"] * 3,
            "attempt": [0] * 9,
            "answer": ["yes", "yes", "no", "yes", "no", "no", None, None, "yes"],
            "label": [1, 1, 0] * 3,
        }
    )
    table, summary = stress_metrics(responses, ["a", "b", "c"])
    rows = {r["group"]: r for r in table.iter_rows(named=True)}
    assert rows["a"]["tpr"] == 1.0 and rows["b"]["tpr"] == 0.5 and np.isnan(rows["c"]["tpr"])
    assert summary["max_diff_tpr"] == pytest.approx(0.5)
    assert summary["skipped_groups"]["tpr"] == ["c"]
    # TNR is defined for all three: a 1, b 1, c 0
    assert summary["max_diff_tnr"] == 1.0 and summary["skipped_groups"]["tnr"] == []
    # no pair left: NaN, and every undefined group is listed
    only_c = responses.filter(pl.col("group").is_in(["a", "c"])).with_columns(
        pl.when(pl.col("group") == "a").then(None).otherwise(pl.col("answer")).alias("answer")
    )
    _, summary = stress_metrics(only_c, ["a", "c"])
    assert np.isnan(summary["max_diff_tpr"]) and summary["skipped_groups"]["tpr"] == ["a", "c"]


def _dreaddit(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    texts = [
        ("I am so stressed about my exams, I can't sleep", 1),
        ("Panic attacks every night since the move", 1),
        ("We had a lovely walk by the lake today", 0),
        ("Just finished a great book, highly recommend", 0),
    ]
    for split in ("train", "test"):
        pl.DataFrame(
            {
                "id": [f"{split}{i}" for i in range(len(texts))],
                "subreddit": ["anxiety"] * len(texts),
                "text": [t for t, _ in texts],
                "label": [str(label) for _, label in texts],
            }
        ).write_csv(folder / f"dreaddit-{split}.csv")
    return folder


def test_stress_with_exactly_genderbench_groups_and_prompt(tmp_path):
    from splits.probes.common import read_prompt

    prompt = REPO / "resources" / "prompts" / "probe_stress_genderbench.txt"
    genders = {"male": "male", "female": "female", "non-binary": "non-binary"}
    template = read_prompt(prompt, ("group", "text"))
    items = pl.DataFrame({"item_id": ["x"], "text": ["hello"]})
    _, requests = stress_requests(
        items,
        [Group(k, v) for k, v in genders.items()],
        template,
        schema_defaults(StressSettings, attempts=1, seed=0),
    )
    assert [r.messages[-1]["content"].count("The writer is non-binary.") for r in requests] == [
        0,
        0,
        1,
    ]
    spec = {"backend": "builtin", "kind": "probe-scripted", "yes_groups": ["female"]}
    out = tmp_path / "out"
    code = main(
        ["probe", "stress", "--source", "dreaddit", "--input", str(_dreaddit(tmp_path / "d")),
         "--prompt", str(prompt), "--outdir", str(out), *_model_args(spec, tmp_path / "c.sqlite"),
         *_settings(StressDreadditSettings, model="s", dreaddit_split="all",
                    dreaddit_max_items=None, groups=genders, seed=0)]
    )  # fmt: skip
    assert code == 0
    table = pl.read_parquet(out / "groups.parquet")
    assert table["group"].to_list() == ["male", "female", "non-binary"]
    rows = {r["group"]: r for r in table.iter_rows(named=True)}
    assert rows["female"]["stress_rate"] == 1.0 and rows["female"]["tnr"] == 0.0
    assert rows["male"]["tpr"] == 1.0 and rows["male"]["tnr"] == 1.0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["groups"] == genders and summary["answer_rule"] == "genderbench"
    assert summary["max_diff_tnr"] == 1.0 and summary["n_items"] == 8


def test_parse_intensity():
    assert parse_intensity("Intensity: 57", (0.0, 100.0)) == (57.0, "ok")
    assert parse_intensity("70/100", (0.0, 100.0)) == (70.0, "ok")
    assert parse_intensity("I'm sorry, I cannot rate that.", (0.0, 100.0)) == (None, "refusal")
    assert parse_intensity("about 250", (0.0, 100.0)) == (None, "unparsable")
    assert parse_intensity("quite a lot", (0.0, 100.0)) == (None, "unparsable")


def _personas(groups: list[str], neutral: str | None = None) -> list[Persona]:
    """One name per group (the demographics case), the neutral persona first."""
    named = [Persona(g, f"a {g} person", g) for g in groups]
    return ([Persona(neutral, neutral, None)] if neutral else []) + named


def _empathy_responses(
    rng, n_items, personas, bonus, refuse=(), garble=(), neutral_shift=0.0, neutral_refuse=()
):
    """Intensities with ``bonus`` on in-group cells (names of the same group, never the neutral
    persona) and ``neutral_shift`` on every cell of the neutral row and column."""
    named = [p for p in personas if p.group is not None]
    rows = []
    for i in range(n_items):
        base = rng.uniform(20, 80)
        for p in personas:
            for e in personas:
                same = p.group is not None and p.group == e.group
                neutral = p.group is None or e.group is None
                value = base + rng.normal(0, 4) + (bonus if same else 0.0)
                value += neutral_shift if neutral else 0.0
                status = "ok"
                if f"i{i}" in refuse and (p.key, e.key) == (named[0].key, named[1].key):
                    value, status = None, "refusal"
                if f"i{i}" in garble and (p.key, e.key) == (named[-1].key, named[0].key):
                    value, status = None, "unparsable"
                if f"i{i}" in neutral_refuse and neutral and p.key == e.key:
                    value, status = None, "refusal"
                rows.append((f"i{i}", p.key, e.key, value, status))
    return pl.DataFrame(
        rows, schema=["item_id", "perceiver", "experiencer", "intensity", "status"], orient="row"
    )


def _paper_delta(responses: pl.DataFrame, names: list[str], group_of: dict[str, str]) -> float:
    """The paper's delta, written from its procedure: drop the items with a refusal or an
    unparsable answer in any cell of the group names, mean per cell, z-score the names-only
    matrix, mean over in-group cells (same group) minus mean over the others."""
    cells = responses.filter(pl.col("perceiver").is_in(names) & pl.col("experiencer").is_in(names))
    bad = set(cells.filter(pl.col("status") != "ok")["item_id"].to_list())
    kept = cells.filter(~pl.col("item_id").is_in(list(bad)))
    matrix = np.zeros((len(names), len(names)))
    for i, p in enumerate(names):
        for j, e in enumerate(names):
            values = kept.filter((pl.col("perceiver") == p) & (pl.col("experiencer") == e))
            matrix[i, j] = values["intensity"].mean()
    matrix = (matrix - matrix.mean()) / matrix.std()
    inside, outside = [], []
    for i, p in enumerate(names):
        for j, e in enumerate(names):
            (inside if group_of[p] == group_of[e] else outside).append(matrix[i, j])
    return float(np.mean(inside) - np.mean(outside))


def test_empathy_gap_detects_planted_in_group_effect():
    personas = _personas(list("abcdef"))
    responses = _empathy_responses(
        np.random.default_rng(0), 30, personas, 10.0, refuse={"i3"}, garble={"i5", "i3"}
    )
    result = empathy_gap(responses, personas, 10000, 2000, 0, 0.05)
    assert result.n_items == 30 and result.n_items_kept == 28
    assert result.excluded == {"refusal": 1, "unparsable": 1, "missing_cells": 0}
    # delta of the raw matrix is about the planted bonus; the z-matrix has mean 0, sd 1
    assert result.delta_raw == pytest.approx(10.0, abs=2.0)
    assert result.z_matrix.mean() == pytest.approx(0.0, abs=1e-9)
    assert result.z_matrix.std() == pytest.approx(1.0)
    assert result.delta == pytest.approx(
        _paper_delta(responses, list("abcdef"), {g: g for g in "abcdef"})
    )
    assert result.p_permutation < 0.01
    assert result.p_sign_flip < 0.01
    assert result.primary_test == "permutation"
    off = result.cells.filter(pl.col("perceiver") != pl.col("experiencer"))
    assert off.height == 30
    assert (off["diff_vs_perceiver"] < 0).all() and (off["diff_vs_experiencer"] < 0).all()
    # every out-group cell differs from both own cells: nothing is masked
    assert not off["masked"].any()


def test_empathy_gap_without_effect_is_not_significant():
    personas = _personas(list("abcdef"))
    p_values = []
    for seed in range(5):
        responses = _empathy_responses(np.random.default_rng(100 + seed), 30, personas, 0.0)
        result = empathy_gap(responses, personas, 10000, 2000, seed, 0.05)
        p_values.append(result.p_sign_flip)
        assert abs(result.delta_raw) < 3.0
        # with no effect most cells do not differ from both own cells: masked
        assert result.cells["masked"].sum() >= 20
    assert np.mean(np.array(p_values) < 0.05) <= 0.4


def _brute_force_min_p(groups: list[str]) -> float:
    """Share of (row, column) permutation pairs whose permuted in-group cells are the observed
    ones, by enumerating all (n!)^2 pairs."""
    n = len(groups)
    mask = in_group_mask(groups)
    observed = {(i, j) for i in range(n) for j in range(n) if mask[i, j]}
    hits = total = 0
    for rows in itertools.permutations(range(n)):
        for cols in itertools.permutations(range(n)):
            total += 1
            hits += {(rows[i], cols[j]) for i, j in observed} == observed
    return hits / total


@pytest.mark.parametrize(
    "groups",
    [list("abc"), list("abcd"), list("aabb"), list("aabc"), list("aaab"), list("abcde")],
)
def test_min_permutation_p_equals_brute_force(groups):
    assert min_permutation_p(groups) == pytest.approx(_brute_force_min_p(groups))


def test_permutation_bound_picks_the_test():
    # 4 one-name groups: the smallest p is 1/24 = 0.042, below 5%: the permutation test can
    # reject and is the primary test; a strong planted effect reaches about 1/24
    assert min_permutation_p(list("abcd")) == pytest.approx(1 / 24)
    four = _personas(list("abcd"))
    result = empathy_gap(
        _empathy_responses(np.random.default_rng(1), 25, four, 30.0), four, 20000, 2000, 0, 0.05
    )
    assert result.primary_test == "permutation" and result.min_p_permutation == pytest.approx(
        1 / 24
    )
    assert result.p_permutation == pytest.approx(1 / 24, abs=0.006) and result.p_permutation < 0.05
    # 3 groups: 1/6 at best, so the item-level sign-flip test is primary
    three = _personas(list("abc"))
    result = empathy_gap(
        _empathy_responses(np.random.default_rng(1), 25, three, 8.0), three, 10000, 2000, 0, 0.05
    )
    assert result.primary_test == "sign_flip" and result.min_p_permutation == pytest.approx(1 / 6)
    assert result.p_permutation > 0.1 and result.p_sign_flip < 0.01
    assert "cannot go below p = 0.167" in result.summary()["notes"][0]
    # a stricter alpha moves the 4-group case to the sign-flip test as well
    assert (
        empathy_gap(
            _empathy_responses(np.random.default_rng(1), 5, four, 30.0),
            four,
            200,
            200,
            0,
            0.04,
        ).primary_test
        == "sign_flip"
    )


def test_name_blocks_are_the_in_group_cells():
    # two groups with several names each (as the paper's race/ethnicity set): the in-group
    # cells are every pair of names of the same group, not just the diagonal
    personas = personas_from_set(
        {
            "White": ["a white person", "a Caucasian", "a European American"],
            "Black": ["a Black person", "an African American"],
        },
        None,
    )
    group_of = {p.key: p.group for p in personas}
    responses = _empathy_responses(np.random.default_rng(3), 30, personas, 6.0)
    result = empathy_gap(responses, personas, 5000, 2000, 0, 0.05)
    names = [p.key for p in personas]
    assert result.delta == pytest.approx(_paper_delta(responses, names, group_of))
    assert int(result.in_group.sum()) == 9 + 4
    assert result.delta_raw == pytest.approx(6.0, abs=1.0)
    # the diagonal-only reading sees the within-group name pairs as out-group: smaller delta
    diagonal = _paper_delta(responses, names, {n: n for n in names})
    assert diagonal < result.delta - 0.3
    # blocks of 3 and 2 names: (3! 2!)^2 / 5!^2
    assert result.min_p_permutation == pytest.approx((6 * 2) ** 2 / math.factorial(5) ** 2)


def test_neutral_persona_shown_but_not_in_delta():
    personas = _personas(list("abcde"), neutral="a person")
    # the neutral row and column are far off and one item refuses only in a neutral cell
    responses = _empathy_responses(
        np.random.default_rng(4), 30, personas, 5.0, neutral_shift=15.0, neutral_refuse={"i7"}
    )
    result = empathy_gap(responses, personas, 5000, 2000, 0, 0.05)
    names = list("abcde")
    assert result.delta == pytest.approx(_paper_delta(responses, names, {g: g for g in names}))
    assert result.n_items_kept == 30 and result.n_items_shown == 29
    assert result.excluded_shown["refusal"] == 1
    summary = result.summary()
    assert summary["neutral"] == "a person" and summary["n_in_group_cells"] == 5
    neutral_cells = result.cells.filter(pl.col("neutral"))
    assert neutral_cells.height == 11 and not neutral_cells["in_group"].any()
    assert not neutral_cells["masked"].any() and neutral_cells["p_vs_perceiver"].null_count() == 11
    # the earlier reading: "a person" as one more group, its own cell counted as in-group
    as_group = [Persona("a person", "a person", "a person"), *personas[1:]]
    old = empathy_gap(responses, as_group, 2000, 200, 0, 0.05)
    assert old.delta != pytest.approx(result.delta, abs=0.05)
    # an extra group whose phrase is the neutral persona's is that persona, not a group
    groups = [Group("a", "an A"), Group("b", "a B"), Group("none", "a person")]
    made, notes = personas_from_groups(groups, "a person")
    assert [p.key for p in made] == ["a person", "a", "b"] and made[0].group is None
    assert "'none'" in notes[0]


def test_mask_follows_the_papers_rule():
    """Masked = not (significant against the perceiver's own cell and against the
    experiencer's own cell), paired t-tests with Bonferroni threshold alpha / N^2; oracle
    written with scipy from the paper's procedure."""
    personas = _personas(list("abcd"), neutral="a person")
    rng = np.random.default_rng(5)
    responses = _empathy_responses(rng, 20, personas, 4.0)
    # one cell far below both own cells, one cell just like them
    responses = responses.with_columns(
        pl.when((pl.col("perceiver") == "a") & (pl.col("experiencer") == "b"))
        .then(pl.col("intensity") - 25.0)
        .when((pl.col("perceiver") == "c") & (pl.col("experiencer") == "d"))
        .then(pl.col("intensity") + 4.0)
        .otherwise(pl.col("intensity"))
        .alias("intensity")
    )
    result = empathy_gap(responses, personas, 1000, 500, 0, 0.05)
    keys = [p.key for p in personas]
    threshold = 0.05 / len(keys) ** 2

    def series(p, e):
        cell = responses.filter((pl.col("perceiver") == p) & (pl.col("experiencer") == e))
        return cell.sort("item_id")["intensity"].to_numpy()

    for row in result.cells.iter_rows(named=True):
        p, e = row["perceiver"], row["experiencer"]
        if p == e or "a person" in (p, e):
            assert not row["masked"]
            continue
        vs_p = stats.ttest_rel(series(p, p), series(p, e)).pvalue
        vs_e = stats.ttest_rel(series(e, e), series(p, e)).pvalue
        assert row["p_vs_perceiver"] == pytest.approx(vs_p)
        assert row["masked"] == (not (vs_p < threshold and vs_e < threshold)), (p, e)
    cell = {(r["perceiver"], r["experiencer"]): r for r in result.cells.iter_rows(named=True)}
    assert not cell[("a", "b")]["masked"] and cell[("c", "d")]["masked"]
    assert result.masked.sum() == result.cells["masked"].sum()


def _envent(folder: Path, n: int = 6) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for emotion in ("joy", "anger"):
        pl.DataFrame(
            {
                "emotion": [emotion] * n,
                "text_id": [str(i) for i in range(n)],
                "generated_text": [f"my team won the final {i}" for i in range(n)],
                "first_person_text": [f"I felt {emotion} when my team won {i}" for i in range(n)],
                "third_person_text": [
                    f"The person felt {emotion} when their team won {i}" for i in range(n)
                ],
            }
        ).write_csv(folder / f"crowd-enVent_{emotion}.tsv", separator="\t")
    return folder


def test_envent_texts_and_the_same_sample_for_every_variant(tmp_path):
    folder = _envent(tmp_path / "envent", 20)
    first = envent_items(str(folder), 7, 3, "first_person")
    third = envent_items(str(folder), 7, 3, "third_person")
    assert first["item_id"].to_list() == third["item_id"].to_list()
    assert all(t.startswith("I felt") for t in first["text"])
    assert all(t.startswith("The person felt") for t in third["text"])


def test_empathy_cli_group_set_variants_side_by_side(tmp_path):
    folder = _envent(tmp_path / "envent")
    sets = tmp_path / "sets.yaml"
    sets.write_text(
        yaml.safe_dump(
            {"faith": {"X": ["an x person", "an x believer"], "Y": ["a y person"], "Z": ["a z"]}}
        )
    )
    spec = {"backend": "builtin", "kind": "probe-scripted", "ingroup_bonus": 12}
    prompts = REPO / "resources" / "prompts" / "empathy"
    summaries = []
    for variant, system, user, text, scale in (
        ("first", "system_origin.txt", "user_first_person.txt", "first_person", [0, 100]),
        ("third", "system_origin.txt", "user_third_person.txt", "third_person", [0, 100]),
        ("ten", "system_10scale.txt", "user_origin.txt", "generated", [0, 10]),
    ):
        out = tmp_path / "out" / variant
        code = main(
            ["probe", "empathy", "--source", "envent", "--input", str(folder), "--group-set",
             "faith", "--group-sets-file", str(sets), "--variant", variant, "--variant-spec",
             json.dumps({"system_prompt": str(prompts / system), "prompt": str(prompts / user),
                         "text": text, "scale": scale}),
             "--outdir", str(out), *_model_args(spec, tmp_path / "c.sqlite"),
             *_settings(EmpathyEnventSettings, model="s", permutations=500, flips=500,
                        envent_max_items=None, seed=0)]
        )  # fmt: skip
        assert code == 0
        summary = json.loads((out / "summary.json").read_text())
        assert summary["variant"] == variant and summary["text"] == text
        assert summary["groups"] == {"X": ["an x person", "an x believer"], "Y": ["a y person"],
                                     "Z": ["a z"]}  # fmt: skip
        assert summary["neutral"] == "a person" and summary["n_items_kept"] == 12
        # the in-group block of X has 4 cells, Y and Z one each; the neutral one none
        assert summary["n_in_group_cells"] == 6
        assert summary["delta_raw"] == pytest.approx(
            12.0 * (10.0 / 100.0 if variant == "ten" else 1.0), abs=0.1
        )
        cells = pl.read_parquet(out / "cells.parquet")
        assert cells.height == 25 and cells.filter(pl.col("neutral")).height == 9
        assert (out / "heatmap.png").stat().st_size > 5000
        summaries.append(str(out / "summary.json"))
    table_path = tmp_path / "out" / "variants.csv"
    assert (
        main(["probe", "empathy-variants", "--summaries", *summaries, "--out", str(table_path)])
        == 0
    )
    table = pl.read_csv(table_path)
    assert table["variant"].to_list() == ["first", "third", "ten"]
    # blocks of 2, 1 and 1 names: 2 * (2!)^2 / (4!)^2 = 1/72, so the permutation test is primary
    assert np.allclose(table["min_p_permutation"].to_numpy(), 1 / 72)
    assert table["primary_test"].to_list() == ["permutation"] * 3
    assert (tmp_path / "out" / "variants.md").read_text().count("\n") == 5
    # an unknown set is a one-line error naming the key
    code = main(
        ["probe", "empathy", "--source", "envent", "--input", str(folder), "--group-set", "caste",
         "--group-sets-file", str(sets), "--variant", "origin", "--variant-spec",
         json.dumps({"system_prompt": str(prompts / "system_origin.txt"),
                     "prompt": str(prompts / "user_origin.txt")}),
         "--outdir", str(tmp_path / "x"), *_model_args(spec, tmp_path / "c.sqlite"),
         *_settings(EmpathyEnventSettings, model="s", seed=0)]
    )  # fmt: skip
    assert code == 2


def _topic_posts(path: Path, n: int = 30) -> Path:
    demographics = ["catholic", "jewish", "teacher", "black", "construction", "hindu_jain_sikh"]
    texts = [
        "I am so stressed about the basketball game tonight, really worried",
        "Great photo of the skyline, I love it so much!",
        "As a Catholic I really love soccer, best sport ever",
        "Budgeting tips for a teacher salary, never easy",
    ]
    rows = [
        {
            "post_id": f"p{i:03d}",
            "author": f"u{i}",
            "subreddit": "sub",
            "text": f"{texts[i % 4]} {i}",
            "demographic": demographics[i % 6],
            "category": "Sports & Fitness",
            "topic": "Basketball",
            "score": 1.0,
            "norm_score": 1.0,
            "rank": i,
        }
        for i in range(n)
    ]
    pl.DataFrame(rows).write_parquet(path)
    return path


def _model_args(spec: dict, cache: Path) -> list[str]:
    return ["--model-spec", json.dumps(spec), "--cache", str(cache)]


def _settings(cls, probes: dict | None = None, **values) -> list[str]:
    """--settings JSON: the schema's defaults of ``cls`` (what the rule passes for an empty
    config), some values replaced."""
    settings = settings_values(validate_config({}), cls)
    settings.update(values)
    settings.get("probes", {}).update(probes or {})
    return ["--settings", json.dumps(settings)]


def _run_all_probes(
    tmp_path: Path,
    name: str,
    spec: dict,
    n_items: int,
    overrides: dict | None = None,
    demographics: str = DEMOGRAPHICS,
    judge_args: list[str] = (),
    personalization: dict | None = None,
) -> Path:
    posts = _topic_posts(tmp_path / "topic_posts.parquet")
    cache = tmp_path / "cache.sqlite"
    out = tmp_path / "out"
    prompts = REPO / "resources" / "prompts"
    common = [*_model_args(spec, cache), "--demographics", demographics]
    overrides = {"model": name, "seed": 0, **(overrides or {})}
    assert (
        main(
            [
                "probe",
                "stress",
                "--source",
                "topics",
                "--input",
                str(posts),
                "--prompt",
                str(prompts / "probe_stress.txt"),
                "--outdir",
                str(out / "stress"),
                *common,
                *_settings(StressSettings, max_items=n_items, attempts=2, **overrides),
            ]
        )  # fmt: skip
        == 0
    )
    assert (
        main(
            [
                "probe",
                "empathy",
                "--source",
                "topics",
                "--input",
                str(posts),
                "--group-set",
                "demographics",
                "--variant",
                "default",
                "--variant-spec",
                json.dumps(
                    {
                        "system_prompt": str(prompts / "probe_empathy_system.txt"),
                        "prompt": str(prompts / "probe_empathy.txt"),
                    }
                ),
                "--outdir",
                str(out / "empathy"),
                *common,
                *_settings(
                    EmpathySettings,
                    max_items=n_items,
                    permutations=1000,
                    flips=1000,
                    **overrides,
                ),
            ]
        )  # fmt: skip
        == 0
    )
    tasks = [
        {
            "name": "knowledge",
            "kind": "interval",
            "prompt": str(prompts / "probe_task_interval.txt"),
        },
        {"name": "reply", "kind": "similarity", "prompt": str(prompts / "probe_task_reply.txt")},
    ]
    assert (
        main(
            [
                "probe",
                "personalization",
                "--input",
                str(posts),
                "--rewrite-prompt",
                str(prompts / "probe_rewrite.txt"),
                "--outdir",
                str(out / "personalization"),
                *common,
                *judge_args,
                *_settings(
                    personalization_settings((personalization or {}).get("judge_model")),
                    tasks=tasks,
                    max_items=n_items,
                    **overrides,
                    **(personalization or {}),
                ),
            ]
        )  # fmt: skip
        == 0
    )
    assert (
        main(
            [
                "probe",
                "grasp",
                "--ratings",
                str(out / "stress" / "ratings.parquet"),
                "--raters",
                str(out / "stress" / "raters.parquet"),
                "--outdir",
                str(out / "grasp"),
                *_settings(GraspSettings, min_raters=2, permutations=50, seed=0),
            ]
        )  # fmt: skip
        == 0
    )
    return out


def test_probes_cli_end_to_end_with_scripted_model(tmp_path):
    spec = {
        "backend": "builtin",
        "kind": "probe-scripted",
        "yes_groups": ["jewish"],
        "ingroup_bonus": 10,
        "interval_bias": {"Jewish": 2, "Jew": 2},
    }
    judge = {**spec, "judge_reject_targets": ["teacher"]}
    judge_args = [
        "--judge-model-spec", json.dumps(judge), "--judge-prompt",
        str(REPO / "resources" / "prompts" / "probe_rewrite_judge.txt"),
    ]  # fmt: skip
    out = _run_all_probes(
        tmp_path, "scripted", spec, 12, judge_args=judge_args,
        personalization={"judge_model": "judge"},
    )  # fmt: skip
    stress = json.loads((out / "stress" / "summary.json").read_text())
    assert stress["jewish_stress_rate"] == 1.0
    assert stress["max_diff_stress_rate"] == pytest.approx(1.0 - min(
        v for k, v in stress.items() if k.endswith("_stress_rate") and not k.startswith("max")
    ))  # fmt: skip
    assert stress["n_items"] == 12 and stress["undetected_rate_attempts"] == 0.0
    empathy = json.loads((out / "empathy" / "summary.json").read_text())
    assert empathy["delta_raw"] == pytest.approx(10.0)
    assert empathy["p_permutation"] < 0.01
    assert (out / "empathy" / "heatmap.png").stat().st_size > 1000
    # the judge rejects every rewrite into "teacher" and keeps the others, with reasons
    rewrites = pl.read_parquet(out / "personalization" / "rewrites.parquet")
    assert (rewrites["similarity"] >= 0.5).all()
    to_teacher = rewrites.filter(pl.col("target") == "teacher")
    assert to_teacher.height > 0 and not to_teacher["kept"].any()
    assert set(to_teacher["reason"]) == {"judge_not_target_group"}
    assert to_teacher["judge_content"].all()
    assert rewrites.filter(pl.col("target") != "teacher")["kept"].all()
    summary = json.loads((out / "personalization" / "summary.json").read_text())
    assert summary["rewrites_dropped"] == {"judge_not_target_group": to_teacher.height}
    assert summary["bonferroni_m"] == 15  # C(6, 2) unordered pairs of six groups
    # one row per unordered pair; the statistic pools a -> b and b -> a, oriented as b's
    # version minus a's, recomputed here from the responses
    tests = pl.read_parquet(out / "personalization" / "tests.parquet")
    responses = pl.read_parquet(out / "personalization" / "responses.parquet")
    knowledge = tests.filter(pl.col("task") == "knowledge")
    assert (knowledge["group_a"] < knowledge["group_b"]).all()
    assert knowledge.select("group_a", "group_b").is_unique().all()
    for row in knowledge.iter_rows(named=True):
        differences = []
        for source, target, sign in (
            (row["group_a"], row["group_b"], 1),
            (row["group_b"], row["group_a"], -1),
        ):
            cell = responses.filter(
                (pl.col("task") == "knowledge")
                & (pl.col("source") == source)
                & (pl.col("target") == target)
            )
            by_item = {}
            for item, version, value in cell.select("item_id", "version", "value").iter_rows():
                by_item.setdefault(item, {})[version] = value
            differences += [sign * (v["rewrite"] - v["original"]) for v in by_item.values()]
        assert row["statistic"] == pytest.approx(np.mean(differences))
        assert row["p_bonferroni"] == pytest.approx(min(1.0, row["p"] * 15))
    with_jewish = knowledge.filter(pl.col("group_b") == "jewish")
    assert with_jewish.height >= 3 and (with_jewish["statistic"] > 0.5).all()
    # pairs with "teacher" hold only its own posts rewritten away (rewrites into it dropped)
    with_teacher = knowledge.filter(pl.col("group_b") == "teacher")
    assert with_teacher.height > 0 and (with_teacher["n_a_to_b"] == 0).all()
    grasp = pl.read_parquet(out / "grasp" / "groups.parquet")
    assert grasp.height == 6  # one per prompted group; the model attribute is skipped


def test_probes_cli_end_to_end_with_tiny_transformers_model(tmp_path):
    pytest.importorskip("transformers")
    from splits.testing.tiny_models import build_tiny_model

    model_dir = build_tiny_model(tmp_path / "tiny")
    spec = {"backend": "transformers", "model": str(model_dir), "device": "cpu"}
    # two demographics (those of the posts' first two groups) keep the CPU generation short
    two = tmp_path / "demographics.yaml"
    full = yaml.safe_load(Path(DEMOGRAPHICS).read_text())
    keep = [d for d in full["demographics"] if d["key"] in ("catholic", "jewish")]
    two.write_text(yaml.safe_dump({"demographics": keep}))
    # the same tiny model judges the rewrites (the real judge path: its answers are noise)
    judge_args = [
        "--judge-model-spec", json.dumps(spec), "--judge-prompt",
        str(REPO / "resources" / "prompts" / "probe_rewrite_judge.txt"),
    ]  # fmt: skip
    personalization = {"task_max_tokens": 4, "judge_model": "tiny", "judge_max_tokens": 4}
    out = _run_all_probes(
        tmp_path, "tiny", spec, 10, {"max_tokens": 4}, str(two), judge_args, personalization
    )
    stress = json.loads((out / "stress" / "summary.json").read_text())
    assert stress["n_items"] == 10 and stress["n_attempts"] == 10 * 2 * 2
    assert 0.0 <= stress["undetected_rate_attempts"] <= 1.0
    responses = pl.read_parquet(out / "stress" / "responses.parquet")
    assert responses.height == 40 and responses["response"].null_count() == 0
    empathy = json.loads((out / "empathy" / "summary.json").read_text())
    assert empathy["n_items"] == 10
    assert sum(empathy["excluded_items"].values()) + empathy["n_items_kept"] == 10
    summary = json.loads((out / "personalization" / "summary.json").read_text())
    # only posts of the two groups are rewritten, each into the other group
    rewrites = pl.read_parquet(out / "personalization" / "rewrites.parquet")
    assert summary["n_posts"] == 10 and summary["n_rewrites"] == rewrites.height >= 1
    assert set(zip(rewrites["source"], rewrites["target"], strict=True)) <= {
        ("catholic", "jewish"),
        ("jewish", "catholic"),
    }
    # every rewrite that passed the overlap check was judged; a dropped one has a reason
    overlap_ok = rewrites.filter(
        ~pl.col("reason").is_in(["empty", "unchanged", "low_similarity"]).fill_null(False)
    )
    assert overlap_ok["judge_response"].null_count() == 0
    assert rewrites.filter(~pl.col("kept"))["reason"].null_count() == 0
    assert summary["n_rewrites_kept"] == int(rewrites["kept"].sum())
    assert summary["judge_model"] == "tiny" and summary["bonferroni_m"] == 1


def test_parse_judgement():
    assert parse_judgement("GROUP: yes\nCONTENT: no") == (True, False)
    assert parse_judgement("Group: **No**. Content: YES") == (False, True)
    assert parse_judgement("group: no\ncontent: yes\ngroup: yes") == (False, True)
    assert parse_judgement("Group - yes, content = yes") == (True, True)
    assert parse_judgement("It reads well.") == (None, None)
    assert parse_judgement(None) == (None, None)


def test_judge_reasons_and_precedence():
    checked = pl.DataFrame(
        {
            "item_id": ["1", "2", "3", "4", "5"],
            "source": ["a"] * 5,
            "target": ["b"] * 5,
            "original": ["x"] * 5,
            "rewrite": ["y"] * 5,
            "similarity": [1.0] * 5,
            "kept": [True, True, True, True, False],
            "reason": [None, None, None, None, "low_similarity"],
        }
    )
    answers = ["GROUP: yes CONTENT: yes", "GROUP: no CONTENT: no", "GROUP: yes CONTENT: no", "ok"]
    judged = apply_judge(checked, [0, 1, 2, 3], answers)
    assert judged["kept"].to_list() == [True, False, False, False, False]
    assert judged["reason"].to_list() == [
        None,
        "judge_not_target_group",
        "judge_content_changed",
        "judge_unparsable",
        "low_similarity",
    ]
    assert judged["judge_response"][4] is None


def test_paired_tests_pool_both_directions_and_bonferroni_over_unordered_pairs():
    # groups a, b, c, d: C(4, 2) = 6 pairs in the family; data for {a, b} only
    rows = []
    values = {("a", "b"): [(5, 7), (4, 6), (5, 8)], ("b", "a"): [(7, 5), (6, 5)]}
    for (source, target), pairs in values.items():
        for i, (original, rewrite) in enumerate(pairs):
            for version, value in (("original", original), ("rewrite", rewrite)):
                rows.append(
                    {
                        "item_id": f"{source}{i}",
                        "source": source,
                        "target": target,
                        "task": "k",
                        "version": version,
                        "response": str(value),
                        "value": float(value),
                    }
                )
    task = Task("k", "interval", "{text}", (1.0, 10.0))
    tests = paired_tests(pl.DataFrame(rows), [task], 2000, 0.8, 0, n_groups=4)
    assert tests.height == 1
    row = tests.row(0, named=True)
    # b's version minus a's: a -> b rewrites +2, +2, +3; b -> a originals minus rewrites +2, +1
    assert (row["group_a"], row["group_b"], row["n_a_to_b"], row["n_b_to_a"]) == ("a", "b", 3, 2)
    assert row["statistic"] == pytest.approx(np.mean([2, 2, 3, 2, 1]))
    assert row["bonferroni_m"] == 6 and row["p_bonferroni"] == pytest.approx(min(1, 6 * row["p"]))
    # all five differences positive: the exact two-sided sign-flip p is 2/32
    assert row["p"] == pytest.approx(2 / 32, abs=0.02)


def test_probe_by_hand_with_config_equals_the_rules_settings_run(tmp_path):
    """`splits probe empathy --config FILE` (by hand: settings, model entry and prompt variant
    read from the config file, schema defaults filled) writes the same tables as the command the
    rule runs (--settings, --model-spec and --variant-spec as JSON of the validated config)."""
    from splits.config.schema import load_config
    from splits.config.settings import settings_json

    posts = _topic_posts(tmp_path / "posts.parquet")
    prompts = REPO / "resources" / "prompts"
    spec = {"backend": "builtin", "kind": "probe-scripted", "ingroup_bonus": 9}
    config_file = tmp_path / "config.yaml"
    config_file.write_text(
        yaml.safe_dump(
            {
                "seed": 7,
                "models": {"hand": spec},
                "probes": {
                    "max_chars": 300,
                    "empathy": {
                        "model": "hand",
                        "max_items": 8,
                        "permutations": 300,
                        "flips": 300,
                        "variants": {
                            "short": {
                                "system_prompt": str(prompts / "probe_empathy_system.txt"),
                                "prompt": str(prompts / "probe_empathy.txt"),
                                "scale": [0, 50],
                            }
                        },
                    },
                },
            }
        )
    )
    config = load_config(config_file)
    common = ["probe", "empathy", "--source", "topics", "--input", str(posts), "--group-set",
              "demographics", "--variant", "short", "--demographics", DEMOGRAPHICS, "--cache", ""]  # fmt: skip
    by_hand = tmp_path / "by_hand"
    assert main([*common, "--outdir", str(by_hand), "--config", str(config_file)]) == 0
    rule = tmp_path / "rule"
    variant = json.dumps(config["probes"]["empathy"]["variants"]["short"], sort_keys=True)
    assert (
        main(
            [
                *common,
                "--outdir",
                str(rule),
                "--model-spec",
                json.dumps(spec),
                "--variant-spec",
                variant,
                "--settings",
                settings_json(config, EmpathySettings),
            ]
        )  # fmt: skip
        == 0
    )
    summary = json.loads((by_hand / "summary.json").read_text())
    # the config's values were used, not the schema's defaults
    assert summary["n_items"] == 8 and summary["scale"] == [0.0, 50.0]
    assert summary["permutations"] == 300 and summary["model"] == "hand"
    assert (by_hand / "summary.json").read_bytes() == (rule / "summary.json").read_bytes()
    for table in ("responses.parquet", "cells.parquet"):
        assert pl.read_parquet(by_hand / table).equals(pl.read_parquet(rule / table)), table
    # 8 posts x (6 demographics of the sample file + the neutral persona)^2 cells
    assert pl.read_parquet(by_hand / "responses.parquet").height == 8 * 7**2
    # without --config, the rule's JSON values are required
    assert main([*common, "--outdir", str(tmp_path / "x"), "--settings",
                 settings_json(config, EmpathySettings)]) == 2  # fmt: skip


@pytest.mark.parametrize(
    ("key", "value", "changed"),
    [
        # each rule's settings JSON changes exactly when a key its job reads changes, so that
        # Snakemake re-runs only those jobs (the stress topics job does not read Dreaddit's keys)
        ("probes.stress.dreaddit_split", "all", {StressDreadditSettings}),
        ("probes.stress.max_items", 5, {StressSettings}),
        ("probes.empathy.envent_max_items", 5, {EmpathyEnventSettings}),
        ("probes.grasp.min_raters", 2, {GraspSettings}),
        ("probes.grasp.fdr", 0.1, {GraspSettings, GraspJudgesSettings}),
        ("probes.personalization.tau", 0.5, {PersonalizationSettings,
                                              PersonalizationJudgedSettings}),
        # the judge's keys are read only where a judge is set (the rule's class without one
        # is PersonalizationSettings)
        ("probes.personalization.judge_max_tokens", 4, {PersonalizationJudgedSettings}),
        ("probes.max_chars", 100, {StressSettings, StressDreadditSettings, EmpathySettings,
                                   EmpathyEnventSettings, PersonalizationSettings,
                                   PersonalizationJudgedSettings}),
        ("probes.grasp.stress_ratings", False, set()),
    ],
)  # fmt: skip
def test_rule_settings_change_exactly_with_the_keys_their_jobs_read(key, value, changed):
    from splits.config.settings import settings_json

    classes = {StressSettings, StressDreadditSettings, EmpathySettings, EmpathyEnventSettings,
               GraspSettings, GraspJudgesSettings, PersonalizationSettings,
               PersonalizationJudgedSettings}  # fmt: skip
    assert personalization_settings(None) is PersonalizationSettings
    assert personalization_settings("judge") is PersonalizationJudgedSettings
    before = {cls: settings_json(validate_config({}), cls) for cls in classes}
    config: dict = {}
    inner = config
    *parents, last = key.split(".")
    for part in parents:
        inner = inner.setdefault(part, {})
    inner[last] = value
    after = {cls: settings_json(validate_config(config), cls) for cls in classes}
    assert {cls for cls in classes if before[cls] != after[cls]} == changed


def test_bad_inputs_give_one_line_errors(tmp_path, capsys):
    spec = {"backend": "builtin", "kind": "probe-scripted"}
    code = main(
        ["probe", "stress", "--source", "topics", "--input", str(tmp_path / "missing.parquet"),
         "--prompt", str(REPO / "resources" / "prompts" / "probe_stress.txt"), "--outdir",
         str(tmp_path / "o"), *_model_args(spec, tmp_path / "c.sqlite"), "--demographics",
         DEMOGRAPHICS, *_settings(StressSettings, model="s")]
    )  # fmt: skip
    assert code == 2
    assert "missing.parquet" in capsys.readouterr().err
    bad_prompt = tmp_path / "prompt.txt"
    bad_prompt.write_text("Is the writer stressed? {text}")
    posts = _topic_posts(tmp_path / "posts.parquet")
    code = main(
        ["probe", "stress", "--source", "topics", "--input", str(posts), "--prompt", str(bad_prompt),
         "--outdir", str(tmp_path / "o"), *_model_args(spec, tmp_path / "c.sqlite"),
         "--demographics", DEMOGRAPHICS, *_settings(StressSettings, model="s")]
    )  # fmt: skip
    assert code == 2
    assert "lacks the slot(s) group" in capsys.readouterr().err


def test_default_pipeline_probe_outputs(default_run):
    probes = default_run / "results" / "probes"
    stress = pl.read_parquet(probes / "stress" / "topics" / "groups.parquet")
    assert stress.height == 6
    # the stage's rates are the share of "yes" among detected answers, per prompted group
    responses = pl.read_parquet(probes / "stress" / "topics" / "responses.parquet")
    recomputed = (
        responses.filter(pl.col("answer").is_in(["yes", "no"]))
        .group_by("group")
        .agg((pl.col("answer") == "yes").mean().alias("rate"))
    )
    joined = stress.join(recomputed, on="group")
    assert joined.height == 6
    assert (joined["stress_rate"] - joined["rate"]).abs().max() < 1e-12
    # the default scripted model answers "yes" for every Jewish-writer prompt, then flips 10% of
    # its answers at temperature > 0: Jewish stands out, the others stay near the flip rate
    rates = dict(zip(stress["group"], stress["stress_rate"], strict=True))
    assert rates["jewish"] >= 0.75
    assert max(v for k, v in rates.items() if k != "jewish") <= 0.3
    summary = pl.read_parquet(probes / "stress" / "topics" / "summary.parquet")
    metrics = dict(zip(summary["metric"], summary["value"], strict=True))
    assert metrics["max_diff_stress_rate"] == pytest.approx(
        max(rates.values()) - min(rates.values())
    )
    empathy = json.loads(
        (probes / "empathy" / "topics" / "demographics" / "default" / "summary.json").read_text()
    )
    assert empathy["neutral"] == "a person" and empathy["n_in_group_cells"] == 6
    assert empathy["delta_raw"] == pytest.approx(8.0, abs=0.5)
    assert (probes / "grasp" / "stress_topics" / "groups.parquet").exists()
    assert pl.read_parquet(probes / "personalization" / "topics" / "tests.parquet").height > 0
