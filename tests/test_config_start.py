"""What the Snakefile does with a config before any job runs: `--config` values typed by the
schema, `--configfile` replacing the default config, each run's own output root, and the
cross-key checks that stop `snakemake -n` with one line naming the key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import snakemake_fork
import yaml
from conftest import copy_repo
from splits.config.schema import coerce_to_schema, load_schema, read_config_file, validate_config
from splits.errors import ConfigError
from splits.pipeline.start import check_config


def _dry(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return snakemake_fork.run(["-n", "--cores", "2", *args], workdir, timeout=300)


def _config_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("config error")]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return copy_repo(tmp_path_factory.mktemp("config_start") / "repo")


def _default_config(work: Path) -> dict:
    return yaml.safe_load((work / "config" / "config.yaml").read_text())


# --------------------------------------------------------------------------- --config values


def test_strings_are_typed_by_the_schema():
    config = {
        "sampling": {"k": "16"},
        "synth": {"enabled": "false", "shards": "3"},
        "seed": 7,
        "topics": {"drop_fraction": "0.5", "file": "123"},
        "evaluation": {"experiments": {"e": {"tms": "[a, b]", "cms": ["c"], "ks": "[2, 4]"}}},
        "probes": {"reference_dir": "null"},
        "graph": {"k": "many"},
    }
    coerce_to_schema(config, load_schema())
    assert config["sampling"]["k"] == 16
    assert config["synth"] == {"enabled": False, "shards": 3}
    assert config["topics"] == {"drop_fraction": 0.5, "file": "123"}  # file: a string key
    experiment = config["evaluation"]["experiments"]["e"]
    assert experiment["tms"] == ["a", "b"] and experiment["ks"] == [2, 4]
    assert config["probes"]["reference_dir"] is None
    # a value that does not parse to the schema's type is left for validation to name
    assert config["graph"]["k"] == "many"
    with pytest.raises(ConfigError, match=r"^graph\.k: 'many' is not of type 'integer'$"):
        validate_config(config)


def test_nested_config_value_on_the_command_line(work):
    proc = _dry(work, "--config", "sampling={k: 16}", "synth={shards: 3}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "results/posts/shards/sample-2.parquet" in proc.stdout


# --------------------------------------------------------------------------- --configfile


def test_configfile_replaces_the_default_and_has_its_own_output_root(work, tmp_path):
    mine = _default_config(work)
    mine["outdir"] = "results/mine"
    mine["evaluation"]["experiments"] = {"mine": mine["evaluation"]["experiments"]["sample"]}
    mine["hypotheses"]["theories"] = [{"experiment": "mine", "tm": "oracle-lexical", "k": 16}]
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(mine))

    replaced = _dry(work, "--configfile", str(path))
    assert replaced.returncode == 0, replaced.stderr[-2000:]
    assert "results/mine/evaluation/experiments/mine/metrics.json" in replaced.stdout
    assert "experiments/sample/" not in replaced.stdout
    assert "results/posts/" not in replaced.stdout.replace("results/mine/posts/", "")

    extended = _dry(work, "--configfile", "config/config.yaml", str(path))
    assert extended.returncode == 0, extended.stderr[-2000:]
    out = extended.stdout
    assert "results/mine/evaluation/experiments/mine/metrics.json" in out
    assert "results/mine/evaluation/experiments/sample/metrics.json" in out


def test_default_run_writes_under_results(work):
    proc = _dry(work)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "results/evaluation/experiments/sample/metrics.json" in proc.stdout


def test_schema_defaults_fill_a_short_configfile(work, tmp_path):
    path = tmp_path / "short.yaml"
    # the probes' default model is the builtin stand-in, which the registry must list; the
    # default encoder (bert-base-uncased) is a download, so this offline run names the builtin one
    path.write_text(
        "outdir: results/short\nsampling: {k: 8}\n"
        "models: {probe-scripted: {backend: builtin, kind: probe-scripted},\n"
        "  ngram-encoder: {backend: builtin, kind: hashed-ngrams}}\n"
        "hypotheses: {encoder: ngram-encoder}\n"
    )
    proc = _dry(work, "--configfile", str(path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "results/short/dataset/quadruplets.parquet" in proc.stdout


# --------------------------------------------------------------------------- broken YAML


def test_broken_yaml_names_the_file(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("sampling:\n  k: [16\n")
    with pytest.raises(ConfigError) as err:
        read_config_file(bad)
    message = str(err.value)
    assert message.startswith(f"{bad}: not valid YAML") and "\n" not in message


def test_broken_default_config_names_the_file(tmp_path):
    work = copy_repo(tmp_path / "repo")
    cfg = work / "config" / "config.yaml"
    cfg.write_text(cfg.read_text().replace("sampling:\n", "sampling: [\n", 1))
    proc = _dry(work)
    assert proc.returncode != 0
    lines = _config_lines(proc)
    assert len(lines) == 1 and lines[0].startswith(
        "config error: config/config.yaml: not valid YAML"
    )
    assert "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- cross-key checks


def _checked(repo_root: Path, edit) -> None:
    config = validate_config(yaml.safe_load((repo_root / "config" / "config.yaml").read_text()))
    edit(config)
    check_config(config)


def test_shipped_default_config_passes(repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    _checked(repo_root, lambda c: None)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda c: c["evaluation"]["experiments"]["sample"]["tms"].append("nope"),
            "evaluation.experiments.sample.tms: 'nope' is not a model of the models registry",
        ),
        (
            lambda c: c["evaluation"]["experiments"].update(
                {"bad name": c["evaluation"]["experiments"]["sample"]}
            ),
            "evaluation.experiments.bad name: name 'bad name' goes into file paths",
        ),
        (
            lambda c: c["evaluation"]["tm_prompts"].update({"nope": "x.txt"}),
            "evaluation.tm_prompts.nope: not a model of the models registry",
        ),
        (
            lambda c: c["demographics"].update({"verifier": "llm", "verifier_model": "nope"}),
            "demographics.verifier_model: 'nope' is not a model of the models registry",
        ),
        (
            lambda c: c["topics"]["generate"].update({"model": "nope"}),
            "topics.generate.model: 'nope' is not a model of the models registry",
        ),
        (
            lambda c: c["probes"]["stress"].update({"model": "nope"}),
            "probes.stress.model: 'nope' is not a model of the models registry",
        ),
        (
            lambda c: c["probes"]["personalization"].update({"judge_model": "nope"}),
            "probes.personalization.judge_model: 'nope' is not a model of the models registry",
        ),
        (
            lambda c: (c["synth"].update({"enabled": False}), c["ingest"].update({"inputs": []})),
            "ingest.inputs: empty while synth.enabled is false",
        ),
        (
            lambda c: c["probes"].update({"reference_dir": "no/such/folder"}),
            "probes.reference_dir: no/such/folder lacks dreaddit/dreaddit-train.csv",
        ),
    ],
)
def test_cross_key_errors_name_the_key(repo_root, monkeypatch, edit, message):
    monkeypatch.chdir(repo_root)
    with pytest.raises(ConfigError) as err:
        _checked(repo_root, edit)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_reference_dir_missing_stops_the_dry_run_with_one_line(work):
    proc = _dry(work, "probes_reference", "--config", "probes={reference_dir: no/such/folder}")
    assert proc.returncode != 0
    assert "MissingInputException" not in proc.stdout + proc.stderr
    assert _config_lines(proc) == [
        "config error: probes.reference_dir: no/such/folder lacks dreaddit/dreaddit-train.csv"
    ]


def test_ks_beyond_a_given_datasets_calibration_set_stop_at_start(work, tmp_path):
    """An evaluation.dataset cannot be re-sampled for larger ks (unlike the pipeline's own
    quadruplets, see evaluation_sweep_dataset): ks beyond its calibration set stop the dry run."""
    dataset = tmp_path / "quadruplets.parquet"
    pl.DataFrame({"example_posts": [["p"] * 8, ["p"] * 6]}).write_parquet(dataset)
    config = _default_config(work)
    config["evaluation"]["dataset"] = str(dataset)
    config["evaluation"]["experiments"]["sample"]["ks"] = [2, 8]
    config["hypotheses"]["theories"][0]["k"] = 8
    path = tmp_path / "big_k.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = _dry(work, "--configfile", str(path))
    assert proc.returncode != 0
    assert _config_lines(proc) == [
        f"config error: evaluation.experiments.sample.ks: k=8 exceeds the calibration set size "
        f"(6) of evaluation.dataset {dataset}"
    ]


# --------------------------------------------------------------------------- issue 25 start checks


def test_disabled_probes_need_no_probe_model(repo_root, monkeypatch, work, tmp_path):
    """probes.enabled: false with no probe model in the registry passes the start checks and
    the dry run (the probe rules' model specs are read only by their jobs)."""
    monkeypatch.chdir(repo_root)

    def edit(c):
        del c["models"]["probe-scripted"]
        c["probes"]["enabled"] = False

    _checked(repo_root, edit)
    config = _default_config(work)
    edit(config)
    path = tmp_path / "noprobes.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = _dry(work, "--configfile", str(path))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
    assert "probe_stress" not in proc.stdout


def test_missing_backend_extras_stop_at_start_naming_the_pip_extra(
    repo_root, monkeypatch, tmp_path
):
    """A chosen encoder or model whose backend's packages are missing stops at start, naming the
    key, the model, the modules and the extra (sys.modules[name] = None: not importable)."""
    monkeypatch.chdir(repo_root)
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ConfigError) as err:
        _checked(repo_root, lambda c: c["hypotheses"].update({"encoder": "bert-base-uncased"}))
    line = str(err.value)
    assert line.startswith("hypotheses.encoder: model 'bert-base-uncased' (backend transformers)")
    assert "needs torch," in line and "splits[llm]" in line and "\n" not in line

    def local_tm(c):
        c["models"]["local"] = {"backend": "transformers", "model": "some/model"}
        c["evaluation"]["experiments"]["sample"]["tms"].append("local")

    with pytest.raises(ConfigError, match=r"^evaluation.experiments \(local\): model 'local'"):
        _checked(repo_root, local_tm)
    # the shipped default (builtin models, the hashed n-gram encoder) needs neither
    _checked(repo_root, lambda c: None)
    # nor does a transformers model that no stage uses
    _checked(
        repo_root,
        lambda c: c["models"].update({"spare": {"backend": "transformers", "model": "x"}}),
    )
    # with --use-conda the jobs' environments bring the packages: nothing to check here
    config = validate_config(yaml.safe_load((repo_root / "config" / "config.yaml").read_text()))
    local_tm(config)
    config["models"]["local"]["model"] = str(tmp_path)  # a local folder: no hub needed
    check_config(config, check_packages=False)


