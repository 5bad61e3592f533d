"""Self-ID phrase matching, verifiers, curves, thresholds and the formula table (docs/method.md §2.5)."""

from __future__ import annotations

import csv
import dataclasses
import json
import random
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers import users_table
from splits.config.definitions import Demographic, load_demographics
from splits.config.settings import schema_defaults
from splits.demographics.curves import (
    _hinge_fit,
    auto_threshold,
    selfid_curve,
    summarise_users,
    user_counts,
)
from splits.demographics.phrases import PhraseSet, find_phrases
from splits.demographics.selfid import compare_formulas, resolve_threshold, roc_auc
from splits.demographics.settings import SelfidSettings
from splits.demographics.verify import parse_verdict, verify_llm, verify_rules
from splits.errors import ConfigError
from splits.llm import Backend, Completion, load_model, register_builtin

CATHOLIC = PhraseSet.from_lists(
    ["I'm Catholic", "I am a Catholic", "I'm a Roman Catholic", "As a Catholic", "I teach"],
    ["I'm not Catholic", "I'm Jewish", "I'm a Baptist"],
)


def posts_frame(texts: list[str]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "post_id": [f"p{i}" for i in range(len(texts))],
            "author": [f"u{i % 7}" for i in range(len(texts))],
            "text": texts,
        }
    )


def python_reference(texts: list[str], phrases: PhraseSet) -> list[tuple]:
    alternatives = [
        r"[ \t\xa0]+".join(re.escape(w).replace("'", "['’‘ʼ]") for w in p.split(" "))
        for p in sorted(phrases.kinds, key=lambda p: (-len(p), p))
    ]
    pattern = re.compile(r"\b(?:" + "|".join(alternatives) + r")\b", re.IGNORECASE)
    return [
        (f"p{i}", m.start(), m.end(), m.group(0))
        for i, text in enumerate(texts)
        for m in pattern.finditer(text)
    ]


def found_rows(texts: list[str], phrases: PhraseSet = CATHOLIC) -> list[tuple]:
    found = find_phrases(posts_frame(texts), phrases, context_chars=20)
    return list(found.select("post_id", "start", "end", "match").iter_rows())


# --------------------------------------------------------------------------- matching


def test_apostrophes_punctuation_and_word_boundaries():
    texts = [
        "i’m catholic, and proud",  # curly apostrophe, comma after
        "I'm Catholicism-curious",  # no boundary after "catholic"
        "I'M CATHOLIC",  # case
        "I‘m  catholic.",  # other apostrophe, two spaces
        "xI'm catholic",  # no boundary before
        "Honestly I'm a Roman Catholic!",  # longest phrase wins
        "I'm Catholic I'm Catholic",  # two occurrences
        "I teach; I teacher; teach",  # only the first is a phrase occurrence
        "🙂 I'm Jewish 🙂 as a catholic",  # astral characters before: offsets in characters
        "nothing to see",
        "",
        "a\x00b I'm catholic",  # NUL in the text
        "Im Catholic, I m Catholic",  # no apostrophe: no match
    ]
    rows = found_rows(texts)
    assert rows == python_reference(texts, CATHOLIC)
    by_post: dict[str, list[str]] = {}
    for pid, start, end, match in rows:
        assert texts[int(pid[1:])][start:end] == match
        by_post.setdefault(pid, []).append(match)
    assert by_post["p0"] == ["i’m catholic"]
    assert "p1" not in by_post and "p4" not in by_post and "p12" not in by_post
    assert by_post["p3"] == ["I‘m  catholic"]
    assert by_post["p5"] == ["I'm a Roman Catholic"]
    assert by_post["p6"] == ["I'm Catholic", "I'm Catholic"]
    assert by_post["p7"] == ["I teach"]
    assert by_post["p8"] == ["I'm Jewish", "as a catholic"]
    found = find_phrases(posts_frame(texts), CATHOLIC, context_chars=5)
    assert found.filter(pl.col("post_id") == "p0")["phrase"].to_list() == ["i'm catholic"]
    assert found.filter(pl.col("post_id") == "p8")["kind"].to_list() == ["anti", "self"]
    row = found.filter(pl.col("post_id") == "p5").row(0, named=True)
    assert row["left_context"] == "stly " and row["right_context"] == "!"
    assert row["context"] == "stly I'm a Roman Catholic!"


def test_phrase_set_validation():
    with pytest.raises(ConfigError, match="both self-ID and anti-self-ID"):
        PhraseSet.from_lists(["I'm Catholic"], ["i’m  CATHOLIC"])
    with pytest.raises(ConfigError, match="no self-ID"):
        PhraseSet.from_lists([], [])
    collapsed = PhraseSet.from_lists(["I am an atheist", "I am an Atheist"], [])
    assert list(collapsed.kinds) == ["i am an atheist"]


