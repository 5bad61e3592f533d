"""Theory models a researcher brings: a precomputed theories file and a Python callable.

Unit level: the file formats and every way a theories file can be wrong (one-line errors naming
the rows); the callable by module path, file path and entry point, its arguments, its errors,
and a batch job killed half way that repeats none of its finished calls when run again.
Pipeline level (sample corpus): the oracle-lexical theories as a precomputed file, and a callable
that rebuilds them, score exactly as the builtin oracle-lexical TM on every row.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest
import snakemake_fork
import yaml
from splits.cli import main
from splits.config.schema import load_config, validate_config
from splits.config.settings import schema_defaults, settings_json
from splits.errors import ConfigError
from splits.evaluation.common import display_names, one_line
from splits.evaluation.custom_tm import callable_inputs, precomputed_theories
from splits.evaluation.settings import TMSettings
from splits.evaluation.theorize import build_tm_requests
from splits.io import write_parquet
from splits.llm import LLMError, load_model
from splits.llm.base import Request
from splits.pipeline.checks import check_evaluation

#: what the workflow passes a TM's jobs (the schema's defaults), as --settings
TM_SETTINGS = ["--settings", settings_json(validate_config({}), TMSettings)]

ROWS = pl.DataFrame(
    {
        "quadruplet_id": ["q0", "q1", "q2"],
        "eval_row": [0, 1, 2],
        "description": ["Basketball"] * 3,
        "category": ["Sports & Fitness"] * 3,
        "demographic_A": ["catholic"] * 3,
        "demographic_B": ["teacher"] * 3,
        "example_posts": [
            [f"rosary\nparish {i}", "grading papers", "mass", "lesson"] for i in range(3)
        ],
        "example_labels": [["A", "B", "A", "B"]] * 3,
        "sample_A": [["parish post", "saint post", "lent post"]] * 3,
        "sample_B": [["grading post", "meeting post", "lesson post"]] * 3,
        "switched": [False, True, False],
    }
)
NAMES = {"catholic": "Catholic", "teacher": "teacher"}


# --------------------------------------------------------------------------- precomputed


def _theories(with_k: bool) -> pl.DataFrame:
    frame = pl.DataFrame(
        {
            "quadruplet_id": ["q0", "q1", "q2", "q0", "q1", "q2", "other"],
            "k": [2, 2, 2, 4, 4, 4, 4],
            "theory": ["t0-2", "t1-2", "", "t0-4", "t1-4", "t2-4", "x"],
        }
    )
    return frame if with_k else frame.filter(pl.col("k") == 4).drop("k")


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_precomputed_formats_with_and_without_k(tmp_path, suffix):
    for with_k in (True, False):
        path = tmp_path / f"theories-{with_k}{suffix}"
        frame = _theories(with_k)
        if suffix == ".parquet":
            frame.write_parquet(path)
        elif suffix == ".csv":
            frame.write_csv(path)
        else:
            frame.write_ndjson(path)
        got = precomputed_theories(path, ROWS.reverse(), 4, "mine")
        assert got.rows() == [("q2", "t2-4"), ("q1", "t1-4"), ("q0", "t0-4")]
        if with_k:
            # k picks the theories; the empty string is the empty theory, not a missing row
            assert precomputed_theories(path, ROWS, 2, "mine")["theory"].to_list() == [
                "t0-2",
                "t1-2",
                "",
            ]
        else:  # one theory per row serves every k
            assert precomputed_theories(path, ROWS, 2, "mine").equals(
                precomputed_theories(path, ROWS, 4, "mine")
            )


def test_precomputed_ids_read_as_strings_from_csv(tmp_path):
    rows = ROWS.with_columns(pl.Series("quadruplet_id", ["1", "2", "3"]))
    path = tmp_path / "t.csv"
    path.write_text('quadruplet_id,theory\n1,a\n2,"two\nlines"\n3,c\n')
    assert precomputed_theories(path, rows, 4, "mine")["theory"].to_list() == [
        "a",
        "two\nlines",
        "c",
    ]


@pytest.mark.parametrize(
    ("frame", "k", "message"),
    [
        (
            pl.DataFrame({"quadruplet_id": ["q0"], "theory": ["t"]}),
            4,
            "models.mine.theories: {path} lacks 2 of 3 evaluation rows (q1, q2)",
        ),
        (
            pl.DataFrame({"quadruplet_id": ["q0", "q1", "q2"], "k": [4, 4, 2], "theory": "t"}),
            4,
            "models.mine.theories: {path} lacks 1 of 3 evaluation rows at k=4 (q2)",
        ),
        (
            pl.DataFrame(
                {"quadruplet_id": ["q0", "q1", "q2", "q1"], "theory": ["a", "b", "c", "d"]}
            ),
            4,
            "models.mine.theories: {path} has 1 rows more than once (q1)",
        ),
        (
            pl.DataFrame({"quadruplet_id": ["q0", "q1", "q2"], "theory": ["a", None, "c"]}),
            4,
            "models.mine.theories: {path} has a null theory for 1 rows (q1)",
        ),
        (
            pl.DataFrame({"id": ["q0"], "theory": ["a"]}),
            4,
            "models.mine.theories: {path} lacks the column(s) quadruplet_id (needs quadruplet_id, "
            "theory and optionally k)",
        ),
    ],
)
def test_precomputed_errors_name_the_rows(tmp_path, frame, k, message):
    path = tmp_path / "theories.parquet"
    frame.write_parquet(path)
    with pytest.raises(ConfigError) as err:
        precomputed_theories(path, ROWS, k, "mine")
    assert str(err.value) == message.format(path=path)


def test_precomputed_missing_rows_are_named_up_to_five(tmp_path):
    rows = pl.DataFrame({"quadruplet_id": [f"q{i}" for i in range(9)], "eval_row": range(9)})
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"quadruplet_id": "q3", "theory": "x"}) + "\n")
    with pytest.raises(
        ConfigError, match=r"lacks 8 of 9 evaluation rows \(q0, q1, q2, q4, q5, ...\)"
    ):
        precomputed_theories(path, rows, 0, "mine")


def test_precomputed_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        precomputed_theories(tmp_path / "none.csv", ROWS, 4, "mine")
    (tmp_path / "t.txt").write_text("x")
    with pytest.raises(ConfigError, match=r"t.txt is not .parquet, .csv, .jsonl, .ndjson"):
        precomputed_theories(tmp_path / "t.txt", ROWS, 4, "mine")
    (tmp_path / "t.parquet").write_text("not parquet")
    with pytest.raises(ConfigError, match="cannot read"):
        precomputed_theories(tmp_path / "t.parquet", ROWS, 4, "mine")


def test_precomputed_through_the_cli_and_not_as_an_engine(tmp_path):
    write_parquet(ROWS, tmp_path / "rows.parquet")
    _theories(True).write_ndjson(tmp_path / "mine.jsonl")
    spec = json.dumps({"backend": "precomputed", "theories": str(tmp_path / "mine.jsonl")})
    out = tmp_path / "theories.parquet"
    args = ["theorize", "generate", "--rows", str(tmp_path / "rows.parquet"), "--model", "mine"]
    args += TM_SETTINGS
    assert main([*args, "--model-spec", spec, "--k", "4", "--out", str(out)]) == 0
    theories = pl.read_parquet(out)
    assert theories["theory"].to_list() == ["t0-4", "t1-4", "t2-4"]
    assert set(theories["tm"]) == {"mine"} and set(theories["k"]) == {4}
    assert main([*args, "--model-spec", spec, "--k", "8", "--out", str(out)]) == 2  # no k=8 rows
    with pytest.raises(ConfigError, match="answers no requests; it can only be a TM"):
        load_model("mine", {"mine": json.loads(spec)})


# --------------------------------------------------------------------------- python callables

MODULE = """
CALLS = []


