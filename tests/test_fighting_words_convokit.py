"""Fighting Words configured like ConvoKit by a config file (config/fighting_words_convokit.yaml)
against ConvoKit 5.0.0's own ``FightingWords`` with its defaults (its clean-text step, its
CountVectorizer, its uniform prior 0.1), on the real r/Cornell ConvoKit corpus; and
``splits fighting-words``, whose table must equal the Python function's, with one-line errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from splits.cli import main
from splits.config.schema import load_config
from splits.config.settings import schema_defaults, settings_from_config
from splits.errors import ConfigError
from splits.hypotheses.fighting_words import fighting_words_scores, fighting_words_table
from splits.hypotheses.settings import FightingWordsSection

REPO = Path(__file__).resolve().parents[1]
OVERLAY = REPO / "config" / "fighting_words_convokit.yaml"


@pytest.fixture(scope="module")
def cornell(reference_dir):
    """The r/Cornell corpus as ConvoKit loads it, split in two by time (the median timestamp)."""
    convokit = pytest.importorskip("convokit", reason="convokit (the convokit extra) is missing")
    corpus = convokit.Corpus(filename=str(reference_dir / "realdata" / "convokit_cornell"))
    median = float(np.median([u.timestamp for u in corpus.iter_utterances()]))
    early = [u.text for u in corpus.iter_utterances() if u.timestamp < median]
    late = [u.text for u in corpus.iter_utterances() if u.timestamp >= median]
    return convokit, corpus, median, early, late


def _convokit_z(convokit, corpus, median, max_features=None):
    """ConvoKit's FightingWords as shipped (no cv, no text_func: its defaults), or with its own
    default vectorizer's max_features lowered, to reach the max_features cut."""
    model = convokit.FightingWords()
    if max_features is not None:
        model.cv.set_params(max_features=max_features)
    model.fit(
        corpus,
        class1_func=lambda u: u.timestamp < median,
        class2_func=lambda u: u.timestamp >= median,
    )
    return model.get_ngram_zscores()["z-score"].to_dict()


def _overlay_section(**overrides) -> FightingWordsSection:
    section = settings_from_config(FightingWordsSection, load_config(OVERLAY))
    return dataclasses.replace(section, **overrides)


def _largest_gap(result, reference: dict[str, float]) -> float:
    assert set(result.terms) == set(reference)
    return max(abs(z - reference[t]) for t, z in zip(result.terms, result.z, strict=True))


def test_convokit_overlay_equals_convokit_on_real_posts(cornell):
    convokit, corpus, median, early, late = cornell
    theirs = _convokit_z(convokit, corpus, median)
    ours = fighting_words_scores(early, late, _overlay_section())
    assert len(ours.terms) > 500
    assert _largest_gap(ours, theirs) <= 1e-9
    # the corpus holds what the cleaning and the token pattern change: URLs become "url",
    # one-letter tokens are dropped and underscores kept inside a token
    assert "url" in ours.terms
    assert not any(len(t) == 1 for t in ours.terms)
    # and the project's defaults (its own words, no cleaning) are measurably not ConvoKit's
    defaults = schema_defaults(
        FightingWordsSection, prior="uniform", max_features=15000, min_df=10, max_df=0.5
    )
    plain = fighting_words_scores(early, late, defaults)
    shared = [(t, z) for t, z in zip(plain.terms, plain.z, strict=True) if t in theirs]
    assert set(plain.terms) != set(theirs)
    assert max(abs(z - theirs[t]) for t, z in shared) > 0.01


def test_convokit_ties_at_the_max_features_cut_match(cornell):
    """At a max_features cut inside a run of equal counts, scikit-learn keeps the n-grams its
    (unstable) argsort puts first: max_features_ties scikit-learn keeps the same ones; the
    project's alphabetical rule keeps others."""
    convokit, corpus, median, early, late = cornell
    cut = 300
    theirs = _convokit_z(convokit, corpus, median, max_features=cut)
    ours = fighting_words_scores(early, late, _overlay_section(max_features=cut))
    assert len(ours.terms) == cut
    assert _largest_gap(ours, theirs) <= 1e-9
    alphabetical = fighting_words_scores(
        early, late, _overlay_section(max_features=cut, max_features_ties="alphabetical")
    )
    assert set(alphabetical.terms) != set(theirs)  # the cut falls inside a tie


def test_overlay_is_a_complete_config_and_sets_convokits_values():
    section = _overlay_section()
    assert (section.text_cleaning, section.token_pattern) == ("convokit", r"(?u)\b\w\w+\b")
    assert (section.prior, section.uniform_prior, section.ngram_max) == ("uniform", 0.1, 3)
    assert (section.min_df, section.max_df, section.max_features) == (10, 0.5, 15000)
    assert section.max_features_ties == "scikit-learn"


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"token_pattern": "(a)(b)"}, "token_pattern: more than one group"),
        ({"token_pattern": "(unclosed"}, "token_pattern: not a regular expression"),
        ({"text_cleaning": "spacy"}, "text_cleaning"),
        ({"max_features_ties": "random"}, "max_features_ties"),
    ],
)
def test_bad_cleaning_settings_are_config_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        schema_defaults(FightingWordsSection, **overrides)


