"""The Python API (``splits.api``), ``splits lexicon`` and the notebook in docs/: on the default
run their numbers are the lift and triviality jobs' (the jobs run by their own commands here),
bad names give one line naming the valid ones, settings come from the schema with keyword
overrides, and the Fighting Words table agrees with the formula over counts made by hand."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml
from splits.api import KEYWORDS, open_posts, open_release, open_run
from splits.cli import main
from splits.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
EXACT = ("k_fraction", "n", "hits_at_n", "target_in_list", "list_size", "matching_posts")
#: lines of the code cells of the release's splits_metrics_demo.ipynb (eyloncaplan/splits),
#: blank and comment lines included, as counted here for the notebook in docs/
DEMO_CODE_LINES = 69
CLOSE = ("lift", "lift_low", "lift_high", "p_value", "null_band_low", "null_band_high")


def _same_rows(mine: pl.DataFrame, job: pl.DataFrame) -> None:
    mine, job = mine.sort("k_fraction"), job.sort("k_fraction")
    assert mine.height == job.height > 0
    for column in EXACT:
        assert mine[column].to_list() == job[column].to_list(), column
    for column in CLOSE:
        assert mine[column].to_numpy() == pytest.approx(job[column].to_numpy(), rel=1e-12), column


# --------------------------------------------------------------------------- small tables


def _posts(n: int = 60) -> pl.DataFrame:
    rng = np.random.default_rng(3)
    vocabulary = ["goal", "pitch", "keeper", "coach", "match", "season", "fans", "derby"]
    texts = [" ".join(rng.choice(vocabulary, size=8)) for _ in range(n)]
    for i in range(0, n, 7):
        texts[i] += " penalty kick"
    return pl.DataFrame(
        {
            "post_id": [f"x{i:03d}" for i in range(n)],
            "text": texts,
            "demographic": ["a" if i % 3 else "b" for i in range(n)],
        }
    )


def test_settings_come_from_the_schema_and_keywords_override_them():
    source = open_posts(_posts(400))
    assert source.topics == ["all"] and source.groups == ["a", "b"]
    pool = source.pool("all", "b", "a")
    rows = pool.lift("goal", "a")
    assert rows["k_fraction"].to_list() == [0.005, 0.01, 0.02, 0.05, 0.1]  # the schema's
    assert set(rows["list_size"]) == {400}  # list_size null: the whole pool
    rows = pool.lift("goal", "a", ks=[0.5, 0.25], list_size=40)
    assert rows["k_fraction"].to_list() == [0.25, 0.5] and set(rows["list_size"]) == {40}
    assert rows["n"].to_list() == [10, 20]
    # release mode through the keyword of hypotheses.retrieval.mode
    release = pool.lift("goal", "a", mode="release", doc_count=30)
    assert set(release["list_size"]) == {30}
    assert KEYWORDS["mode"] == "hypotheses.retrieval.mode" and KEYWORDS["seed"] == "seed"
    with pytest.raises(ConfigError, match=r"unknown setting 'k_fraction' \(settings: .*alpha"):
        pool.lift("goal", "a", k_fraction=[0.1])
    with pytest.raises(ConfigError, match="hypotheses.list_size"):
        pool.lift("goal", "a", list_size="many")
    with pytest.raises(ConfigError, match="hypotheses.k_fractions"):
        pool.lift("goal", "a", ks=[2.0])


def test_a_seed_orders_only_ties_and_padding():
    pool = open_posts(_posts()).pool("all", "a", "b")
    first = pool.ranked('"penalty kick"')
    other = pool.ranked('"penalty kick"', seed=1)
    hits = (~first["padding"]).sum()
    assert hits == 9 and first.height == 60
    # the same matching posts with the same scores first (ties in the seed's order)
    assert set(first["post_id"].head(hits)) == set(other["post_id"].head(hits))
    assert first["score"].head(hits).to_list() == other["score"].head(hits).to_list()
    assert first["post_id"].to_list() != other["post_id"].to_list()
    unpadded = pool.ranked('"penalty kick"', padded=False)
    assert unpadded.height == hits and not unpadded["padding"].any()
    assert unpadded["score"].is_not_null().all() and first["score"].tail(51).is_null().all()
    text = unpadded["text"][0]
    assert [text[s:e] for s, e in unpadded["spans"][0]] == ["penalty kick"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s: s.pool("none", "a", "b"), r"unknown topic 'none' \(topics: all\)"),
        (lambda s: s.pool("all", "a", "c"), r"unknown group 'c' \(groups: a, b\)"),
        (lambda s: s.pool("all", "a", "b").lift("goal", "c"), "neither 'a' nor 'b'"),
        (lambda s: s.pool("all", "a", "b").lift('"goal', "a"), "double quote is not closed"),
        (lambda s: s.pool("all", "a", "b").lift(["!!"], "a"), "no entry with a letter"),
    ],
)
def test_bad_input_is_one_line(call, message):
    with pytest.raises(ConfigError, match=message) as err:
        call(open_posts(_posts()))
    assert "\n" not in str(err.value)


def test_a_posts_table_needs_its_columns(tmp_path):
    path = tmp_path / "posts.csv"
    _posts().drop("text").write_csv(path)
    with pytest.raises(ConfigError, match="missing column"):
        open_posts(path)
    _posts().write_csv(path)
    assert open_posts(path).pool("all", "a", "b").lift("goal", "a")["n"].to_list() == [1, 3, 6]


def test_triviality_with_an_encoder_and_identity_words_from_a_config(tmp_path):
    words = tmp_path / "words.yaml"
    words.write_text(yaml.safe_dump({"a": ["goal keeper", "pitch"], "b": ["fans"]}))
    config = {
        "models": {
            "enc": {"backend": "builtin", "kind": "hashed-ngrams"},
            "words": {"backend": "builtin", "kind": "lexical"},
        },
        "hypotheses": {"encoder": "enc", "identity_words": str(words)},
    }
    pool = open_posts(_posts(), config).pool("all", "a", "b")
    row = pool.triviality(["pitch", "keeper"], "a").row(0, named=True)
    assert row["identity_words_covered"] == ["pitch"] and row["encoder"] == "enc"
    assert 0 < row["triviality"] < 1
    assert pool.triviality(["goal keeper", "pitch"], "a")["triviality"][0] == pytest.approx(1.0)
    # the identity words' own text spans itself
    with pytest.raises(ConfigError, match="hypotheses.encoder: model 'words' is builtin"):
        pool.triviality(["pitch"], "a", encoder="words")


def test_fighting_words_table_agrees_with_the_formula():
    pool = open_posts(_posts(300)).pool("all", "a", "b")
    table = pool.fighting_words(prior="uniform", min_df=1, max_df=1.0, ngram_max=2)
    posts = pool.posts()
    for gram in ("goal", "penalty kick", "fans derby"):
        row = table.filter(pl.col("ngram") == gram).row(0, named=True)
        for group, column in (("a", "count_a"), ("b", "count_b")):
            texts = posts.filter(pl.col("group") == group)["text"]
            by_hand = sum(len(re.findall(rf"(?=\b{gram}\b)", t)) for t in texts)
            assert row[column] == by_hand, (gram, column)
    # z of each n-gram from its own row and the table's totals (Monroe et al.'s formula)
    y_a, y_b, prior = (table[c].to_numpy().astype(float) for c in ("count_a", "count_b", "prior"))
    n_a, n_b, a0 = y_a.sum(), y_b.sum(), prior.sum()
    delta = np.log((y_a + prior) / (n_a + a0 - y_a - prior)) - np.log(
        (y_b + prior) / (n_b + a0 - y_b - prior)
    )
    expected = delta / np.sqrt(1 / (y_a + prior) + 1 / (y_b + prior))
    assert table["z"].to_numpy() == pytest.approx(expected, rel=1e-12)
    assert table["z"].is_sorted(descending=True) and set(table["prior"]) == {0.1}


def test_command_on_a_posts_table_with_settings(tmp_path, monkeypatch, capsys):
    """``--posts`` with no config: the schema's settings and ``--set``; triviality missing (no
    demographics file here) is a note, not a failure; a wrong ``--set`` is one line."""
    path = tmp_path / "posts.parquet"
    _posts(400).with_columns(topic=pl.lit("t")).write_parquet(path)
    monkeypatch.chdir(tmp_path)
    common = ["lexicon", "--posts", str(path), "--topic", "t", "--target", "a", "--other", "b"]
    assert (
        main(
            [
                *common,
                "--format",
                "json",
                "--set",
                "mode=release",
                "--set",
                "doc_count=50",
                "goal",
                "penalty kick",
            ]
        )
        == 0
    )
    document = json.loads(capsys.readouterr().out)
    expected = (
        open_posts(path)
        .pool("t", "a", "b")
        .lift(["goal", "penalty kick"], "a", mode="release", doc_count=50)
    )
    assert document["lexicon"] == ["goal", "penalty kick"]
    assert pl.DataFrame(document["lift"]).drop("lexicon").equals(expected.drop("lexicon"))
    assert document["triviality"] is None
    assert "demographics.file" in document["triviality_note"]
    assert len(document["top_posts"]) == 10
    assert main([*common, "--set", "list_sise=5", "goal"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--set list_sise=5: expected NAME=VALUE" in err[0]


def test_open_release_reads_the_authors_data_as_the_stage_does(reference_dir, tmp_path):
    import datasets

    texts = pl.read_csv(
        reference_dir / "realdata" / "dreaddit" / "dreaddit-train.csv", infer_schema=False
    )["text"]
    n = 800
    groups = ["black", "jewish", "teacher"]
    copy = tmp_path / "copy" / "high_groupness_by_topic"
    datasets.Dataset.from_dict(
        {
            "id": [f"t1_{i:05d}" for i in range(n)],
            "description": ["Work stress" if i % 2 else "Family" for i in range(n)],
            "demographic": [groups[i % 3] for i in range(n)],
            "content": texts.cast(pl.String).to_list()[:n],
            "metadata": [
                {"timestamp": 0, "score": 1, "subreddit": "r", "user": f"reddit_user_{i % 9}"}
                for i in range(n)
            ],
            "score": [1.0] * n,
        }
    ).save_to_disk(str(copy))
    source = open_release(tmp_path / "copy", groups=["black", "jewish"])
    assert source.topics == ["Family", "Work stress"] and source.groups == ["black", "jewish"]
    # the table the release_data stage writes, opened as any posts table: the same numbers
    out = tmp_path / "topic_posts.parquet"
    settings = json.dumps({"demographics": ["black", "jewish"], "topics": None, "salt_env": "X"})
    assert (
        main(
            ["release-data", "topic-posts", "--dataset", str(tmp_path / "copy")]
            + ["--out", str(out), "--settings", settings]
        )
        == 0
    )
    by_stage = open_posts(out).pool("Family", "black", "jewish").lift("stress anxiety", "jewish")
    mine = source.pool("Family", "black", "jewish").lift("stress anxiety", "jewish")
    assert mine.height == 5 and mine.equals(by_stage)


# --------------------------------------------------------------------------- the default run


@pytest.fixture(scope="module")
def run(default_run) -> Path:
    return default_run


def _job(run: Path, kind: str, hypothesis_set: str = "sample") -> pl.DataFrame:
    return pl.read_parquet(run / "results" / "hypotheses" / kind / f"{hypothesis_set}.parquet")


def _other(row: dict) -> str:
    return row["demographic_B"] if row["target"] == row["demographic_A"] else row["demographic_A"]


def test_api_and_command_equal_the_jobs_on_the_default_run(run, capsys):
    """For a planted, a null and a trivial hypothesis of the run: the API's lift and the
    command's CSV rows equal the lift job's; triviality the triviality job's."""
    lift_job, triviality_job = _job(run, "lift"), _job(run, "triviality")
    source = open_run(run / "results")
    assert source.hypotheses is not None
    for kind in ("planted", "null-words", "trivial"):
        hid = lift_job.filter(pl.col("hypothesis_id").str.contains(f":{kind}:"))["hypothesis_id"][0]
        job = lift_job.filter(pl.col("hypothesis_id") == hid)
        row = job.row(0, named=True)
        pool = source.pool(row["topic"], row["target"], _other(row))
        _same_rows(pool.lift(row["lexicon"], row["target"]), job)
        expected = triviality_job.filter(pl.col("hypothesis_id") == hid)["triviality"][0]
        mine = pool.triviality(row["lexicon"], row["target"])["triviality"][0]
        assert mine == pytest.approx(expected, rel=1e-12)
        # the command, from the folder the run ran in, the lexicon as words and phrases
        args = ["lexicon", "--topic", row["topic"], "--target", row["target"]]
        args += ["--other", _other(row), "--format", "csv", *row["lexicon"]]
        with pytest.MonkeyPatch.context() as patch:
            patch.chdir(run)
            assert main(args) == 0
        printed = pl.read_csv(io.StringIO(capsys.readouterr().out))
        _same_rows(printed, job)
        assert printed["triviality"][0] == pytest.approx(expected, rel=1e-12)
        assert printed["lexicon"][0] == "; ".join(row["lexicon"])