def theorize(group_a, group_b, topic, category, posts, k, style="plain"):
    CALLS.append(k)
    return f"Group A ({group_a}): {style} {topic}/{category} {len(posts)}\\nGroup B ({group_b}): " + " | ".join(posts)


def only_names(group_a, group_b):
    return f"{group_a} vs {group_b}"


def needs_more(group_a, extra):
    return ""


def broken(**inputs):
    raise RuntimeError("the method failed\\nsecond line")


def not_text(**inputs):
    return 3
"""


@pytest.fixture
def tm_module(tmp_path, monkeypatch):
    (tmp_path / "my_tms.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_tms", None)
    yield tmp_path
    sys.modules.pop("my_tms", None)


def _requests(k=4):
    return build_tm_requests(ROWS, k, None, NAMES, schema_defaults(TMSettings))


def test_callable_gets_what_an_llm_tm_gets(tm_module):
    spec = {"backend": "python", "function": "my_tms:theorize", "kwargs": {"style": "bold"}}
    model = load_model("fn", {"fn": spec})
    completions = model.generate(_requests(4))
    expected_posts = ["rosary parish 0", "grading papers", "mass", "lesson"]  # one line each
    assert completions[0].text == (
        "Group A (Catholic): bold Basketball/Sports & Fitness 4\nGroup B (teacher): "
        + " | ".join(expected_posts)
    )
    assert callable_inputs(_requests(2)[0].payload) == {
        "group_a": "Catholic",
        "group_b": "teacher",
        "topic": "Basketball",
        "category": "Sports & Fitness",
        "posts": ["rosary parish 0", "grading papers"],
        "k": 2,
    }
    # a function naming fewer arguments gets only those
    names_only = load_model("n", {"n": {"backend": "python", "function": "my_tms:only_names"}})
    assert names_only.generate(_requests(4)[:1])[0].text == "Catholic vs teacher"


def test_callable_from_a_file_path_and_its_identity(tmp_path, monkeypatch):
    source = tmp_path / "tms" / "file_tm.py"
    source.parent.mkdir()
    source.write_text("def theorize(**inputs):\n    return inputs['topic']\n")
    monkeypatch.chdir(tmp_path)
    spec = {"backend": "python", "function": "tms/file_tm.py:theorize"}
    model = load_model("f", {"f": spec}, cache_path=tmp_path / "cache.sqlite")
    assert [c.text for c in model.generate(_requests(2))] == ["Basketball"] * 3
    identity = dict(model._identity)
    model.close()
    # the file's content is part of the identity: an edit misses the old answers
    source.write_text("def theorize(**inputs):\n    return inputs['category']\n")
    edited = load_model("f", {"f": spec}, cache_path=tmp_path / "cache.sqlite")
    assert edited._identity != identity
    assert [c.text for c in edited.generate(_requests(2))] == ["Sports & Fitness"] * 3
    edited.close()


def test_fully_cached_callable_is_never_imported(tmp_path, monkeypatch):
    source = tmp_path / "tm.py"
    source.write_text("def theorize(**inputs):\n    return 'x'\n")
    monkeypatch.chdir(tmp_path)
    spec = {"backend": "python", "function": "tm.py:theorize"}
    with load_model("f", {"f": spec}, cache_path=tmp_path / "c.sqlite") as model:
        model.generate(_requests(2))
    with load_model("f", {"f": spec}, cache_path=tmp_path / "c.sqlite", cache_only=True) as model:
        assert [c.text for c in model.generate(_requests(2))] == ["x"] * 3
        assert not model.built


@pytest.mark.parametrize(
    ("spec", "error", "message"),
    [
        (
            {"function": "my_tms:nothing"},
            ConfigError,
            "models.fn.function: my_tms has no attribute 'nothing'",
        ),
        (
            {"function": "no_such_module:f"},
            ConfigError,
            "models.fn.function: cannot import no_such_module",
        ),
        ({"function": "my_tms"}, ConfigError, "is not 'module:function' or 'file.py:function'"),
        ({"function": "my_tms:CALLS"}, ConfigError, "my_tms:CALLS is not callable"),
        ({"function": "my_tms:needs_more"}, ConfigError, "requires the argument 'extra'"),
        (
            {"function": "my_tms:only_names", "kwargs": {"style": 1}},
            ConfigError,
            "models.fn.kwargs.style: my_tms:only_names takes no argument 'style'",
        ),
        (
            {"entry_point": "nobody-installed-this"},
            ConfigError,
            "no entry point 'nobody-installed-this'",
        ),
        ({}, ConfigError, "models.fn: a python TM needs exactly one of function, entry_point"),
        (
            {"function": "my_tms:broken"},
            LLMError,
            "model fn: my_tms:broken raised RuntimeError: the method failed (topic 'Basketball', Catholic vs teacher, k=4)",
        ),
        (
            {"function": "my_tms:not_text"},
            LLMError,
            "my_tms:not_text returned a int, not the theory",
        ),
    ],
)
def test_callable_errors_are_one_line(tm_module, spec, error, message):
    with pytest.raises(error) as err:
        model = load_model("fn", {"fn": {"backend": "python", **spec}})
        model.generate(_requests(4))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_callable_only_answers_theory_requests(tm_module):
    model = load_model("fn", {"fn": {"backend": "python", "function": "my_tms:theorize"}})
    with pytest.raises(LLMError, match="only answers theory requests"):
        model.generate([Request(prompt="classify this", payload={"theory": "x"})])


def test_entry_point(tmp_path, monkeypatch):
    """An installed package's entry point (a dist-info folder on sys.path, as pip writes it)."""
    package = tmp_path / "site"
    (package / "their_tm").mkdir(parents=True)
    (package / "their_tm" / "__init__.py").write_text(
        "def theorize(group_a, group_b, **_):\n    return f'{group_b} and {group_a}'\n"
    )
    info = package / "their_tm-1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: their-tm\nVersion: 1.2\n")
    (info / "entry_points.txt").write_text(
        "[splits.theory_models]\ntheir-method = their_tm:theorize\n"
    )
    monkeypatch.syspath_prepend(str(package))
    spec = {"backend": "python", "entry_point": "their-method"}
    model = load_model("ep", {"ep": spec})
    assert model.generate(_requests(2)[:1])[0].text == "teacher and Catholic"
    assert model._identity["entry_point"] == "their_tm:theorize"
    assert model._identity["distribution"] == "their-tm==1.2"