def test_phrase_matching_equals_python_re_on_real_text(reference_dir):
    """Dreaddit posts, as they are and with paper phrases (of every demographic) inserted at
    random places with random case and apostrophe variants and neighbouring characters."""
    frames = [
        pl.read_csv(reference_dir / "realdata" / "dreaddit" / name, infer_schema_length=0)
        for name in ("dreaddit-train.csv", "dreaddit-test.csv")
    ]
    texts = [t for f in frames for t in f["text"].to_list()]
    demographics = load_demographics(reference_dir / "splits-upstream" / "demographics.json")
    self_phrases = [p for d in demographics for p in d.self_id_phrases]
    anti_phrases = [p for d in demographics for p in d.anti_self_id_phrases]
    everything = PhraseSet.from_lists(
        sorted(set(self_phrases) - {p for p in anti_phrases}),
        [],
    )
    rng = random.Random(4)
    glue_before = ["", " ", "x", "(", '"', "\n", "'", "é", "-"]
    glue_after = ["", " ", "s", ",", ".", "?", "ism", "-curious", "’", "_", "1"]
    mixed = []
    for text in texts[:3000]:
        for _ in range(rng.randint(1, 3)):
            phrase = rng.choice(self_phrases)
            phrase = phrase.replace("'", rng.choice(["'", "’", "‘", "ʼ"]))
            phrase = "".join(c.upper() if rng.random() < 0.2 else c for c in phrase)
            at = rng.randint(0, len(text))
            text = text[:at] + rng.choice(glue_before) + phrase + rng.choice(glue_after) + text[at:]
        mixed.append(text)
    all_texts = texts + mixed
    rows = found_rows(all_texts, everything)
    reference = python_reference(all_texts, everything)
    print(f"{len(reference)} occurrences in {len(all_texts)} real texts")
    assert len(reference) > 1000
    assert rows == reference


# --------------------------------------------------------------------------- rule verifier

# (text, is a sincere self-claim); the first phrase occurrence of each text is verified
LABELLED = [
    # plain statements
    ("I'm Catholic and I go to mass every Sunday.", True),
    ("As a Catholic, I find this thread interesting.", True),
    ("Honestly I'm a Roman Catholic, born and raised.", True),
    ("I teach 7th grade science at a public school.", True),
    ("Well, I'm Jewish, so Hanukkah is a big deal for us.", True),
    ("lol I'm Catholic too", True),
    ("I'm a Baptist from Georgia and we do potlucks.", True),
    ("For what it's worth I'm not Catholic but I like the architecture.", True),
    ("I am a Catholic. Ask me anything.", True),
    ("As a Catholic, what do you think about the new pope?", True),
    ("I teach, so summers are free for me.", True),
    ("My wife is Protestant and I'm Catholic, it works fine.", True),
    ("I'm Catholic - it's complicated.", True),
    ("Yes. I'm Jewish. Why does that matter?", True),
    # quotes
    ('My mom always says "I\'m Catholic" when people ask.', False),
    ("The sign said 'I'm Catholic' in big letters.", False),
    ("He wrote “I'm a Roman Catholic and proud” on his profile.", False),
    ('"I\'m Jewish," she announced at dinner.', False),
    ("The song goes 'I teach the world to sing' or something.", False),
    # reported speech
    ("My friend told me that I'm Catholic because I was baptized.", False),
    ("Everyone says I'm Jewish because of my last name.", False),
    ("She was like, I'm a Baptist now, deal with it.", False),
    ("He claimed I'm Catholic just to win the argument.", False),
    # questions
    ("So I'm Catholic?", False),
    ("Wait, I'm Jewish? Since when?", False),
    ("Does it matter that I'm Catholic?", False),
    ("Why would anyone assume I'm a Baptist?", False),
    ("Am I weird if I teach?", False),
    # negations
    ("I don't think I'm Catholic anymore.", False),
    ("I wouldn't say I'm Catholic really.", False),
    ("It's not like I'm Jewish or anything.", False),
    ("I never said I'm a Baptist.", False),
    ("I can't say I'm Catholic in good conscience.", False),
    # hypotheticals
    ("If I'm Catholic, does that mean I can't eat meat?", False),
    ("Even if I'm Jewish by blood, I don't practice.", False),
    ("Imagine I'm a Baptist preacher on TV.", False),
    ("Suppose I teach a class on this, what would you include?", False),
    ("Let's pretend I'm Catholic for a second.", False),
    # sarcasm
    ("Oh yeah, totally, I'm Catholic. /s", False),
    ("Yeah right, I'm Jewish and I own the banks.", False),
    ("Sure, I'm a Baptist, just kidding.", False),
    ("I'm Catholic lol jk", False),
    ("Obviously I'm Jewish, everyone knows that. /s", False),
    ("I teach quantum physics to cats /s", False),
    # harder cases (the rules are expected to miss some of these)
    ("If you ask me, I'm Catholic through and through.", True),
    ("I teach, if that matters.", True),
    ("lol yes I'm Catholic, why?", True),
    ("I was raised that way but I'm not Catholic anymore.", True),
    ("I'm not saying I'm Catholic, but the cathedral was stunning.", False),
    ("When people ask, I say I'm Catholic.", True),  # first-person reported speech
    ("Nobody believes me when I tell them I'm Jewish.", True),
    # added after the rules were last changed (not tuned on)
    ("My dad is Catholic and I'm Catholic too, obviously.", True),
    ("Not gonna lie, I'm Catholic and I love Lent.", True),
    ("Me? I'm a Baptist.", True),
    ("Can confirm, I'm Jewish.", True),
    ("You think I'm Catholic? Ha.", False),
    ("I'm Catholic (well, technically).", True),
]


