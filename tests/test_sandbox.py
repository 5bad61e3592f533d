"""The sandbox's query side without a browser: typed lexicons, the answer against the run's table
(the lift job's numbers and the triviality job's), session q against statsmodels' BH, the table
view's filters against filters written here, the HTML (highlights, hidden groups, no usernames),
and the command's one-line errors.

Oracles: ``results/hypotheses/lift.parquet`` of the default run, ``statsmodels.multipletests``,
the topic posts' author column (none may reach the page), hand-made texts."""

from __future__ import annotations

import dataclasses
import html
import shutil
import subprocess
import sys

import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st
from splits.config.settings import schema_defaults
from splits.hypotheses.engine import QueryError
from splits.hypotheses.lexicon import Limits, canonical_lexicon
from splits.hypotheses.settings import FileSettings
from splits.sandbox.query import (
    SORTS,
    STAGE_SIGNIFICANT,
    RunSettings,
    Sandbox,
    Session,
    nontrivial_stage,
)
from splits.sandbox.typed import format_lexicon, max_query_chars, parse_lexicon
from splits.sandbox.views import (
    MASKED_MENTION,
    answer_html,
    curve_figure,
    highlighted,
    posts_html,
    session_html,
)
from statsmodels.stats.multitest import multipletests

#: the schema's lexicon bounds (hypotheses.max_entries, max_phrase_tokens)
LIMITS = schema_defaults(FileSettings).limits

# --------------------------------------------------------------------------- typed lexicons


def test_parse_lexicon_words_and_quoted_phrases():
    assert parse_lexicon('finna, "on god"  y\'all; deadass', LIMITS) == [
        "finna",
        "on god",
        "y'all",
        "deadass",
    ]
    # typographic quotes, repeats (same tokens) kept once, newlines as separators
    assert parse_lexicon('“on god”\n"On God", finna FINNA', LIMITS) == ["on god", "finna"]
    assert parse_lexicon('"well, actually"', LIMITS) == ["well, actually"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the lexicon is empty"),
        ("  ,; \n", "the lexicon is empty"),
        (None, "the lexicon is empty"),
        ('finna, ":-)"', "has no letter or digit"),
        ("finna :-)", ":-) has no letter or digit"),
        ('"on god', "not closed"),
        ('"a b c d e f g"', "has 7 tokens"),
    ],
)
def test_parse_lexicon_bad_input_is_one_line(text, message):
    with pytest.raises(QueryError, match=message.replace(")", r"\)")) as err:
        parse_lexicon(text, Limits(max_entries=3, max_phrase_tokens=6))
    assert "\n" not in str(err.value)


def test_parse_lexicon_entry_limit():
    with pytest.raises(QueryError, match="4 entries; at most 3"):
        parse_lexicon("a b c d", Limits(max_entries=3, max_phrase_tokens=6))


entry = st.lists(
    st.text(alphabet="abcxyz019'-", min_size=1, max_size=6).filter(
        lambda w: any(c.isalnum() for c in w)
    ),
    min_size=1,
    max_size=3,
).map(" ".join)


@given(st.lists(entry, min_size=1, max_size=8))
def test_format_then_parse_gives_the_same_query(entries):
    assert canonical_lexicon(parse_lexicon(format_lexicon(entries), Limits(50, 32))) == (
        canonical_lexicon(entries)
    )


# --------------------------------------------------------------------------- the default run


@pytest.fixture(scope="module")
def run(default_run):
    return default_run


@pytest.fixture(scope="module")
def sandbox(run) -> Sandbox:
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(run)
        return Sandbox.from_run(run / "results", run / "config" / "config.yaml")


@pytest.fixture(scope="module")
def table(run) -> pl.DataFrame:
    return pl.read_parquet(run / "results" / "hypotheses" / "lift.parquet")


def _other(row: dict) -> str:
    return row["demographic_B"] if row["target"] == row["demographic_A"] else row["demographic_A"]