CRASHING = """
import os


def theorize(topic, posts, k, counter, crash_after):
    with open(counter, "a") as fh:
        fh.write(f"{k}\\n")
    calls = len(open(counter).read().split())
    if os.path.exists(crash_after) and calls == int(open(crash_after).read()):
        os.remove(crash_after)
        raise RuntimeError("killed")
    return f"theory of {topic} from {len(posts)} posts"
"""


def test_batch_job_killed_half_way_repeats_no_finished_call(tmp_path):
    """`splits model-batch tm` (the TM's batch job) fails on its 4th call; the plain re-run
    makes only the calls that had not finished, and the per-row job reads all from the cache."""
    write_parquet(ROWS, tmp_path / "rows.parquet")
    (tmp_path / "crashing.py").write_text(CRASHING)
    counter, crash = tmp_path / "calls.txt", tmp_path / "crash_after.txt"
    crash.write_text("4")
    spec = {
        "backend": "python",
        "function": f"{tmp_path / 'crashing.py'}:theorize",
        "kwargs": {"counter": str(counter), "crash_after": str(crash)},
    }
    model_args = ["--model", "fn", "--model-spec", json.dumps(spec)]
    cache = ["--cache", str(tmp_path / "cache.sqlite")]
    plan = json.dumps([{"rows": str(tmp_path / "rows.parquet"), "k": k} for k in (2, 4)])
    batch = ["model-batch", "tm", *model_args, "--plan", plan, *cache, *TM_SETTINGS]
    assert main([*batch, "--report", str(tmp_path / "r1.json")]) == 3  # one-line model error
    assert len(counter.read_text().split()) == 4  # three theories made, the 4th call failed
    assert main([*batch, "--report", str(tmp_path / "r2.json")]) == 0
    calls = counter.read_text().split()
    assert len(calls) == 6 + 1  # 6 theories, one failed call repeated, none finished repeated
    report = json.loads((tmp_path / "r2.json").read_text())
    assert (report["cached"], report["generated"]) == (3, 3)
    out = tmp_path / "theories.parquet"
    row_job = ["theorize", "generate", "--rows", str(tmp_path / "rows.parquet"), *model_args]
    row_job += TM_SETTINGS
    assert main([*row_job, "--k", "4", *cache, "--cache-only", "--out", str(out)]) == 0
    assert pl.read_parquet(out)["theory"].to_list() == ["theory of Basketball from 4 posts"] * 3
    assert len(counter.read_text().split()) == 7