def test_rule_verifier_on_hand_labelled_contexts():
    assert len(LABELLED) >= 40
    texts = [t for t, _ in LABELLED]
    found = find_phrases(posts_frame(texts), CATHOLIC, context_chars=150)
    first = found.group_by("post_id", maintain_order=True).first()
    assert first.height == len(LABELLED)  # every text has an occurrence
    verified = verify_rules(first)
    expected = [label for _, label in LABELLED]
    got = verified["verified"].to_list()
    accuracy = float(np.mean([g == e for g, e in zip(got, expected, strict=True)]))
    print(f"rule verifier accuracy on {len(LABELLED)} hand-labelled contexts: {accuracy:.3f}")
    for (text, label), reason, ok in zip(LABELLED, verified["reason"], got, strict=True):
        if ok != label:
            print(f"  wrong ({reason}): {text}")
    assert accuracy >= 0.9
    # reasons are the documented vocabulary
    assert set(verified["reason"]) <= {
        "quoted",
        "reported_speech",
        "sarcasm",
        "hypothetical",
        "negated",
        "question",
        "statement",
    }


def test_rule_verifier_on_no_matches_is_empty():
    empty = find_phrases(posts_frame(["nothing"]), CATHOLIC, 150)
    out = verify_rules(empty)
    assert out.height == 0 and {"reason", "verified"} <= set(out.columns)


# --------------------------------------------------------------------------- LLM verifier


class OracleVerifier(Backend):
    """Answers like a careful annotator for the test: YES unless the context looks quoted;
    an unusable answer for contexts containing 'garble'."""

    def __init__(self, name, spec):
        self.name = name

    def identity(self):
        return {"backend": "builtin", "kind": "selfid_test_oracle"}

    def generate(self, requests):
        out = []
        for r in requests:
            context = r.payload["context"]
            text = "hmm" if "garble" in context else ("NO" if '"' in context else "Yes.")
            assert "<<" in r.messages[0]["content"] and "Catholic" in r.messages[0]["content"]
            out.append(Completion(text, "stop", 10, 1, 0.0))
        return out


register_builtin("selfid_test_oracle")(OracleVerifier)


def test_parse_verdict():
    assert parse_verdict("YES") is True
    assert parse_verdict("  no, it is quoted") is False
    assert parse_verdict("Answer: Yes") is True
    assert parse_verdict("yesterday I ...") is None
    assert parse_verdict("") is None
    assert parse_verdict(None) is None


def test_llm_verifier_through_the_llm_layer(tmp_path, repo_root):
    texts = ["I'm Catholic.", 'she says "I\'m Catholic"', "garble I'm Catholic", "As a Catholic"]
    found = find_phrases(posts_frame(texts), CATHOLIC, 150)
    registry = {"oracle": {"backend": "builtin", "kind": "selfid_test_oracle"}}
    model = load_model("oracle", registry, cache_path=tmp_path / "cache.sqlite")
    template = (repo_root / "resources" / "prompts" / "selfid_verify.txt").read_text()
    demographic = Demographic("catholic", "Catholic", ("x",), ("I'm Catholic",), ())
    out, undetected = verify_llm(found, demographic, model, template)
    assert out["verified"].to_list() == [True, False, False, True]
    assert out["reason"].to_list() == ["llm_yes", "llm_no", "llm_undetected", "llm_yes"]
    assert undetected == 1
    for slot in ("{demographic}", "{phrase}", "{context}"):
        assert slot in template


def test_llm_verifier_with_a_tiny_transformers_model(tmp_path, repo_root):
    """A real (random-weight) causal LM through the transformers backend: its answers are
    noise, so what is checked is the plumbing: one answer per match, undetected counted."""
    pytest.importorskip("transformers")
    from splits.testing.tiny_models import build_tiny_model

    path = build_tiny_model(tmp_path / "tiny")
    registry = {"tiny": {"backend": "transformers", "model": str(path), "device": "cpu"}}
    model = load_model("tiny", registry, cache_path=tmp_path / "cache.sqlite")
    template = (repo_root / "resources" / "prompts" / "selfid_verify.txt").read_text()
    demographic = Demographic("catholic", "Catholic", ("x",), ("I'm Catholic",), ())
    found = find_phrases(posts_frame(["I'm Catholic.", "so I'm Jewish?"]), CATHOLIC, 150)
    try:
        out, undetected = verify_llm(found, demographic, model, template)
    finally:
        model.close()
    assert out.height == 2
    reasons = out["reason"].to_list()
    assert set(reasons) <= {"llm_yes", "llm_no", "llm_undetected"}
    assert undetected == reasons.count("llm_undetected")
    assert out["verified"].to_list() == [r == "llm_yes" for r in reasons]


# --------------------------------------------------------------------------- curves


def test_curve_rates_are_occurrences_per_post_and_empty_bins_stay():
    users = pl.DataFrame(
        {
            "author": ["a", "b", "c", "d"],
            "percentile": [0.0, 0.0, 52.0, 99.0],
            "n_posts": [10, 30, 5, 40],
        }
    )
    matches = pl.DataFrame(
        {
            "author": ["a", "a", "b", "c", "d", "d", "d"],
            "kind": ["self", "anti", "anti", "self", "self", "self", "anti"],
            "verified": [True, True, True, False, True, True, True],
        }
    )
    per_user = user_counts(users, matches)
    assert per_user.sort("author")["n_self"].to_list() == [1, 0, 0, 2]
    curve = selfid_curve(per_user, bins=20)
    assert curve.height == 20
    first = curve.row(0, named=True)
    # (occurrences / users) / (posts / users)
    assert first["n_users"] == 2 and first["mean_posts_per_user"] == 20
    assert first["self_rate"] == pytest.approx((1 / 2) / 20)
    assert first["anti_rate"] == pytest.approx((2 / 2) / 20)
    assert curve.row(10, named=True)["self_rate"] == 0  # c: its occurrence is not verified
    last = curve.row(19, named=True)
    assert last["self_rate"] == pytest.approx(2 / 40) and last["anti_rate"] == pytest.approx(1 / 40)
    assert (
        curve.row(5, named=True)["n_users"] == 0 and curve.row(5, named=True)["self_rate"] is None
    )


