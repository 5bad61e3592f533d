"""The `splits` command as a user meets it: every option of every (sub)command says what it is
and shows its default, `--version` answers, and `splits llm` leaves no file in the folder it is
run from (its response cache lives in the user's cache folder unless `--cache` names one)."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import splits
from splits.cli import COMMANDS, Parser, command_functions

REPO = Path(__file__).resolve().parents[1]


def _parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    """Every (sub)command's parser, built as `splits` builds it."""
    found = []

    def walk(name: str, parser: argparse.ArgumentParser) -> None:
        found.append((name, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, sub_parser in action.choices.items():
                    walk(f"{name} {sub}", sub_parser)

    for command, (module_name, help_text) in COMMANDS.items():
        parser = Parser(prog=f"splits {command}", description=help_text)
        configure_parser, _ = command_functions(importlib.import_module(module_name), command)
        configure_parser(parser)
        walk(f"splits {command}", parser)
    return found


PARSERS = _parsers()
SKIP_ACTIONS = (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)


@pytest.mark.parametrize("name,parser", PARSERS, ids=[name for name, _ in PARSERS])
def test_every_option_has_help_and_shows_its_default(name, parser):
    text = "".join(parser.format_help().split())  # wrapping breaks lines at spaces and hyphens
    for action in parser._actions:
        if isinstance(action, SKIP_ACTIONS):
            continue
        option = "/".join(action.option_strings) or action.dest
        assert action.help and action.help.strip(), f"{name} {option}: no help"
        shown = action.default is not None and action.default is not False and not action.required
        if shown and "default" not in action.help and "%(default)" not in action.help:
            shown_default = "".join(f"(default: {action.default})".split())
            assert shown_default in text, f"{name} {option}: default not shown"


def test_version():
    proc = subprocess.run(
        [sys.executable, "-m", "splits.cli", "--version"], capture_output=True, text=True
    )
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"splits {splits.__version__}"


def test_llm_leaves_no_file_in_the_working_folder(tmp_path):
    work = tmp_path / "anywhere"
    work.mkdir()
    (work / "in.jsonl").write_text(json.dumps({"prompt": "hello"}) + "\n")
    cache_home = tmp_path / "xdg-cache"
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home)}
    cmd = [sys.executable, "-m", "splits.cli", "llm", "--config", str(REPO / "config/config.yaml")]
    proc = subprocess.run(
        [*cmd, "--model", "no-theory", "--input", "in.jsonl", "--output", "out.jsonl"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in work.rglob("*")) == ["in.jsonl", "out.jsonl"]
    assert (cache_home / "splits" / "llm_cache.sqlite").is_file()
    help_text = subprocess.run(
        [*cmd, "--help"], cwd=work, env=env, capture_output=True, text=True
    ).stdout
    assert str(cache_home / "splits" / "llm_cache.sqlite") in "".join(help_text.split())


# A job's process exit (splits.cli.console): the interpreter's teardown skipped where nothing else
# runs, with everything a normal exit does for the outside world kept.
SETTINGS = json.dumps({"chunk_mb": 16})
CONSOLE_PROBE = """
import atexit, sys, threading
from pathlib import Path
from splits import cli
atexit.register(lambda: print("atexit function ran", flush=False))


class Mark:  # freed in the interpreter's teardown, which a quick exit skips
    def __del__(self):
        sys.stderr.write("teardown ran\\n")


mark = Mark()
if sys.argv[1] == "thread":  # a thread that is not a daemon writes its file after the command
    done = Path(sys.argv[2])
    # it waits for the main thread's end (not a fixed sleep, which a slow machine's command
    # outlasted: the thread was gone when the command chose its exit, and the test failed)
    main = threading.main_thread()
    threading.Thread(target=lambda: (main.join(), done.write_text("written"))).start()
print("unflushed line on stdout", end="")
sys.argv = ["splits", *sys.argv[3:]]
print(cli.quick_exit_allowed(), file=sys.stderr)
cli.console()
"""


def _console(tmp_path, mode: str, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CONSOLE_PROBE, mode, str(tmp_path / "thread.txt"), *command],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )


def test_console_quick_exit_keeps_status_streams_logs_and_atexit(tmp_path):
    bad = _console(
        tmp_path, "plain", "ingest", "--input", str(tmp_path / "absent.ndjson"),
        "--out", "o.parquet", "--report", "r.json", "--settings", SETTINGS,
    )  # fmt: skip
    assert bad.stderr.splitlines()[0] == "True"  # the quick exit is allowed here
    assert "teardown ran" not in bad.stderr  # and taken: no object was freed one by one
    assert bad.returncode == 2, bad.stderr  # the command's status
    assert "absent.ndjson" in bad.stderr  # its one error line
    assert bad.stdout == "unflushed line on stdoutatexit function ran\n"
    report = tmp_path / "r.json"
    corpus = tmp_path / "in.ndjson"
    corpus.write_text(
        json.dumps({"id": "a1", "author": "ann", "subreddit": "Cats", "created_utc": 5,
                    "body": "hello there", "link_id": "t3_x", "parent_id": "t3_x"}) + "\n"
    )  # fmt: skip
    run = _console(
        tmp_path, "plain", "ingest", "--input", str(corpus), "--out", "o.parquet",
        "--report", str(report), "--settings", SETTINGS,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stderr.splitlines()[0] == "True" and "teardown ran" not in run.stderr
    assert "INFO splits: ingest:" in run.stderr and "peak memory" in run.stderr  # logs flushed
    assert run.stdout.endswith("atexit function ran\n")
    assert json.loads(report.read_text())["posts"] == 1
    assert pl.read_parquet(tmp_path / "o.parquet")["subreddit"].to_list() == ["cats"]


def test_console_waits_for_a_running_thread_and_loaded_engines(tmp_path):
    corpus = tmp_path / "in.ndjson"
    corpus.write_text("")
    args = ("ingest", "--input", str(corpus), "--out", "o.parquet", "--report", "r.json")
    run = _console(tmp_path, "thread", *args, "--settings", SETTINGS)
    assert run.returncode == 0, run.stderr
    assert run.stderr.splitlines()[0] == "False"  # a thread still runs: the full exit
    assert "teardown ran" in run.stderr
    assert (tmp_path / "thread.txt").read_text() == "written"
    # an SQLite cache (the LLM stages') or an engine loaded: the full exit, which closes them
    probe = "import sys, {}; from splits import cli; print(cli.quick_exit_allowed())"
    for module in ("sqlite3", "json"):
        shown = subprocess.run(
            [sys.executable, "-c", probe.format(module)], capture_output=True, text=True
        ).stdout.strip()
        assert shown == ("False" if module == "sqlite3" else "True"), (module, shown)