# --------------------------------------------------------------------------- config


def test_theory_only_backends_cannot_classify(repo_root):
    config = load_config(repo_root / "config" / "config.yaml")
    config["models"]["mine"] = {"backend": "precomputed", "theories": "x.parquet"}
    config["evaluation"]["experiments"]["sample"]["cms"] = ["mine"]
    with pytest.raises(ConfigError) as err:
        check_evaluation(config)
    assert str(err.value) == (
        "evaluation.experiments.sample.cms: 'mine' (backend precomputed) writes theories and "
        "cannot classify; list it under tms"
    )


# --------------------------------------------------------------------------- the pipeline

ORACLE_CALLABLE = '''
"""The builtin oracle-lexical theory as a python TM. A TM gets no labels, so this test-only
callable looks the hidden calibration labels up in a side file by (topic, names, posts)."""
import json

from splits.evaluation.theorize import ORACLE_N_WORDS, oracle_theory

_LABELS = {}


def theorize(group_a, group_b, topic, posts, labels_file):
    if labels_file not in _LABELS:
        with open(labels_file) as fh:
            _LABELS[labels_file] = {tuple(e["key"]): e["labels"] for e in json.load(fh)}
    labels = _LABELS[labels_file][(topic, group_a, group_b, *posts)]
    payload = {"group_a": group_a, "group_b": group_b, "posts": posts, "labels": labels}
    return oracle_theory(payload, ORACLE_N_WORDS, 1.0)
'''