def synthetic_curve(rates: list[float], posts: list[int] | None = None) -> pl.DataFrame:
    bins = len(rates)
    posts = posts or [1000] * bins
    return pl.DataFrame(
        {
            "bin": list(range(bins)),
            "n_posts": posts,
            "percentile_lo": [100 * i / bins for i in range(bins)],
            "percentile_hi": [100 * (i + 1) / bins for i in range(bins)],
            "self_rate": rates,
        }
    )


@pytest.mark.parametrize("change", [50, 75, 80, 90])
def test_auto_threshold_on_steps_and_ramps(change):
    rng = np.random.default_rng(change)
    x = np.arange(20) * 5 + 2.5
    floor = 0.001 + rng.normal(0, 0.0002, 20)
    step = np.where(x > change, 0.03, 0.0) + floor
    ramp = np.where(x > change, 0.002 * (x - change), 0.0) + floor
    assert auto_threshold(synthetic_curve(step.tolist())) == change
    assert abs(auto_threshold(synthetic_curve(ramp.tolist())) - change) <= 5
    # empty bins (tied users) are skipped
    posts = [0 if 3 <= i < 8 else 1000 for i in range(20)]
    assert auto_threshold(synthetic_curve(step.tolist(), posts)) == change


def loop_hinge_breakpoint(lo, hi, rate, posts, min_bins_each_side=2):
    """The hinge fit written as the method states it, one breakpoint at a time: a weighted
    mean below, a weighted least-squares line (numpy's lstsq) from the breakpoint on."""
    x, w = (lo + hi) / 2.0, posts / posts.sum()

    def constant(y, v):
        return float((v * (y - np.average(y, weights=v)) ** 2).sum()) if v.sum() > 0 else 0.0

    def line(x, y, v):
        if len(x) <= 2:
            return 0.0
        design = np.column_stack([np.ones_like(x), x]) * np.sqrt(v)[:, None]
        coef = np.linalg.lstsq(design, y * np.sqrt(v), rcond=None)[0]
        return float((v * (y - coef[0] - coef[1] * x) ** 2).sum())

    best = None
    for i in range(min_bins_each_side, len(x) - min_bins_each_side + 1):
        sse = constant(rate[:i], w[:i]) + line(x[i:], rate[i:], w[i:])
        if best is None or sse < best[0] - 1e-15:
            best = (sse, float(lo[i]))
    return best


def test_hinge_fit_equals_the_loop_of_least_squares_fits():
    """All breakpoints at once (curves._hinge_fit) against a fit per breakpoint with lstsq:
    the same breakpoint and error on noisy steps, ramps, flat and tied curves, empty bins."""
    rng = np.random.default_rng(7)
    checked = 0
    for trial in range(300):
        bins = int(rng.integers(4, 21))
        lo = np.arange(bins) * (100 / bins)
        hi = lo + 100 / bins
        change = int(rng.integers(1, bins))
        kind = trial % 4
        if kind == 0:  # a step
            rate = np.where(np.arange(bins) >= change, 0.03, 0.001) + rng.normal(0, 2e-4, bins)
        elif kind == 1:  # a ramp
            rate = 0.001 + 0.002 * np.clip(np.arange(bins) - change, 0, None)
        elif kind == 2:  # flat: every breakpoint ties
            rate = np.full(bins, 0.004)
        else:  # counts of a small demographic
            rate = rng.poisson(2, bins) / 1000
        posts = rng.integers(1, 5000, bins).astype(float)
        got = _hinge_fit(lo, hi, rate, posts, 2)
        expected = loop_hinge_breakpoint(lo, hi, rate, posts)
        if expected is None:
            assert got is None
            continue
        assert got[0] == expected[1], (trial, got, expected)
        assert got[1] == pytest.approx(expected[0], rel=1e-9, abs=1e-18)
        checked += 1
    assert checked > 250


def test_auto_threshold_needs_enough_bins_and_falls_back():
    assert auto_threshold(synthetic_curve([0.0, 0.1, 0.2], [10, 10, 10])) is None
    auto = Demographic("d", "D", ("x",), ("a",), (), threshold="auto")
    fixed = Demographic("d", "D", ("x",), ("a",), (), threshold=90)
    flat = synthetic_curve([0.0] * 20).with_columns(pl.lit(0).alias("self_occurrences"))
    assert resolve_threshold(auto, flat) == {
        "threshold": 75.0,
        "source": "auto_fallback",
        "auto_threshold": None,
    }
    step = synthetic_curve([0.0] * 16 + [0.05] * 4).with_columns(
        pl.lit(3).alias("self_occurrences")
    )
    assert resolve_threshold(auto, step)["threshold"] == 80.0
    assert resolve_threshold(fixed, step) == {
        "threshold": 90.0,
        "source": "fixed",
        "auto_threshold": 80.0,
    }


def test_roc_auc_against_pair_counting():
    rng = np.random.default_rng(3)
    scores = rng.integers(0, 6, 80).astype(float)
    labels = rng.random(80) < 0.4
    pos, neg = scores[labels], scores[~labels]
    pairs = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))
    assert roc_auc(scores, labels) == pytest.approx(pairs)
    assert roc_auc(scores, np.zeros(80, bool)) is None


