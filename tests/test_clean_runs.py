"""What a user sees around a run of the default pipeline: a run killed with SIGKILL (Snakemake and
its jobs, as a closed terminal or the OOM killer would) is finished by the plain command with no
manual step, its outputs byte for byte those of a clean run (the recorded manifest of the default
outputs, tests/data/default_outputs.json), and the checkout stays clean (no tracked or untracked
file changes). The session's default run is that killed and finished run (``interrupted_run`` in
tests/conftest.py, which records what each step returned): a whole pipeline run of its own would
be this file's cost."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest
from conftest import interrupted_record_path
from default_outputs import differences_from_manifest


@pytest.fixture(scope="module")
def killed_run(default_run) -> dict:
    """What the default run's steps returned: ``killed`` (the killed run's return code),
    ``locks`` (the locks it left), ``done`` (the plain command's return code and output),
    ``again`` (the plain command once more) and ``git_status`` (of the committed checkout)."""
    return json.loads(interrupted_record_path(default_run).read_text())


def test_run_leaves_checkout_clean_and_repeats_byte_for_byte(killed_run, default_run):
    """The finished run's outputs are byte for byte those of a clean run of the same command and
    config (the recorded manifest), and the checkout holds no change and no new file."""
    assert killed_run["done"]["returncode"] == 0, killed_run["done"]["stderr"][-4000:]
    assert killed_run["git_status"] == ""
    assert (default_run / "results" / "benchmarks").is_dir()  # the benchmark records, ignored
    assert not list((default_run / ".snakemake" / "locks").glob("*.lock"))  # none left behind
    missing_or_extra, changed = differences_from_manifest(default_run / "results")
    assert missing_or_extra == [], "the finished run's output files are not a clean run's"
    assert changed == [], f"{len(changed)} outputs differ from a clean run's: {changed[:20]}"


def test_killed_run_is_finished_by_the_plain_command(killed_run, default_run):
    assert killed_run["killed"] == -signal.SIGKILL, "the run finished before it could be killed"
    assert killed_run["locks"], "the killed run left no lock"
    done = killed_run["done"]
    assert done["returncode"] == 0, done["stderr"][-4000:]
    assert "Removed the locks of a killed Snakemake run" in done["stderr"]
    assert "Traceback" not in done["stdout"] + done["stderr"]
    again = killed_run["again"]
    assert again["returncode"] == 0 and "Nothing to be done" in again["output"]


def test_no_test_installs_system_packages():
    """Tests skip, with the reason, where a system tool is missing; `.ci/run` installs them."""
    package_manager = re.compile(r"""\[\s*["'](?:apt-get|apt|dpkg|yum|dnf)["']""")
    here = Path(__file__).resolve().parent
    calls = [
        f"{path.name}: {line.strip()}"
        for path in sorted(here.rglob("*.py"))
        for line in path.read_text().splitlines()
        if package_manager.search(line)
    ]
    assert calls == []