def _snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    return snakemake_fork.run(["--cores", "2", "--quiet", "rules", *args], workdir, env, 900)


@pytest.fixture(scope="module")
def byo_run(default_run, tmp_path_factory):
    """The finished default run plus two TMs brought by the user: ``mine`` (oracle-lexical's
    theories as a JSON-lines file with a k column) and ``oracle-fn`` (a callable rebuilding
    them)."""
    workdir = tmp_path_factory.mktemp("byo") / "repo"
    shutil.copytree(default_run, workdir, symlinks=True)
    config = yaml.safe_load((workdir / "config/config.yaml").read_text())
    experiment = config["evaluation"]["experiments"]["sample"]
    rows = pl.read_parquet(
        workdir / f"results/evaluation/subsample/rows-{experiment['rows']}.parquet"
    )
    theories = pl.concat(
        pl.read_parquet(
            workdir
            / f"results/evaluation/theories/rows-{experiment['rows']}/oracle-lexical/k-{k}.parquet"
        )
        for k in experiment["ks"]
    )
    (workdir / "byo").mkdir()
    theories.select("quadruplet_id", "k", "theory").write_ndjson(workdir / "byo/mine.jsonl")
    names = display_names(workdir / config["demographics"]["file"])
    max_chars = load_config(workdir / "config/config.yaml")["evaluation"]["max_post_chars"]
    entries = [
        {
            "key": [
                row["description"],
                names[row["demographic_A"]],
                names[row["demographic_B"]],
                *[one_line(p, max_chars) for p in row["example_posts"][:k]],
            ],
            "labels": list(row["example_labels"][:k]),
        }
        for row in rows.iter_rows(named=True)
        for k in experiment["ks"]
    ]
    (workdir / "byo/labels.json").write_text(json.dumps(entries))
    (workdir / "byo/oracle_tm.py").write_text(textwrap.dedent(ORACLE_CALLABLE))
    config["models"]["mine"] = {"backend": "precomputed", "theories": "byo/mine.jsonl"}
    config["models"]["oracle-fn"] = {
        "backend": "python",
        "function": "byo/oracle_tm.py:theorize",
        "kwargs": {"labels_file": "byo/labels.json"},
    }
    experiment["tms"] += ["mine", "oracle-fn"]
    (workdir / "config/config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    proc = _snakemake(workdir)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return workdir


def test_brought_tms_score_exactly_as_the_builtin_path(byo_run):
    experiment = byo_run / "results/evaluation/experiments/sample"
    predictions = pl.read_parquet(experiment / "predictions.parquet")
    columns = ["quadruplet_id", "k", "answer", "predicted_switched", "correct"]
    builtin = (
        predictions.filter(pl.col("tm") == "oracle-lexical")
        .select(columns)
        .sort("k", "quadruplet_id")
    )
    assert builtin.height == 800
    summary = pl.read_csv(experiment / "summary.csv")
    reference = summary.filter(pl.col("tm") == "oracle-lexical").drop("tm")
    for tm in ("mine", "oracle-fn"):
        brought = predictions.filter(pl.col("tm") == tm).select(columns).sort("k", "quadruplet_id")
        assert brought.equals(builtin), tm
        assert summary.filter(pl.col("tm") == tm).drop("tm").equals(reference), tm
        for k in (4, 16):
            theories = byo_run / f"results/evaluation/theories/rows-400/{tm}/k-{k}.parquet"
            oracle = byo_run / f"results/evaluation/theories/rows-400/oracle-lexical/k-{k}.parquet"
            assert pl.read_parquet(theories)["theory"].equals(pl.read_parquet(oracle)["theory"])


def test_callable_runs_in_its_batch_job_behind_the_cache(byo_run):
    report = json.loads((byo_run / "results/evaluation/batches/tm/oracle-fn.json").read_text())
    assert report["backend"] == "python" and report["requests"] == 800
    assert report["generated"] == 800
    assert (byo_run / "results/llm_cache/evaluation_oracle-fn.sqlite").is_file()
    assert not (byo_run / "results/evaluation/batches/tm/mine.json").exists()  # read, not run
    proc = _snakemake(byo_run, "--forcerun", "evaluation_tm_batch")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((byo_run / "results/evaluation/batches/tm/oracle-fn.json").read_text())
    assert (report["cached"], report["generated"], report["engine_builds"]) == (800, 0, 0)


def test_a_theories_file_missing_rows_stops_with_one_line(byo_run, tmp_path):
    config = yaml.safe_load((byo_run / "config/config.yaml").read_text())
    short = pl.read_ndjson(byo_run / "byo/mine.jsonl").slice(3)
    short.write_ndjson(tmp_path / "short.jsonl")
    config["models"]["mine"]["theories"] = str(tmp_path / "short.jsonl")
    extra = tmp_path / "extra.yaml"
    extra.write_text(yaml.safe_dump(config))
    proc = _snakemake(byo_run, "--configfile", str(extra))
    assert proc.returncode != 0
    log = (byo_run / "logs/evaluation_theorize/rows-400/mine/k-4.log").read_text()
    first = pl.read_ndjson(byo_run / "byo/mine.jsonl").head(3)["quadruplet_id"].to_list()
    line = f"lacks 3 of 400 evaluation rows at k=4 ({', '.join(first)})"
    errors = [entry for entry in log.splitlines() if "config error" in entry]
    assert len(errors) == 1 and line in errors[0]