def test_command_json_and_text_and_typed_phrases(run, capsys):
    planted = _job(run, "lift").filter(pl.col("hypothesis_id").str.contains(":planted:"))
    job = planted.filter(pl.col("hypothesis_id") == planted["hypothesis_id"][0])
    row = job.row(0, named=True)
    typed = ", ".join(f'"{e}"' for e in row["lexicon"])  # one argument, phrases in quotes
    common = ["lexicon", "--run", str(run / "results"), "--topic", row["topic"]]
    common += ["--target", row["target"], "--other", _other(row)]
    assert main([*common, "--format", "json", "--top", "3", typed]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["lexicon"] == row["lexicon"]
    _same_rows(pl.DataFrame(document["lift"]), job.select(pl.exclude("lexicon")))
    posts = document["top_posts"]
    assert [p["rank"] for p in posts] == [1, 2, 3]
    assert all(not p["padding"] and p["score"] > 0 and p["spans"] for p in posts)
    assert main([*common, *row["lexicon"]]) == 0
    text = capsys.readouterr().out
    assert f"matching posts: {row['matching_posts']} of " in text
    assert "triviality: " in text and "top 10 posts" in text


@pytest.mark.parametrize(
    ("flag", "value", "valid"),
    [("--topic", "Curling", "Basketball, "), ("--other", "martians", "black, catholic, ")],
)
def test_command_names_the_valid_topics_and_groups(run, capsys, flag, value, valid):
    args = {"--topic": "Soccer", "--target": "black", "--other": "jewish", flag: value}
    argv = ["lexicon", "--run", str(run / "results")]
    argv += [item for pair in args.items() for item in pair] + ["goal"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"unknown {flag.strip('-').replace('other', 'group')}" in err[0]
    assert valid in err[0]


def test_the_notebook_runs_and_gives_the_lift_jobs_numbers(run, tmp_path, monkeypatch):
    """docs/lexicon_demo.ipynb on a real kernel, pointed at the run as a user would (its RUN
    variable reads SPLITS_RUN); its lift table and triviality equal the jobs' run by their own
    commands on the same lexicons."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(REPO / "docs" / "lexicon_demo.ipynb", as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert sum(len(c.source.splitlines()) for c in code) <= DEMO_CODE_LINES
    notebook.cells.append(
        nbformat.v4.new_code_cell(
            "print(lift.write_json())\n"
            "print(pl.concat(pool.triviality(w, target).with_columns(name=pl.lit(n))"
            " for n, w in lexica.items()).write_json())"
        )
    )
    monkeypatch.setenv("SPLITS_RUN", str(run / "results"))
    NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(REPO / "docs")}},
    ).execute()
    assert any(
        "image/png" in o.get("data", {}) for c in notebook.cells for o in c.get("outputs", [])
    )
    printed = "".join(o.get("text", "") for o in notebook.cells[-1].outputs).splitlines()
    lift, triviality = (pl.read_json(io.StringIO(line)) for line in printed[:2])
    assert set(lift["name"]) == {"non-lifting", "trivial"}
    # the same lexicons through the jobs' own commands
    records = [
        {
            "id": name,
            "topic": rows["topic"][0],
            "demographic_A": rows["demographic_A"][0],
            "demographic_B": rows["demographic_B"][0],
            "target": rows["target"][0],
            "lexicon": rows["lexicon"][0].to_list(),
        }
        for (name,), rows in lift.group_by("name")
    ]
    (tmp_path / "nb.yaml").write_text(yaml.safe_dump(records))
    config = run / "config" / "config.yaml"
    demographics = str(run / "config" / "demographics.sample.yaml")
    out = {k: str(tmp_path / f"{k}.parquet") for k in ("set", "lift", "triviality")}
    models = json.dumps(yaml.safe_load(config.read_text())["models"])
    for argv in (
        ["file", "--input", str(tmp_path / "nb.yaml"), "--name", "nb", "--out", out["set"]]
        + ["--topics-file", str(run / "config" / "topics.yaml"), "--demographics", demographics]
        + ["--report", str(tmp_path / "set.json")],
        ["lift", "--set", out["set"], "--out", out["lift"], "--report", str(tmp_path / "l.json")]
        + ["--topic-posts", str(run / "results" / "topics" / "topic_posts.parquet")],
        ["triviality", "--set", out["set"], "--out", out["triviality"]]
        + ["--demographics", demographics, "--models-json", models],
    ):
        assert main(["hypotheses", *argv, "--config", str(config)]) == 0
    job, job_triviality = pl.read_parquet(out["lift"]), pl.read_parquet(out["triviality"])
    for name in ("non-lifting", "trivial"):
        _same_rows(
            lift.filter(pl.col("name") == name),
            job.filter(pl.col("hypothesis_id") == f"file/nb:{name}"),
        )
        expected = job_triviality.filter(pl.col("hypothesis_id") == f"file/nb:{name}")
        mine = triviality.filter(pl.col("name") == name)
        assert mine["triviality"][0] == pytest.approx(expected["triviality"][0], rel=1e-12)


def test_fighting_words_takes_the_convokit_settings_by_keyword():
    # the token pattern of the config reaches the table: with words of 5+ letters only, no
    # n-gram holds a shorter word ("goal", "fans"), and the default pattern's table does
    pool = open_posts(_posts(300)).pool("all", "a", "b")
    base = dict(prior="uniform", min_df=1, max_df=1.0, ngram_max=1)
    default = pool.fighting_words(**base)
    long_only = pool.fighting_words(token_pattern=r"(?u)\b\w{5,}\b", **base)
    assert {"goal", "fans"} <= set(default["ngram"])
    assert (long_only["ngram"].str.len_chars() >= 5).all()
    assert set(long_only["ngram"]) < set(default["ngram"])