def test_answers_equal_the_run_table(sandbox, table):
    """For hypotheses of every source: the same n, hits, list, lift, interval, p, null band,
    matching posts, triviality and identity words covered as the lift and triviality jobs."""
    session = Session()
    firsts = table.unique("hypothesis_id", keep="first").sort("hypothesis_id")
    # the counting baseline's rows hold held-out numbers only (below)
    sources = sorted(set(firsts["source"]) - {"fighting-words"})
    chosen = pl.concat([firsts.filter(pl.col("source") == s).head(3) for s in sources])
    assert set(chosen["source"]) == {"planted", "null", "trivial", "theory"}
    for row in chosen.iter_rows(named=True):
        answer = sandbox.ask(
            format_lexicon(row["lexicon"]), row["topic"], row["target"], _other(row), session
        )
        job = table.filter(pl.col("hypothesis_id") == row["hypothesis_id"]).sort("k_fraction")
        mine = answer.result.rows
        for column in ("k_fraction", "n", "hits_at_n", "target_in_list", "list_size"):
            assert mine[column].to_list() == job[column].to_list(), column
        for column in (
            "lift",
            "lift_low",
            "lift_high",
            "p_value",
            "null_band_low",
            "null_band_high",
        ):
            assert mine[column].to_numpy() == pytest.approx(job[column].to_numpy(), rel=1e-12), (
                column
            )
        assert answer.result.matching_posts == job["matching_posts"][0]
        assert answer.result.triviality == pytest.approx(job["triviality"][0], rel=1e-9)
        assert answer.result.identity_words_covered == job["identity_words_covered"][0].to_list()
        assert (
            answer.run_rows is not None
            and answer.run_rows["hypothesis_id"][0] == row["hypothesis_id"]
        )
        assert not any("other numbers" in n for n in answer.notes)
    assert len(session.results) == chosen.height


def test_a_counting_baseline_lexicon_is_answered_with_a_note(sandbox, table):
    """The run has only held-out numbers for a Fighting Words lexicon: the sandbox answers with
    the whole pool's and says why they are not the run's."""
    row = table.filter(pl.col("source") == "fighting-words").row(0, named=True)
    answer = sandbox.ask(
        format_lexicon(row["lexicon"]), row["topic"], row["target"], _other(row), Session()
    )
    assert answer.run_rows["hypothesis_id"][0] == row["hypothesis_id"]
    assert answer.result.rows.height > 0
    assert any("held-out half only" in n for n in answer.notes)
    assert not any("other numbers" in n for n in answer.notes)


def test_session_q_is_bh_over_every_query_asked(sandbox, table):
    session = Session()
    rows = table.unique("hypothesis_id", keep="first").sort("hypothesis_id").head(6)
    answers = []
    for row in rows.iter_rows(named=True):
        answers.append(
            sandbox.ask(
                format_lexicon(row["lexicon"]), row["topic"], row["target"], _other(row), session
            )
        )
    p = np.concatenate([a.result.rows["p_value"].to_numpy() for a in answers])
    expected = multipletests(p, method="fdr_bh")[1]
    assert answers[-1].q == pytest.approx(expected[-answers[-1].q.size :], rel=1e-12)
    everything = np.concatenate(list(session.q().values()))
    assert everything == pytest.approx(expected, rel=1e-12)
    assert answers[-1].session_queries == 6 and answers[-1].session_tests == p.size
    # asking one again (spelled differently) replaces it: no extra test
    first = rows.row(0, named=True)
    again = sandbox.ask(
        format_lexicon(first["lexicon"]).upper(),
        first["topic"],
        first["target"],
        _other(first),
        session,
    )
    assert again.session_queries == 6 and again.session_tests == p.size


@pytest.mark.parametrize(
    ("lexicon", "topic", "target", "other", "message"),
    [
        ("", "Soccer", "black", "jewish", "the lexicon is empty"),
        ('"!!!"', "Soccer", "black", "jewish", "no letter or digit"),
        ("goal", "Curling", "black", "jewish", "unknown topic 'Curling'"),
        ("goal", "", "black", "jewish", "choose a topic"),
        ("goal", "Soccer", "black", "black", "must differ"),
        ("goal", "Soccer", "black", "martians", "unknown group 'martians'"),
        ("goal", "Soccer", None, "jewish", "choose the target group"),
    ],
)
def test_bad_queries_give_one_line(sandbox, lexicon, topic, target, other, message):
    session = Session()
    with pytest.raises(QueryError, match=message) as err:
        sandbox.ask(lexicon, topic, target, other, session)
    assert "\n" not in str(err.value)
    assert not session.results  # nothing counted for q


