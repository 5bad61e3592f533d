"""The evaluation stage family's settings path: by hand, ``--config FILE`` reads the same settings
that a rule passes as ``--settings JSON`` (same outputs); each rule's settings hold only the keys
its job reads; the commands have no option of their own for a setting."""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
from pathlib import Path

import polars as pl
import pytest
from splits.cli import COMMANDS, Parser, main
from splits.config.schema import load_config, validate_config
from splits.config.settings import settings_json
from splits.evaluation.settings import (
    CMSettings,
    GroupSplitsSettings,
    MetricsSettings,
    SubsampleSettings,
    TMPromptSettings,
    TMSettings,
)
from splits.io import write_parquet


def _quadruplets(n=12, k=4):
    rng = random.Random(5)
    return pl.DataFrame(
        [
            {
                "quadruplet_id": f"q{i}",
                "description": "Basketball",
                "category": "Sports & Fitness",
                "demographic_A": "catholic",
                "demographic_B": "teacher",
                "example_posts": [f"post {j} of row {i} about the parish game" for j in range(k)],
                "example_labels": ["A", "B"] * (k // 2),
                "sample_A": ["We went to Mass before the parish game. " * 4, "Lent again"],
                "sample_B": ["Grading tonight, then my students' game. " * 4, "school team"],
                "switched": rng.random() < 0.5,
            }
            for i in range(n)
        ]
    )


@pytest.fixture
def config_file(tmp_path):
    """A by-hand config: a few evaluation keys and the seed set, the rest from the schema."""
    path = tmp_path / "config.yaml"
    path.write_text(
        "seed: 11\n"
        "evaluation:\n"
        "  dataset_layout: by_group\n"
        "  max_post_chars: 25\n"
        "  cm_sampling: {max_tokens: 50}\n"
    )
    return path


def _run(argv: list[str]) -> None:
    assert main(argv) == 0, argv


def test_by_hand_config_equals_the_rules_settings(tmp_path, config_file, repo_root):
    """subsample, generate, classify and metrics run by hand with --config write exactly what
    they write with the --settings value a rule builds from the same config."""
    write_parquet(_quadruplets(), tmp_path / "quads.parquet")
    config = load_config(config_file)
    no_theory = json.dumps({"backend": "builtin", "kind": "no-theory"})
    lexical = json.dumps({"backend": "builtin", "kind": "lexical"})
    outputs = {}
    for how in ("config", "settings"):
        out = tmp_path / how
        out.mkdir()

        def source(cls, how=how):
            if how == "config":
                return ["--config", str(config_file)]
            return ["--settings", settings_json(config, cls)]

        rows = str(out / "rows.parquet")
        _run(
            ["theorize", "subsample", "--dataset", str(tmp_path / "quads.parquet"), "--rows"]
            + ["8", "--out", rows, "--report", str(out / "rows.json")]
            + source(SubsampleSettings)
        )
        theories = str(out / "theories.parquet")
        _run(
            ["theorize", "generate", "--rows", rows, "--k", "2", "--model", "no-theory"]
            + ["--model-spec", no_theory, "--out", theories]
            + source(TMSettings)
        )
        predictions = str(out / "predictions.parquet")
        _run(
            ["classify", "--rows", rows, "--theories", theories, "--model", "lexical"]
            + [
                "--model-spec",
                lexical,
                "--template",
                str(repo_root / "resources/prompts/classify.txt"),
            ]
            + ["--out", predictions, "--summary", str(out / "summary.json")]
            + source(CMSettings)
        )
        _run(
            ["metrics", "--rows", rows, "--predictions", predictions, "--experiment", "x"]
            + ["--groups", "{}", "--out-dir", str(out / "metrics")]
            + source(MetricsSettings)
        )
        outputs[how] = {
            path.relative_to(out): path.read_bytes() for path in out.rglob("*") if path.is_file()
        }
    assert outputs["config"].keys() == outputs["settings"].keys()
    assert len(outputs["config"]) >= 8
    for name, data in outputs["config"].items():
        assert data == outputs["settings"][name], f"{name} differs between --config and --settings"
    report = json.loads(outputs["config"][Path("rows.json")])
    assert report["seed"] == 11 and report["layout"] == "by_group"  # the file's, not the defaults
    predictions = pl.read_parquet(tmp_path / "config" / "predictions.parquet")
    assert predictions.height == 8


def test_the_config_file_is_read_not_the_defaults(tmp_path, config_file):
    """The same subsample with the schema's seed orders the rows differently (the file's seed
    is the one used), so the equality above is not two runs of the defaults."""
    write_parquet(_quadruplets(), tmp_path / "quads.parquet")
    order = {}
    for name, config in (("file", load_config(config_file)), ("defaults", validate_config({}))):
        out = tmp_path / f"{name}.parquet"
        _run(
            ["theorize", "subsample", "--dataset", str(tmp_path / "quads.parquet"), "--rows"]
            + ["all", "--out", str(out), "--settings", settings_json(config, SubsampleSettings)]
        )
        order[name] = pl.read_parquet(out)["quadruplet_id"].to_list()
    assert sorted(order["file"]) == sorted(order["defaults"])
    assert order["file"] != order["defaults"]


def _with(change) -> dict:
    config = validate_config({})
    change(config)
    return config


@pytest.mark.parametrize(
    ("cls", "change", "changes"),
    [
        (TMSettings, lambda c: c["evaluation"].update(tm_raw_prompt=True), False),
        (TMPromptSettings, lambda c: c["evaluation"].update(tm_raw_prompt=True), True),
        (TMSettings, lambda c: c["evaluation"]["cm_sampling"].update(max_tokens=9), False),
        (TMSettings, lambda c: c["evaluation"]["tm_sampling"].update(max_tokens=9), True),
        (CMSettings, lambda c: c["evaluation"]["tm_sampling"].update(temperature=0.5), False),
        (CMSettings, lambda c: c["evaluation"]["cm_sampling"].update(temperature=0.5), True),
        (CMSettings, lambda c: c["evaluation"].update(max_post_chars=10), True),
        (SubsampleSettings, lambda c: c["evaluation"].update(max_post_chars=10), False),
        (SubsampleSettings, lambda c: c["evaluation"].update(dataset_layout="by_group"), True),
        (MetricsSettings, lambda c: c["evaluation"].update(max_post_chars=10), False),
        (GroupSplitsSettings, lambda c: c.update(seed=3), True),
    ],
)
def test_a_rules_settings_hold_only_the_keys_its_job_reads(cls, change, changes):
    """What Snakemake compares between runs: a key changes a rule's settings value exactly
    when that rule's job reads it (so editing it re-runs only those jobs)."""
    before = settings_json(validate_config({}), cls)
    after = settings_json(_with(change), cls)
    assert (before != after) is changes


def test_tm_raw_prompt_is_read_by_prompt_tms_only():
    """A TM with a prompt template sends it raw when evaluation.tm_raw_prompt is set; a TM
    without one (builtin, python) gets the posts as a chat message whatever that key says."""
    raw = _with(lambda c: c["evaluation"].update(tm_raw_prompt=True))
    values = json.loads(settings_json(raw, TMPromptSettings))
    assert values["tm_raw_prompt"] is True
    assert TMPromptSettings(**{**values, "sampling": None}).raw_prompt is True
    assert "tm_raw_prompt" not in json.loads(settings_json(raw, TMSettings))
    assert TMSettings(max_post_chars=1, sampling=None, seed=0).raw_prompt is False


EVALUATION_COMMANDS = [
    name for name, (module, _) in COMMANDS.items() if module.startswith("splits.evaluation.")
]
SETTING_FLAGS = {
    f"--{name.replace('_', '-')}"
    for cls in (SubsampleSettings, TMPromptSettings, CMSettings, MetricsSettings)
    for field in dataclasses.fields(cls)
    for name in (field.name, field.name.removeprefix("tm_"), "temperature", "max_tokens", "layout")
}


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    found = set()
    for action in parser._actions:
        found |= set(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _option_strings(sub)
    return found


@pytest.mark.parametrize("command", EVALUATION_COMMANDS)
def test_no_command_has_its_own_option_for_a_setting(command):
    """Settings come through --settings/--config only (one spelling, one default: the
    schema's); ``splits report`` reads none."""
    import importlib

    parser = Parser(prog=command)
    importlib.import_module(COMMANDS[command][0]).configure_parser(parser)
    options = _option_strings(parser)
    assert not options & SETTING_FLAGS, sorted(options & SETTING_FLAGS)
    if command != "report":
        assert {"--settings", "--config"} <= options


def test_settings_missing_a_key_is_one_line(tmp_path, capsys):
    write_parquet(_quadruplets(), tmp_path / "quads.parquet")
    argv = ["theorize", "subsample", "--dataset", str(tmp_path / "quads.parquet"), "--rows"]
    argv += ["4", "--out", str(tmp_path / "rows.parquet"), "--settings", '{"seed": 1}']
    assert main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "missing dataset_layout" in err[0]
    assert not (tmp_path / "rows.parquet").exists()


def test_a_tms_jobs_get_the_prompt_settings_only_with_a_prompt():
    """The lookup the TM rules use: a TM with a prompt file gets --template and settings with
    tm_raw_prompt; a TM without one gets neither (editing tm_raw_prompt re-runs LLM TMs only)."""
    from splits.pipeline.targets import evaluation_tm_prompt_args, evaluation_tm_settings

    raw = _with(lambda c: c["evaluation"].update(tm_raw_prompt=True))
    assert evaluation_tm_prompt_args(["theory.txt"]) == ["--template", "theory.txt"]
    assert evaluation_tm_prompt_args([]) == []
    assert json.loads(evaluation_tm_settings(raw, ["theory.txt"]))["tm_raw_prompt"] is True
    assert evaluation_tm_settings(raw, []) == evaluation_tm_settings(validate_config({}), [])