def test_compare_formulas_rows():
    rng = np.random.default_rng(5)
    n = 400
    g = rng.random(n) * 10
    per_user = pl.DataFrame(
        {
            "author": [f"u{i}" for i in range(n)],
            "n_posts": rng.integers(1, 50, n),
            "g_sum_log": g,
            "g_breadth_x_volume": -g,  # the reverse order: separates the wrong way
            "g_entropy": rng.random(n),
            "n_self": np.where(g > 8, rng.integers(0, 3, n), 0),
            "n_anti": np.where(g <= 7, rng.integers(0, 2, n), 0),
        }
    )
    scores = ["g_sum_log", "g_breadth_x_volume", "g_entropy"]
    summary = summarise_users([per_user.with_columns(percentile=0.0)], 20, scores)
    table = compare_formulas(summary, 75.0, "demo")
    rows = {r["formula"]: r for r in table.iter_rows(named=True)}
    assert rows["sum_log"]["auc_self_vs_anti"] == 1.0
    assert rows["breadth_x_volume"]["auc_self_vs_anti"] == 0.0
    assert 0.3 < rows["entropy"]["auc_self_vs_anti"] < 0.7
    assert rows["sum_log"]["anti_rate_above_per_1k"] == 0.0
    assert rows["sum_log"]["self_id_users_above_share"] == 1.0
    assert rows["breadth_x_volume"]["self_rate_above_per_1k"] == 0.0
    above = per_user.filter(pl.col("g_sum_log").rank("min") - 1 >= 0.75 * n)
    assert rows["sum_log"]["users_above"] == above.height
    assert rows["sum_log"]["self_rate_above_per_1k"] == pytest.approx(
        1000 * above["n_self"].sum() / above["n_posts"].sum()
    )


# --------------------------------------------------------------------------- CLI


def _search_cli(tmp_path: Path, demo_file: Path, verifier_args: list[str], **settings) -> int:
    """``splits selfid search`` with the schema's settings, ``settings`` replaced."""
    from splits.cli import main

    chosen = schema_defaults(SelfidSettings, **settings)
    settings_args = ["--settings", json.dumps(dataclasses.asdict(chosen))]

    out = tmp_path / "out"
    return main(
        [
            "selfid",
            "search",
            "--users",
            str(tmp_path / "users.parquet"),
            "--posts",
            str(tmp_path / "posts.parquet"),
            "--demographics",
            str(demo_file),
            "--demographic",
            "catholic",
            *verifier_args,
            "--out-matches",
            str(out / "m.parquet"),
            "--out-curve",
            str(out / "c.parquet"),
            "--out-threshold",
            str(out / "t.json"),
            "--out-comparison",
            str(out / "cmp.parquet"),
            "--out-plot",
            str(out / "plot.png"),
            *([] if "--config" in verifier_args else settings_args),
        ]
    )