def test_a_changed_seed_is_flagged(run, table):
    """A query answered with other settings than the run's says so next to the numbers."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(run)
        base = Sandbox.from_run(run / "results", run / "config" / "config.yaml", "none")
    lift = base.settings.lift
    reseeded = RunSettings(
        dataclasses.replace(lift, seed=lift.seed + 1),
        base.settings.thresholds,
        base.settings.report_k,
        base.settings.limits,
    )
    from splits.hypotheses.engine import HypothesisEngine

    other = Sandbox(
        HypothesisEngine(run / "results" / "topics" / "topic_posts.parquet", reseeded.lift),
        reseeded,
        table,
    )
    flagged = 0
    # lists whose deeper k read past the matching posts, into the seeded random padding
    padded = table.filter(pl.col("matching_posts") < pl.col("n")).unique("hypothesis_id")
    for row in padded.sort("hypothesis_id").head(20).iter_rows(named=True):
        answer = other.ask(
            format_lexicon(row["lexicon"]), row["topic"], row["target"], _other(row), Session()
        )
        job = table.filter(pl.col("hypothesis_id") == row["hypothesis_id"]).sort("k_fraction")
        differs = answer.result.rows["hits_at_n"].to_list() != job["hits_at_n"].to_list()
        assert differs == any("other numbers" in n for n in answer.notes)
        flagged += differs
    assert flagged > 0  # the seed orders the padding: some lists change


def test_table_view_filters(sandbox, table):
    alpha = sandbox.settings.lift.alpha
    at = table.filter(pl.col("k_fraction") == 0.05)
    shown, total = sandbox.table_view(0.05, limit=10_000)
    assert total == at.height == shown.height
    shown, total = sandbox.table_view(0.05, STAGE_SIGNIFICANT, limit=10_000)
    assert total == at.filter(pl.col("q_value") < alpha).height
    for t in sandbox.settings.thresholds:
        _, total = sandbox.table_view(0.05, nontrivial_stage(t))
        assert total == at.filter((pl.col("q_value") < alpha) & (pl.col("triviality") < t)).height
    some = at.filter(pl.col("source") == "planted").sort("hypothesis_id").row(-1, named=True)
    topic, a, b = some["topic"], some["demographic_A"], some["demographic_B"]
    pair = f"{a} / {b}"
    assert pair in sandbox.choices()["pairs"]
    shown, total = sandbox.table_view(0.05, topic=topic, pair=pair, source="planted", limit=10_000)
    expected = at.filter(
        (pl.col("topic") == topic)
        & (pl.col("demographic_A") == a)
        & (pl.col("demographic_B") == b)
        & (pl.col("source") == "planted")
    )
    assert total == expected.height == 2  # one per target
    assert set(shown["hypothesis"]) == set(expected["hypothesis_id"])
    for sort, (column, descending) in SORTS.items():
        shown, _ = sandbox.table_view(0.05, sort=sort, limit=50)
        name = {"q_value": "q", "matching_posts": "matching posts"}.get(column, column)
        values = shown[name].to_numpy()
        assert (np.diff(values) <= 0).all() if descending else (np.diff(values) >= 0).all()
    shown, total = sandbox.table_view(0.05, limit=7)
    assert shown.height == 7 and total == at.height
    with pytest.raises(QueryError, match="unknown stage"):
        sandbox.table_view(0.05, "nontrivial_below_0.9")


def test_a_table_row_opens_as_the_same_query(sandbox, table):
    shown, _ = sandbox.table_view(0.05, source="theory", limit=3)
    for hypothesis_id in shown["hypothesis"]:
        lexicon, topic, target, other = sandbox.hypothesis(hypothesis_id)
        answer = sandbox.ask(lexicon, topic, target, other, Session())
        assert answer.run_rows["hypothesis_id"][0] == hypothesis_id
        job = table.filter(pl.col("hypothesis_id") == hypothesis_id).sort("k_fraction")
        assert answer.result.rows["lift"].to_numpy() == pytest.approx(job["lift"].to_numpy())
    with pytest.raises(QueryError, match="unknown hypothesis"):
        sandbox.hypothesis("nope")


# --------------------------------------------------------------------------- the page's HTML


def test_highlight_masks_mentions_and_escapes():
    text = "ask u/Some_User or /u/other-1 <b>on god</b> & finna"
    spans = [(text.index("on god"), text.index("on god") + 6), (text.index("finna"), len(text))]
    out = highlighted(text, spans)
    assert "Some_User" not in out and "other-1" not in out
    assert out.count(MASKED_MENTION) == 2
    assert "<mark>on god</mark>" in out and "<mark>finna</mark>" in out
    assert "&lt;b&gt;" in out and "<b>" not in out and "&amp;" in out
    assert html.unescape(out.replace("<mark>", "").replace("</mark>", "")) == (
        f"ask {MASKED_MENTION} or {MASKED_MENTION} <b>on god</b> & finna"
    )


def test_page_shows_numbers_hides_groups_and_never_an_author(run, sandbox, table):
    row = (
        table.filter((pl.col("source") == "planted") & (pl.col("k_fraction") == 0.05))
        .sort("q_value")
        .row(0, named=True)
    )
    session = Session()
    answer = sandbox.ask(
        format_lexicon(row["lexicon"]), row["topic"], row["target"], _other(row), session
    )
    page = answer_html(answer, sandbox.names, sandbox.settings)
    assert f'data-value="{row["lift"]!r}">{row["lift"]:.3f}<' in page
    hidden = posts_html(answer, sandbox.names, False)
    shown = posts_html(answer, sandbox.names, True)
    assert "group hidden" in hidden and "data-group=" not in hidden
    groups = answer.result.posts["group"].to_list()
    assert shown.count("data-group=") == len(groups) == sandbox.top_posts
    assert hidden.count("<mark>") > 0
    # planted markers: the top posts are the target's
    assert groups[:5] == [row["target"]] * 5
    authors = set(
        pl.read_parquet(run / "results" / "topics" / "topic_posts.parquet", columns=["author"])[
            "author"
        ].to_list()
    )
    everything = page + shown + session_html(session, sandbox.settings)
    words = set(html.unescape(everything).replace("<", " ").replace(">", " ").split())
    assert not words & authors
    figure = curve_figure(answer, sandbox.settings)
    assert len(figure.axes[0].lines) >= 1


# --------------------------------------------------------------------------- the command


def test_command_errors_are_one_line(tmp_path, run):
    proc = subprocess.run(
        [sys.executable, "-m", "splits.cli", "sandbox", "--results", str(tmp_path / "none")],
        cwd=run,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("splits sandbox: config error: ")
    assert "topic_posts.parquet does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "splits.cli", "sandbox", "--port", "70000"],
        cwd=run,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "--port: 70000 is not a port number" in proc.stderr


def test_each_pool_is_indexed_once(run, monkeypatch):
    import splits.hypotheses.engine as engine_module

    built = []
    original = engine_module.pool_index

    def counting(pool, retrieval, analyzer=None):
        built.append((pool.topic, pool.group_a, pool.group_b))
        return original(pool, retrieval, analyzer)

    monkeypatch.setattr(engine_module, "pool_index", counting)
    monkeypatch.chdir(run)
    sandbox = Sandbox.from_run(run / "results", run / "config" / "config.yaml", "none")
    session = Session()
    for lexicon in ("goal", '"free kick", pitch', "the"):
        sandbox.ask(lexicon, "Soccer", "black", "jewish", session)
    sandbox.ask("goal", "Soccer", "jewish", "black", session)  # the same pool, other target
    assert built == [("Soccer", "black", "jewish")]
    sandbox.ask("goal", "Gardening", "black", "jewish", session)
    assert len(built) == 2


def test_a_run_without_table_or_encoder_still_answers(run, tmp_path, monkeypatch):
    results = tmp_path / "results"
    (results / "topics").mkdir(parents=True)
    shutil.copy(run / "results" / "topics" / "topic_posts.parquet", results / "topics")
    monkeypatch.chdir(run)
    empty_model = tmp_path / "no-model"
    empty_model.mkdir()
    sandbox = Sandbox.from_run(results, run / "config" / "config.yaml", str(empty_model))
    assert any("No hypotheses table" in n for n in sandbox.notes)
    assert any("Triviality is not computed" in n and "cannot load" in n for n in sandbox.notes)
    answer = sandbox.ask("goal", "Soccer", "black", "jewish", Session())
    assert answer.result.rows.height == 5 and answer.result.triviality is None
    assert "Triviality: not computed" in answer_html(answer, sandbox.names, sandbox.settings)
    assert sandbox.table_view(0.05)[1] == 0 and sandbox.choices()["topics"] == []


# --------------------------------------------------------------------------- limits (issue 26)


def test_a_huge_query_is_refused_unread_and_not_echoed():
    """A 1 MB lexicon is refused with one short line (before: echoed back whole); an entry
    quoted back in a message is cut short."""
    limits = LIMITS
    for text in ("goal " * 200_000, "!" * 1_000_000):
        with pytest.raises(QueryError, match="characters; at most") as err:
            parse_lexicon(text, limits)
        assert len(str(err.value)) < 200 and str(max_query_chars(limits)) in str(err.value).replace(
            ",", ""
        )
    with pytest.raises(QueryError, match="no letter or digit") as err:
        parse_lexicon('"' + "!" * 5000 + '"', limits)
    assert len(str(err.value)) < 200


def test_lone_surrogates_and_control_characters_are_cleaned():
    assert parse_lexicon("goal\ud800, on\x00side, \x1b[31mred", LIMITS) == [
        "goal",
        "on",
        "side",
        "[31mred",
    ]
    with pytest.raises(QueryError, match="the lexicon is empty"):
        parse_lexicon("\udfff\x07\x85", LIMITS)


def test_a_surrogate_in_a_query_gives_an_answer_the_page_can_send(sandbox):
    """Before: a lone surrogate reached the answer, which could not be encoded for the page."""
    session = Session()
    answer = sandbox.ask("goal\ud800", "Soccer\x00", "black", "jewish", session)
    clean = sandbox.ask("goal", "Soccer", "black", "jewish", Session())
    assert answer.result.rows.equals(clean.result.rows)
    page = answer_html(answer, sandbox.names, sandbox.settings) + session_html(
        session, sandbox.settings
    )
    page.encode("utf-8")  # raises on a lone surrogate


def test_a_session_is_capped_and_a_repeated_query_still_fits(sandbox, monkeypatch):
    from splits.sandbox import query

    monkeypatch.setattr(query, "MAX_SESSION_QUERIES", 3)
    session = Session()
    for word in ("goal", "match", "team"):
        sandbox.ask(word, "Soccer", "black", "jewish", session)
    sandbox.ask("goal", "Soccer", "black", "jewish", session)  # the same test: replaced
    with pytest.raises(QueryError, match="reload the page to start a new session") as err:
        sandbox.ask("league", "Soccer", "black", "jewish", session)
    assert "\n" not in str(err.value)
    assert len(session.results) == 3


def test_sessions_expire_and_their_number_is_capped(sandbox, monkeypatch):
    """Each page's session is dropped SESSION_TTL_S after its last use and the server keeps at
    most MAX_SESSIONS of them (Gradio's state store)."""
    gr = pytest.importorskip("gradio")
    from splits.sandbox import app as sandbox_app
    from splits.sandbox.query import MAX_SESSIONS, SESSION_TTL_S

    seen = {}

    def fake_launch(self, **kwargs):
        seen["blocks"] = self
        seen["kwargs"] = kwargs

    monkeypatch.setattr(gr.Blocks, "launch", fake_launch)
    sandbox_app.launch(sandbox, "127.0.0.1", 7860, block=False)
    assert seen["kwargs"]["state_session_capacity"] == MAX_SESSIONS
    states = [b for b in seen["blocks"].blocks.values() if isinstance(b, gr.State)]
    sessions = [s for s in states if isinstance(s.value, Session)]
    assert sessions and all(s.time_to_live == SESSION_TTL_S for s in sessions)


def test_the_environment_is_written_at_the_entry_point_only(monkeypatch):
    """Gradio's analytics are switched off by the `splits` command (its entry point) before
    `splits sandbox` runs; the sandbox's library code writes no environment variable."""
    import os

    pytest.importorskip("gradio")
    from splits.cli import main
    from splits.sandbox.app import import_gradio

    monkeypatch.delenv("GRADIO_ANALYTICS_ENABLED", raising=False)
    before = dict(os.environ)
    import_gradio()
    assert dict(os.environ) == before
    assert main(["sandbox", "--port", "0"]) == 2  # refused before anything is served
    assert os.environ["GRADIO_ANALYTICS_ENABLED"] == "False"
