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