def test_tokenizer_follows_scikit_learns_token_pattern():
    sklearn_text = pytest.importorskip("sklearn.feature_extraction.text")
    text = "I can't   go_to https://x.org/a_b today, OK? A b2 c"
    for pattern in (r"(?u)\b\w\w+\b", r"(?u)\b(\w)\w*\b", r"[a-z]+"):
        section = schema_defaults(FightingWordsSection, token_pattern=pattern)
        vectorizer = sklearn_text.CountVectorizer(token_pattern=pattern)
        assert section.tokenizer()(text) == vectorizer.build_analyzer()(text), pattern


# --------------------------------------------------------------------------- the command


@pytest.fixture
def posts_table(tmp_path):
    """Topic posts of three groups on two topics; one post listed under both a and b."""
    rng = np.random.default_rng(5)
    vocab = [f"w{i}" for i in range(30)] + ["http://x.org/p", "a_b", "x"]
    rows = []
    for topic in ("Soccer", "Chess"):
        for group, extra in (("black", "zork"), ("jewish", "plim"), ("asian", "")):
            for i in range(60):
                text = " ".join(rng.choice(vocab, 10)) + (f" {extra}" if i % 3 else "")
                rows.append((f"{topic}-{group}-{i}", text, group, topic))
    rows.append(("Soccer-black-0", rows[0][1], "jewish", "Soccer"))  # in both groups
    path = tmp_path / "topic_posts.parquet"
    pl.DataFrame(
        rows, schema=["post_id", "text", "demographic", "topic"], orient="row"
    ).write_parquet(path)
    return path


def _config(tmp_path, text: str) -> Path:
    path = tmp_path / "fw.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_command_writes_the_functions_table(posts_table, tmp_path, fmt):
    config = _config(
        tmp_path, "hypotheses:\n  fighting_words: {prior: informative, min_df: 2, max_df: 0.9}\n"
    )
    out = tmp_path / f"table.{fmt}"
    status = main(
        ["fighting-words", "--posts", str(posts_table), "--topic", "Soccer"]
        + ["--group-a", "black", "--group-b", "jewish", "--config", str(OVERLAY)]
        + ["--config", str(config), "--out", str(out)]
    )
    assert status == 0
    table = pl.read_csv(out) if fmt == "csv" else pl.read_parquet(out)
    frame = pl.read_parquet(posts_table)
    soccer = frame.filter(pl.col("topic") == "Soccer", pl.col("post_id") != "Soccer-black-0")
    texts_a = soccer.filter(pl.col("demographic") == "black").sort("post_id")["text"].to_list()
    texts_b = soccer.filter(pl.col("demographic") == "jewish").sort("post_id")["text"].to_list()
    background = frame.filter(pl.col("demographic").is_in(["black", "jewish"]))["text"]
    section = _overlay_section(prior="informative", min_df=2, max_df=0.9)
    expected = fighting_words_table(
        fighting_words_scores(texts_a, texts_b, section, background.to_list())
    )
    assert table.columns == ["ngram", "count_a", "count_b", "prior", "z"]
    assert table["ngram"].to_list() == expected["ngram"].to_list()
    assert table["count_a"].to_list() == expected["count_a"].to_list()
    np.testing.assert_allclose(table["z"].to_numpy(), expected["z"].to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(table["prior"].to_numpy(), expected["prior"].to_numpy(), rtol=1e-12)
    assert table["ngram"][0] == "zork" and table["ngram"][-1] == "plim"  # z largest first
    assert table["z"].is_sorted(descending=True)


def test_command_groups_of_several_values_and_the_default_settings(posts_table, tmp_path):
    out = tmp_path / "t.csv"
    args = ["fighting-words", "--posts", str(posts_table), "--group-a", "black"]
    args += ["--group-a", "asian", "--group-b", "jewish", "--out", str(out)]
    assert main(args) == 0
    table = pl.read_csv(out)
    everything = pl.read_parquet(posts_table)  # the background: every row of the groups
    frame = everything.filter(pl.col("post_id") != "Soccer-black-0")  # in both: left out
    texts_a = frame.filter(pl.col("demographic") != "jewish")["text"].to_list()
    texts_b = frame.filter(pl.col("demographic") == "jewish")["text"].to_list()
    section = schema_defaults(FightingWordsSection)
    expected = fighting_words_table(
        fighting_words_scores(texts_a, texts_b, section, everything["text"].to_list())
    )
    assert table["ngram"].to_list() == expected["ngram"].to_list()
    np.testing.assert_allclose(table["z"].to_numpy(), expected["z"].to_numpy(), rtol=1e-12)
    # the schema's defaults: the project's own words (one letter "a" of "a_b", "http" of a URL)
    assert {"a", "b", "http"} <= set(table["ngram"].to_list())


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--group-column", "group"], "no column 'group'"),
        (["--group-b", "martian"], "martian"),
        (["--topic", "Tennis"], "Tennis"),
        (["--text-column", "body"], "no column 'body'"),
        (["--out-as", "x"], None),  # argparse's own usage line
    ],
)
def test_command_bad_input_is_one_line(posts_table, tmp_path, capsys, extra, message):
    args = ["fighting-words", "--posts", str(posts_table), "--group-a", "black"]
    args += ["--group-b", "jewish", "--out", str(tmp_path / "t.csv")]
    if "--group-b" in extra:
        args = args[: args.index("--group-b")] + args[args.index("--group-b") + 2 :]
    if message is None:
        with pytest.raises(SystemExit):
            main(args + extra)
        return
    status = main(args + extra)
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "t.csv").exists()