def test_packages_are_left_to_the_jobs_only_under_conda():
    from types import SimpleNamespace

    from snakemake.settings.types import DeploymentMethod, DeploymentSettings
    from splits.pipeline.start import jobs_bring_software

    conda = DeploymentSettings(deployment_method={DeploymentMethod.CONDA})
    assert jobs_bring_software(SimpleNamespace(deployment_settings=conda))
    assert not jobs_bring_software(SimpleNamespace(deployment_settings=DeploymentSettings()))
    assert not jobs_bring_software(SimpleNamespace(deployment_settings=None))


def test_missing_torch_stops_the_dry_run_with_one_line(work, tmp_path):
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None\n")
    paths = [str(hide), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "2", "--config",
         "hypotheses={encoder: bert-base-uncased}"],
        cwd=work, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode != 0
    lines = _config_lines(proc)
    assert len(lines) == 1 and "hypotheses.encoder" in lines[0] and "splits[llm]" in lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_the_snakefiles_imports_and_config_checks_load_no_polars():
    """Every Snakemake start (a dry run, each Slurm job's two) imports the modules the Snakefile
    and the rule files name and checks the config's topics; none of that needs polars or numpy
    (~0.15 s a start). In a fresh interpreter: the modules the files import, found in the files
    themselves, then the default config's check, then neither library loaded."""
    repo = Path(__file__).resolve().parents[1]
    sources = [repo / "Snakefile", *sorted((repo / "workflow" / "rules").glob("*.smk"))]
    modules = sorted(
        {
            line.split()[1]
            for path in sources
            for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip().startswith("from splits") and " import " in line
        }
    )
    assert "splits.privacy" in modules and "splits.report.tables" in modules
    probe = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in modules)
        + "from splits.config.schema import read_config_file\n"
        + "from splits.config.definitions import load_topics\n"
        + "config = read_config_file('config/config.yaml')\n"
        + "assert load_topics(config['topics']['file'])\n"
        + "print(sorted({'polars', 'numpy'} & set(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=repo, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