def test_search_and_summary_cli(tmp_path):
    from splits.cli import main

    rng = np.random.default_rng(0)
    n = 200
    g = np.sort(rng.random(n) * 5)
    authors = [f"u{i:03d}" for i in range(n)]
    users = users_table(authors, g, "catholic")
    users.write_parquet(tmp_path / "users.parquet")
    texts, post_authors = [], []
    for i, a in enumerate(authors):
        for j in range(10):
            member = i >= 150
            say = (j == 0) and (member or i % 10 == 0)
            texts.append(
                ("Well I'm Catholic. " if member else "Honestly I'm Jewish. ") if say else "chat"
            )
            post_authors.append(a)
    pl.DataFrame(
        {"post_id": [f"p{i:05d}" for i in range(len(texts))], "author": post_authors, "text": texts}
    ).write_parquet(tmp_path / "posts.parquet")
    demo_file = tmp_path / "demo.json"
    demo_file.write_text(
        json.dumps(
            {
                "catholic": {
                    "seed_set": ["Catholicism"],
                    "self_id_phrases": ["I'm Catholic"],
                    "anti_self_id_phrases": ["I'm Jewish"],
                }
            }
        )
    )
    assert _search_cli(tmp_path, demo_file, []) == 0
    threshold = json.loads((tmp_path / "out" / "t.json").read_text())
    assert threshold["threshold"] == 75.0 and threshold["source"] == "auto"
    assert threshold["verified_self"] == 50 and threshold["verified_anti"] == 15
    assert (tmp_path / "out" / "plot.png").read_bytes()[:4] == b"\x89PNG"
    first = (tmp_path / "out" / "m.parquet").read_bytes()
    assert _search_cli(tmp_path, demo_file, []) == 0
    assert (tmp_path / "out" / "m.parquet").read_bytes() == first
    # the llm verifier without a model is a config error (exit code 2)
    assert _search_cli(tmp_path, demo_file, [], verifier="llm") == 2
    # ... and with a registry model it runs through the LLM layer and its cache
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("{demographic} {phrase} {context}")
    llm_args = [
        "--verifier-model",
        "oracle",
        "--models-json",
        json.dumps({"oracle": {"backend": "builtin", "kind": "selfid_test_oracle"}}),
        "--prompt",
        str(prompt),
        "--llm-cache",
        str(tmp_path / "cache.sqlite"),
    ]
    assert _search_cli(tmp_path, demo_file, llm_args, verifier="llm") == 0
    by_llm = json.loads((tmp_path / "out" / "t.json").read_text())
    assert by_llm["verifier"] == "llm" and by_llm["undetected"] == 0
    assert by_llm["verified_self"] == 50 and by_llm["verified_anti"] == 15
    assert (tmp_path / "cache.sqlite").exists()
    # by hand, a config file gives the same settings and the verifier's model and prompt
    by_flags = (tmp_path / "out" / "m.parquet").read_bytes()
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps(
            {
                "demographics": {
                    "verifier": "llm",
                    "verifier_model": "oracle",
                    "verifier_prompt": str(prompt),
                },
                "models": {"oracle": {"backend": "builtin", "kind": "selfid_test_oracle"}},
            }
        )
    )
    by_hand = _search_cli(
        tmp_path,
        demo_file,
        ["--llm-cache", str(tmp_path / "cache.sqlite"), "--config", str(config)],
    )
    assert by_hand == 0
    assert (tmp_path / "out" / "m.parquet").read_bytes() == by_flags
    assert json.loads((tmp_path / "out" / "t.json").read_text())["verifier"] == "llm"
    summary = tmp_path / "summary"
    assert (
        main(
            [
                "selfid",
                "summary",
                "--thresholds",
                str(tmp_path / "out" / "t.json"),
                "--comparisons",
                str(tmp_path / "out" / "cmp.parquet"),
                "--out-thresholds",
                str(summary / "thresholds.json"),
                "--out-csv",
                str(summary / "cmp.csv"),
                "--out-md",
                str(summary / "cmp.md"),
            ]
        )
        == 0
    )
    written = json.loads((summary / "thresholds.json").read_text())
    assert written["catholic"] == 75.0 and set(written) == {"catholic", "breakpoint_support"}
    support = written["breakpoint_support"]["catholic"]
    assert support["source"] == by_llm["source"] and support["permutations"] == 999
    assert support["supported"] is True  # members (top 25%) say it, others rarely
    with open(summary / "cmp.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["formula"] for r in rows] == ["breadth_x_volume", "entropy", "sum_log"]
    md = (summary / "cmp.md").read_text()
    assert "| demographic | formula |" in md and md.count("| catholic |") == 3
    # the pipeline's plots: drawn by the summary from each search's curve and threshold, the
    # same PNG, byte for byte, as the search's own --out-plot of that curve
    summary_args = [
        "selfid", "summary", "--thresholds", str(tmp_path / "out" / "t.json"),
        "--comparisons", str(tmp_path / "out" / "cmp.parquet"),
        "--out-thresholds", str(summary / "thresholds.json"),
        "--out-csv", str(summary / "cmp.csv"), "--out-md", str(summary / "cmp.md"),
    ]  # fmt: skip
    plots = ["--out-plots", str(summary / "catholic.png")]
    curves = ["--curves", str(tmp_path / "out" / "c.parquet")]
    assert main([*summary_args, *curves, "--demographics", str(demo_file), *plots]) == 0
    searched = (tmp_path / "out" / "plot.png").read_bytes()
    assert (summary / "catholic.png").read_bytes() == searched
    # a plot without its curve or the demographics file, or curves without plots: a config
    # error (exit code 2)
    assert main([*summary_args, "--demographics", str(demo_file), *plots]) == 2
    assert main([*summary_args, *curves, *plots]) == 2
    assert main([*summary_args, *curves, "--demographics", str(demo_file)]) == 2


def _synthetic_users(rate, n: int = 2000, levels: int | None = None, seed: int = 0):
    """Users with posts and verified self-IDs drawn at ``rate(percentile)`` per post;
    ``levels``: only that many distinct percentiles (tied group-ness)."""
    rng = np.random.default_rng(seed)
    if levels:
        percentile = rng.choice(np.linspace(0, 95, levels), n)
    else:
        percentile = rng.random(n) * 100
    posts = rng.integers(5, 40, n)
    selfs = rng.binomial(posts, rate(percentile))
    return pl.DataFrame(
        {
            "author": [f"u{i}" for i in range(n)],
            "percentile": percentile,
            "n_posts": posts,
            "n_self": selfs,
            "n_anti": np.zeros(n, dtype=int),
        }
    )


def test_breakpoint_support_tells_a_planted_change_point_from_none():
    from splits.demographics.curves import breakpoint_support

    planted = _synthetic_users(lambda p: np.where(p >= 80, 0.03, 0.002))
    assert auto_threshold(selfid_curve(planted, 20)) == 80.0
    strong = breakpoint_support(summarise_users([planted], 20), 80.0, seed=1)
    assert strong["supported"] and strong["permutation_p"] <= 0.01
    assert strong["bootstrap_agreement"] >= 0.9
    assert strong["self_rate_above_per_1k"] > 10 * strong["self_rate_below_per_1k"]
    # seeded; the users in batches give the same sums, so the same draws
    batches = [planted.slice(i, 333) for i in range(0, planted.height, 333)]
    assert breakpoint_support(summarise_users(batches, 20), 80.0, seed=1) == strong
    # no change point, 7 non-empty bins (tied users): auto still returns a value ...
    for seed in range(3):
        flat = _synthetic_users(lambda p: np.full_like(p, 0.003), levels=7, seed=seed)
        curve = selfid_curve(flat, 20)
        assert curve.filter(pl.col("n_posts") > 0).height == 7
        found = auto_threshold(curve)
        assert found is not None
        # ... but its support says it is not there
        weak = breakpoint_support(summarise_users([flat], 20), found, seed=1)
        assert not weak["supported"] and weak["permutation_p"] > 0.05, (seed, weak)


def test_weak_auto_threshold_is_warned(caplog):
    from splits.demographics.selfid import _support

    flat = _synthetic_users(lambda p: np.full_like(p, 0.003), levels=7)
    found = auto_threshold(selfid_curve(flat, 20))
    chosen = {"threshold": found, "source": "auto", "auto_threshold": found}
    with caplog.at_level("WARNING", logger="splits.demographics.selfid"):
        support = _support("nobody", summarise_users([flat], 20), chosen)
    assert not support["supported"]
    (record,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert "nobody" in record.getMessage() and "weakly supported" in record.getMessage()
    # a fixed threshold is reported, not warned about
    caplog.clear()
    with caplog.at_level("WARNING", logger="splits.demographics.selfid"):
        fixed = {**chosen, "source": "fixed", "threshold": 90.0}
        _support("nobody", summarise_users([flat], 20), fixed)
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


# --------------------------------------------------------------------------- unsupported curves


def _curve_corpus(tmp_path: Path, says) -> Path:
    """400 users at percentiles 0, 0.25, ..., 99.75 with 10 posts each; user i says "I'm
    Catholic" in ``says(i)`` of its posts. Writes users, posts and a demographics file."""
    n = 400
    g = np.arange(n) / n * 5
    authors = [f"u{i:03d}" for i in range(n)]
    users_table(authors, g, "catholic").write_parquet(tmp_path / "users.parquet")
    texts, post_authors = [], []
    for i, a in enumerate(authors):
        for j in range(10):
            texts.append("Well I'm Catholic. " if j < says(i) else "chat")
            post_authors.append(a)
    pl.DataFrame(
        {"post_id": [f"p{i:05d}" for i in range(len(texts))], "author": post_authors, "text": texts}
    ).write_parquet(tmp_path / "posts.parquet")
    demo_file = tmp_path / "demo.yaml"
    demo_file.write_text(
        "demographics:\n- key: catholic\n  display_name: Catholic\n  threshold: auto\n"
        '  seed_subreddits: [Catholicism]\n  self_id_phrases: ["I\'m Catholic"]\n'
        '  anti_self_id_phrases: ["I\'m Jewish"]\n'
    )
    return demo_file


def test_backwards_selfid_curve_stops_with_one_line_naming_the_ways_on(tmp_path, capsys):
    """A self-ID rate that FALLS with group-ness (users low in group-ness say it more): the auto
    threshold is not supported; the search stops with one line naming the demographic, the rates
    below and above, a fixed threshold and the opt-in key; with the opt-in it runs, the threshold
    file says so and the summary writes a run-health finding."""
    from splits.cli import main
    from splits.io import read_json

    # 1 in 10 users below percentile 50 says it twice, 1 in 20 above says it once
    demo = _curve_corpus(
        tmp_path, lambda i: (2 if i % 10 == 0 else 0) if i < 200 else (i % 20 == 0)
    )
    assert _search_cli(tmp_path, demo, []) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    line = err[0]
    assert "'catholic'" in line and "not supported" in line
    assert "below" in line and "above" in line and str(demo) in line
    assert "demographics.accept_unsupported_thresholds: true" in line
    assert not (tmp_path / "out" / "t.json").exists()
    # the rates in the line are the planted ones (per 1,000 posts, below and above)
    assert _search_cli(tmp_path, demo, [], accept_unsupported_thresholds=True) == 0
    threshold = read_json(tmp_path / "out" / "t.json")
    cut = threshold["threshold"]
    below = sum(2 for i in range(400) if i * 100 / 400 < cut and i < 200 and i % 10 == 0)
    below += sum(1 for i in range(200, 400) if i * 100 / 400 < cut and i % 20 == 0)
    above = sum(1 for i in range(200, 400) if i * 100 / 400 >= cut and i % 20 == 0)
    above += sum(2 for i in range(200) if i * 100 / 400 >= cut and i % 10 == 0)
    n_below = sum(10 for i in range(400) if i * 100 / 400 < cut)
    support = threshold["support"]
    assert support["self_rate_below_per_1k"] == round(1000 * below / n_below, 4)
    assert support["self_rate_above_per_1k"] == round(1000 * above / (4000 - n_below), 4)
    assert f"{support['self_rate_below_per_1k']:g} below" in line
    assert threshold["accepted_unsupported"] is True and threshold["support"]["supported"] is False
    summary = tmp_path / "summary"
    argv = ["selfid", "summary", "--thresholds", str(tmp_path / "out" / "t.json")]
    argv += ["--comparisons", str(tmp_path / "out" / "cmp.parquet")]
    argv += ["--out-thresholds", str(summary / "t.json"), "--out-csv", str(summary / "c.csv")]
    argv += ["--out-md", str(summary / "c.md"), "--health", str(summary / "health.json")]
    assert main(argv) == 0
    (finding,) = read_json(summary / "health.json")
    assert finding["code"] == "selfid_unsupported_threshold" and "catholic" in finding["subject"]


def test_too_few_selfids_stop_and_a_fixed_threshold_is_the_way_on(tmp_path, capsys):
    """6 verified self-IDs in all, all from members: a curve too thin to read (the issue's third
    group); a fixed threshold in the demographics file runs without a finding."""
    demo = _curve_corpus(tmp_path, lambda i: 1 if i in (380, 385, 390, 395, 396, 399) else 0)
    assert _search_cli(tmp_path, demo, []) == 2
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and "only 6 verified self-IDs" in line
    demo.write_text(demo.read_text().replace("threshold: auto", "threshold: 90"))
    assert _search_cli(tmp_path, demo, []) == 0


def test_unsupported_plot_says_so_beside_the_threshold(tmp_path, monkeypatch):
    from matplotlib.axes import Axes
    from splits.demographics.selfid import plot_curve

    labels = []
    original = Axes.axvline

    def spy(self, x=0, *args, **kwargs):
        labels.append(kwargs.get("label"))
        return original(self, x, *args, **kwargs)

    monkeypatch.setattr(Axes, "axvline", spy)
    curve = selfid_curve(_synthetic_users(lambda p: np.full_like(p, 0.003)), 20)
    plot_curve(curve, 65.0, "Catholic", "auto", tmp_path / "a.png", unsupported=True)
    plot_curve(curve, 65.0, "Catholic", "auto", tmp_path / "b.png")
    assert labels == ["threshold 65 (auto, unsupported)", "threshold 65 (auto)"]


# --------------------------------------------------------------------------- visitors

# Every match of VISIT_PHRASES in the real r/Cornell ConvoKit corpus, labelled by reading its
# context (utterance id -> True when the author states, as a fact about themselves, that they
# are or were a member of a school or its programme: a student, alum or resident of a dorm;
# False for visits, places, events, activities and phrases used of something else). The texts
# stay in ../shared/reference; only ids and labels are here.
VISIT_PHRASES = [
    "I'm at", "I am at", "I go to", "I attend", "I'm a freshman", "I'm a sophomore",
    "I'm a junior", "I'm a senior", "I graduated", "as a student", "I'm a student",
    "I am a student", "I'm an alum", "I'm visiting", "I was at", "I'm in",
]  # fmt: skip
CORNELL_LABELS = {
    "4eycta": False, "4lzpjz": False, "4xujj2": True, "57qqhb": True, "c2i9rw0": True,
    "c2lwzaa": False, "c2n8w6m": False, "c700x6d": False, "c9urncv": True, "cknu9aq": True,
    "clwl2r8": True, "clwmi14": True, "cp69zpg": False, "cpxb28f": True, "cpxgj5u": True,
    "cqtv56s": False, "cqtvskx": True, "cxutr3s": False, "czum5bf": True, "d0pv6zv": False,
    "d1oafx3": True, "d1ojfq7": True, "d1ooynd": True, "d1ptqzq": True, "d6dab16": False,
    "d6diwzq": False, "d6dl85u": False, "d6e5rzp": False, "d6ikfww": True, "d6jbdjk": True,
    "d7247x6": False, "d8lwbdl": False, "d8u85eu": False, "d8urmab": True, "d8ustco": True,
    "d8vcl7j": False, "d8xaz0i": True, "dekpsnh": False, "df2p4du": False, "df3r1v6": True,
    "e0b1mka": True, "e0rcz21": True, "kk7hg": False,
}  # fmt: skip


def test_visitors_are_not_members_on_labelled_real_cornell_text(reference_dir):
    """The rule verifier against labels on every match in r/Cornell: the visits ("I'm in town
    looking at Cornell", "I'm visiting cornell this tuesday", "I was at a pledge party") are
    rejected as ``visit``; no labelled self-ID is lost. Before the visit rule: 40 verified, 23
    of them true (precision 0.575); with it 37 verified, 23 true (0.622), recall 23/23 both."""
    import json as _json

    path = reference_dir / "realdata" / "convokit_cornell" / "utterances.jsonl"
    rows = [_json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    posts = pl.DataFrame(
        {
            "post_id": [r["id"] for r in rows],
            "author": [r.get("speaker") or r.get("user") or "" for r in rows],
            "text": [r["text"] for r in rows],
        }
    )
    matches = verify_rules(find_phrases(posts.lazy(), PhraseSet.from_lists(VISIT_PHRASES, []), 150))
    assert sorted(matches["post_id"]) == sorted(CORNELL_LABELS)  # one match each
    verdict = dict(zip(matches["post_id"], matches["verified"], strict=True))
    reason = dict(zip(matches["post_id"], matches["reason"], strict=True))
    assert {i for i, r in reason.items() if r == "visit"} == {"4eycta", "kk7hg", "dekpsnh"}
    true_ids = {i for i, label in CORNELL_LABELS.items() if label}
    verified = {i for i, v in verdict.items() if v}
    assert true_ids <= verified  # recall 1.0
    precision = len(true_ids & verified) / len(verified)
    print(f"rule verifier on r/Cornell: {len(verified)} verified, precision {precision:.3f}")
    assert (len(verified), len(true_ids)) == (37, 23)


def test_visitor_phrases_of_the_issue():
    texts = [
        "I'm at Emory for the speech and debate tournament",  # the issue's visitor
        "I'm at Emory for a campus tour next week",
        "I'm at Emory this weekend, any food tips",
        "I'm at Emory for my PhD",
        "I'm at Emory for grad school",
        "I go to Emory and love it",
        "I graduated from Emory this weekend",  # past membership: never a visit
    ]
    phrases = PhraseSet.from_lists(["I'm at Emory", "I go to Emory", "I graduated from Emory"], [])
    found = verify_rules(find_phrases(posts_frame(texts), phrases, 150)).sort("post_id")
    assert found["reason"].to_list() == ["visit"] * 3 + ["statement"] * 4