def test_command_unknown_output_format_is_one_line(posts_table, tmp_path, capsys):
    args = ["fighting-words", "--posts", str(posts_table), "--group-a", "black"]
    status = main(args + ["--group-b", "jewish", "--out", str(tmp_path / "t.xlsx")])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1 and ".csv or .parquet" in err, err


# --------------------------------------------------------------------------- the pipeline's set


def test_background_counts_follow_the_tokenizer():
    """The informative prior's background counts (the baseline's n-gram table, cut by polars
    for the project's words) equal a plain count of the same tokenizer's n-grams, for the
    project's words and for ConvoKit's cleaning and pattern."""
    from collections import Counter

    from splits.hypotheses.gram_table import GramTable

    texts = ["A b_c see https://x.org/q?a=1 now", "b_c, B_C! a\nline", "", "Ünïcode é x"]
    for overrides in ({}, {"token_pattern": r"(?u)\b\w\w+\b", "text_cleaning": "convokit"}):
        tokenizer = schema_defaults(FightingWordsSection, **overrides).tokenizer()
        expected = Counter()
        for text in texts:
            tokens = tokenizer(text)
            for n in (1, 2):
                expected.update(" ".join(tokens[i : i + n]) for i in range(len(tokens) - n + 1))
        table = GramTable(texts, 2, tokenizer)
        totals = table.background_counts(texts)
        counted = {table.terms[i]: int(n) for i, n in enumerate(totals) if n}
        assert counted == expected, overrides


def test_pipeline_set_reads_the_token_settings(tmp_path):
    """``splits hypotheses fighting-words`` (the run's set job) counts the configured tokens:
    with ConvoKit's pattern group A's "zo_rk" is one n-gram leading its lexicon; with the
    project's words it is the two words "zo" and "rk"."""
    import json

    from splits.hypotheses.settings import FightingWordsSettings

    rng = np.random.default_rng(1)
    filler = [f"filler{i}" for i in range(40)]
    rows = []
    for topic, count in (("Soccer", 150), ("Basketball", 60)):
        for group in ("black", "jewish"):
            for i in range(count):
                text = " ".join(rng.choice(filler, 12))
                if group == "black" and rng.random() < 0.6:
                    text += " zo_rk"
                rows.append((f"{topic}-{group}-{i:03d}", text, group, topic))
    topic_posts = tmp_path / "topic_posts.parquet"
    schema = ["post_id", "text", "demographic", "topic"]
    pl.DataFrame(rows, schema=schema, orient="row").write_parquet(topic_posts)
    lexicons = {}
    for name, overrides in (("convokit", {"token_pattern": r"(?u)\b\w\w+\b"}), ("words", {})):
        defaults = schema_defaults(FightingWordsSettings)
        fw = dataclasses.replace(defaults.fighting_words, **overrides)
        settings = dataclasses.asdict(dataclasses.replace(defaults, fighting_words=fw))
        out = tmp_path / f"{name}.parquet"
        args = ["hypotheses", "fighting-words", "--topic-posts", str(topic_posts)]
        args += ["--topics-file", "config/topics.yaml"]
        args += ["--demographics", "config/demographics.sample.yaml"]
        args += ["--settings", json.dumps(settings), "--out", str(out)]
        assert main(args + ["--report", str(tmp_path / f"{name}.json")]) == 0
        frame = pl.read_parquet(out).filter(
            pl.col("topic") == "Soccer", pl.col("target") == "black"
        )
        lexicons[name] = frame["lexicon"][0].to_list()
    assert lexicons["convokit"][0] == "zo_rk"
    assert "zo_rk" not in lexicons["words"] and "zo rk" in lexicons["words"]


def test_convokit_cleaning_without_clean_text_is_a_config_error(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "cleantext", None)  # as if not installed
    section = schema_defaults(FightingWordsSection, text_cleaning="convokit")
    with pytest.raises(ConfigError, match="text_cleaning: convokit needs the clean-text"):
        section.tokenizer()


def test_command_missing_files_are_one_line(posts_table, tmp_path, capsys):
    base = ["fighting-words", "--group-a", "black", "--group-b", "jewish"]
    base += ["--out", str(tmp_path / "t.csv")]
    for extra, message in (
        (["--posts", str(tmp_path / "none.parquet")], "posts table"),
        (["--posts", str(posts_table), "--background", str(tmp_path / "no.parquet")], "background"),
        (["--posts", str(posts_table), "--config", str(tmp_path / "no.yaml")], "config file"),
    ):
        assert main(base + extra) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err and "does not exist" in err, err
    assert not (tmp_path / "t.csv").exists()
