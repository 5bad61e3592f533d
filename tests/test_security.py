"""Security and crash safety of the pipeline (issue 26): hostile file names reach no shell, one
run per folder, outputs with the umask's mode, damaged files and OS errors as one line, sandbox
limits, and the salt and post-id guarantees of the exported dataset."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import copy_repo
from snakemake.utils import update_config

REPO = Path(__file__).resolve().parents[1]
SALT = "test-salt-issue26"

#: a folder name with every character a shell would act on, a leading dash and non-ASCII
HOSTILE_DIR = "-in put 'q' \"dq\" `touch PWNED_BT`; touch PWNED_SEMI; ü"
HOSTILE_OUT = "-res ult 'q' \"dq\" `touch PWNED_OUT`; $(touch PWNED_OUT2) é"


def _run(work: Path, *args: str, env: dict | None = None, timeout: int = 1200):
    cmd = [sys.executable, "-m", "snakemake", "--cores", "2", *args]
    return subprocess.run(
        cmd,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONHASHSEED": "0", **(env or {})},
    )


def _configure(work: Path, overrides: dict) -> None:
    cfg = work / "config" / "config.yaml"
    config = yaml.safe_load(cfg.read_text())
    update_config(config, overrides)
    cfg.write_text(yaml.safe_dump(config, allow_unicode=True))


def _pwned(root: Path) -> list[Path]:
    return [p for p in root.rglob("PWNED*") if p.is_file()]


def test_hostile_names_run_no_command_and_the_pipeline_completes(tmp_path):
    """Inputs named ``RC_$(touch PWNED).ndjson`` and with backticks, in a folder whose name has
    spaces, quotes, ``;``, a leading dash and non-ASCII, a config-named topics file there, and
    an outdir of the same kind: the whole default pipeline runs, and no name runs a command."""
    work = copy_repo(tmp_path / "repo")
    corpus = tmp_path / "corpus"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "splits.cli",
            "synth",
            "--demographics",
            "config/demographics.sample.yaml",
            "--topics",
            "config/topics.yaml",
            "--out",
            str(corpus),
            "--truth-dir",
            str(tmp_path / "truth"),
            "--shards",
            "1",
            "--format",
            "pushshift",
        ],
        cwd=work,
        check=True,
        capture_output=True,
    )
    hostile = work / HOSTILE_DIR
    hostile.mkdir()
    (corpus / "RC_sample-0.ndjson").rename(hostile / "RC_$(touch PWNED).ndjson")
    (corpus / "RS_sample-0.ndjson").rename(hostile / "RS_`touch PWNED2`;x \"q\" 'q'.ndjson")
    topics = hostile / "topics it's $(touch PWNED3).yaml"
    topics.write_text((work / "config" / "topics.yaml").read_text())
    _configure(
        work,
        {
            "synth": {"enabled": False},
            "outdir": HOSTILE_OUT,
            "topics": {"file": str(topics.relative_to(work))},
            "ingest": {
                "inputs": [str(p.relative_to(work)) for p in sorted(hostile.glob("R*.ndjson"))]
            },
        },
    )
    proc = _run(work, env={"SPLITS_SALT": SALT})
    assert not _pwned(tmp_path), _pwned(tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = work / HOSTILE_OUT
    assert (out / "dataset" / "export" / "README.md").is_file()
    assert (out / "posts" / "posts.parquet").is_file()
    assert not (work / "results").exists()
