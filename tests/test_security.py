"""Security and crash safety of the pipeline (issue 26): hostile file names reach no shell, one
run per folder, outputs with the umask's mode, damaged files and OS errors as one line, sandbox
limits, and the salt and post-id guarantees of the exported dataset."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import snakemake_fork
import yaml
from conftest import copy_repo, error_lines
from snakemake.utils import update_config
from splits.config.settings import schema_defaults
from splits.errors import InputError
from splits.ingest.settings import IngestSettings, SynthSettings
from splits.io import ParquetAppender, atomic_path, write_json, write_parquet, write_text

REPO = Path(__file__).resolve().parents[1]
SALT = "test-salt-issue26"

#: a folder name with every character a shell would act on, a leading dash and non-ASCII
HOSTILE_DIR = "-in put 'q' \"dq\" `touch PWNED_BT`; touch PWNED_SEMI; ü"
HOSTILE_OUT = "-res ult 'q' \"dq\" `touch PWNED_OUT`; $(touch PWNED_OUT2) é"


def _run(work: Path, *args: str, env: dict | None = None, timeout: int = 1200, umask: int = -1):
    env = {**os.environ, "PYTHONHASHSEED": "0", **(env or {})}
    return snakemake_fork.run(["--cores", "2", *args], work, env, timeout, umask=umask)


def _configure(work: Path, overrides: dict) -> None:
    cfg = work / "config" / "config.yaml"
    config = yaml.safe_load(cfg.read_text())
    update_config(config, overrides)
    cfg.write_text(yaml.safe_dump(config, allow_unicode=True))


def _pwned(root: Path) -> list[Path]:
    return [p for p in root.rglob("PWNED*") if p.is_file()]


# a value a rule puts into its shell command: {input}, {output.x}, {params.x}, {log}, ...
SHELL_VALUE = re.compile(
    r"\{(input|output|params|log|wildcards|resources)(\.\w+)?(\[[^\]]*\])?(:\w+)?\}"
)


def shell_commands(rule_file: Path) -> list[str]:
    """The string lines of every ``shell:`` block of a rule file."""
    commands, in_shell = [], False
    for line in rule_file.read_text().splitlines():
        stripped = line.strip()
        if stripped == "shell:":
            in_shell = True
            continue
        if in_shell and stripped.startswith(('"', "'", 'f"', "f'")):
            commands.append(stripped)
            continue
        in_shell = False
    return commands


def test_every_rule_quotes_every_value_of_its_shell_command():
    """Static twin of the hostile-names run: a new rule cannot slip an unquoted value in."""
    unquoted = []
    for rule_file in sorted((REPO / "workflow" / "rules").glob("*.smk")):
        commands = shell_commands(rule_file)
        assert commands or rule_file.name == "common.smk", rule_file
        for command in commands:
            for match in SHELL_VALUE.finditer(command):
                if match.group(4) != ":q":
                    unquoted.append(f"{rule_file.name}: {match.group(0)}")
    assert not unquoted, unquoted


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
            "--settings",
            _settings(SynthSettings, shards=1, format="pushshift"),
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
    groups = hostile / "-demographics `touch PWNED4` ü.yaml"
    groups.write_text((work / "config" / "demographics.sample.yaml").read_text())
    _configure(
        work,
        {
            "synth": {"enabled": False},
            "outdir": HOSTILE_OUT,
            "topics": {"file": str(topics.relative_to(work))},
            "demographics": {"file": str(groups.relative_to(work))},
            "ingest": {
                "inputs": [str(p.relative_to(work)) for p in sorted(hostile.glob("R*.ndjson"))]
            },
        },
    )
    proc = _run(work, env={"SPLITS_SALT": SALT}, umask=0o002)
    assert not _pwned(tmp_path), _pwned(tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = work / HOSTILE_OUT
    # every output has the umask's mode (0664 under 002): the group can read the results
    modes = {str(p): oct(p.stat().st_mode & 0o777) for p in out.rglob("*") if p.is_file()}
    assert set(modes.values()) == {"0o664"}, {p: m for p, m in modes.items() if m != "0o664"}
    assert (out / "dataset" / "export" / "README.md").is_file()
    assert (out / "posts" / "posts.parquet").is_file()
    assert not (work / "results").exists()


#: Snakemake stopped (SIGSTOP) right after it took its locks, before ``onstart``: the window in
#: which the run's owner was not yet recorded
STOP_AFTER_LOCK = """
import os, signal, sys
from contextlib import contextmanager
from snakemake.persistence import PersistenceBase
from snakemake.cli import main

taking = PersistenceBase.lock.__wrapped__

@contextmanager
def lock_then_stop(self):
    with contextmanager(taking)(self):
        os.kill(os.getpid(), signal.SIGSTOP)
        yield

PersistenceBase.lock = lock_then_stop
sys.argv = ["snakemake", *sys.argv[1:]]
main()
"""


def _stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


def test_second_run_in_the_lock_window_refuses_and_keeps_the_first_runs_locks(tmp_path):
    """The first run is stopped inside the window (its locks taken, its owner not recorded by
    ``onstart``; the folder holds the owner record of an earlier, killed run): a second plain run
    stops with one line naming the first, and the first run's locks stay."""
    work = copy_repo(tmp_path / "repo")
    state = work / ".snakemake"
    state.mkdir()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    # the owner record a killed earlier run left (its process is gone)
    (state / "splits_lock_owner.json").write_text(
        json.dumps({"host": socket.gethostname(), "pid": int(dead.stdout), "started": 1.0})
    )
    target = "results/sample/synth_meta.json"
    script = tmp_path / "stop_after_lock.py"
    script.write_text(STOP_AFTER_LOCK)
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    first = subprocess.Popen(
        [sys.executable, str(script), "--cores", "1", target],
        cwd=work,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )
    try:
        deadline = time.time() + 300
        while not _stopped(first.pid):
            assert first.poll() is None, "the first run ended before taking its locks"
            assert time.time() < deadline, "the first run never reached its locks"
            time.sleep(0.1)
        locks = sorted(p.name for p in (state / "locks").glob("*.lock"))
        assert locks, "the first run holds no lock"
        second = _run(work, target, timeout=300)
        lines = error_lines(second.stderr)
        assert second.returncode != 0
        assert len(lines) == 1, second.stderr
        assert f"pid {first.pid}" in lines[0] and "running in this folder" in lines[0], lines
        assert sorted(p.name for p in (state / "locks").glob("*.lock")) == locks
        assert not (work / target).exists()
        dry = _run(work, target, "-n", timeout=300)  # a dry run makes nothing: let through
        assert dry.returncode == 0, dry.stderr[-2000:]
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()


@pytest.mark.parametrize("mask", [0o002, 0o022, 0o077])
def test_outputs_have_the_umasks_mode(tmp_path, mask):
    """Every writer of splits.io gives its output the mode of a plain ``open`` under the umask
    (0664 under umask 002: the group reads and writes results), not mkstemp's 0600."""
    frame = pl.DataFrame({"a": [1, 2]})
    old = os.umask(mask)
    try:
        paths = [
            write_parquet(frame, tmp_path / "t.parquet"),
            write_json({"a": 1}, tmp_path / "t.json"),
            write_text("x", tmp_path / "t.txt"),
        ]
        appender = ParquetAppender(tmp_path / "a.parquet")
        appender.write(frame)
        paths.append(appender.close())
        with atomic_path(tmp_path / "any.bin") as tmp:
            tmp.write_bytes(b"x")
        paths.append(tmp_path / "any.bin")
    finally:
        os.umask(old)
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in paths} == {
        p.name: oct(0o666 & ~mask) for p in paths
    }


def _settings(cls: type, **overrides) -> str:
    """A stage's ``--settings`` value: the schema's defaults, some replaced."""
    return json.dumps(dataclasses.asdict(schema_defaults(cls, **overrides)))


def _splits(*args: str, cwd: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "splits.cli", *args], cwd=cwd, capture_output=True, text=True, **kw
    )


def _posts_and_report(folder: Path) -> tuple[Path, Path]:
    """A small posts shard and its ingest report, made by `splits ingest` from a tiny dump."""
    folder.mkdir(parents=True, exist_ok=True)
    dump = folder / "RC_2019-01.ndjson"
    dump.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"c{i}",
                    "author": f"user{i % 3}",
                    "subreddit": "soccer",
                    "body": f"the goal number {i} was great",
                    "created_utc": 1546300800 + i,
                    "link_id": "t3_abc",
                    "parent_id": "t3_abc",
                    "score": 1,
                }
            )
            + "\n"
            for i in range(20)
        )
    )
    posts, report = folder / "a.parquet", folder / "a.report.json"
    made = _splits(
        "ingest",
        "--input",
        str(dump),
        "--shard",
        "a",
        "--out",
        str(posts),
        "--report",
        str(report),
        "--settings",
        _settings(IngestSettings),
        cwd=folder,
    )
    assert made.returncode == 0, made.stderr[-2000:]
    return posts, report


def test_damaged_and_unreadable_inputs_are_one_line_naming_the_file(tmp_path):
    """Truncated and empty Parquet, cut JSON, a folder where a file belongs: each stops the
    stage with one line naming the file and what is wrong, before the stage reads anything."""
    posts, report = _posts_and_report(tmp_path / "in")
    data = posts.read_bytes()
    cases = {}
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(data[: len(data) // 2])
    cases["cut"] = (["--posts", str(cut), "--reports", str(report)], cut, "damaged Parquet")
    empty = tmp_path / "empty.parquet"
    empty.write_bytes(b"")
    cases["empty"] = (["--posts", str(empty), "--reports", str(report)], empty, "empty Parquet")
    half = tmp_path / "half.report.json"
    half.write_text(report.read_text()[:5])
    cases["json"] = (["--posts", str(posts), "--reports", str(half)], half, "damaged JSON")
    folder = tmp_path / "folder.parquet"
    folder.mkdir()
    cases["folder"] = (["--posts", str(folder), "--reports", str(report)], folder, "directory")
    for name, (args, path, what) in cases.items():
        out = tmp_path / f"out-{name}"
        proc = _splits(
            "merge-posts",
            *args,
            "--out",
            str(out / "posts.parquet"),
            "--report",
            str(out / "r.json"),
            cwd=tmp_path,
        )
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode != 0, name
        assert "Traceback" not in proc.stderr, (name, proc.stderr[-2000:])
        assert len(lines) == 1, (name, proc.stderr)
        assert str(path) in lines[0] and what in lines[0], (name, lines)
        assert not (out / "posts.parquet").exists()


def test_json_lines_named_json_are_not_called_damaged(tmp_path):
    """A Pushshift dump named ``RC_....json`` holds one JSON object per line: no error."""
    from splits.filecheck import check_file

    dump = tmp_path / "RC_2015-01.json"
    dump.write_text('{"id": "a"}\n{"id": "b"}\n')
    check_file(dump)
    # its stage counts a malformed or non-UTF-8 line as a skip: the check leaves them to it
    dump.write_bytes(b'{"id": \xff\n{"id": "b"}\n')
    check_file(dump)
    # a pretty-printed report cut short is still damaged
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"a": [{"b": 1}, {"c": 2}]}, indent=2)[:-3])
    with pytest.raises(InputError, match="damaged JSON file"):
        check_file(report)


def test_making_rule_is_read_from_snakemakes_record(tmp_path, monkeypatch):
    from base64 import urlsafe_b64encode

    from splits.filecheck import making_rule, remedy

    monkeypatch.chdir(tmp_path)
    name = "results/posts/posts.parquet"
    meta = tmp_path / ".snakemake" / "metadata"
    meta.mkdir(parents=True)
    (meta / urlsafe_b64encode(name.encode()).decode()).write_text(json.dumps({"rule": "merge"}))
    assert making_rule(name) == "merge"
    assert remedy(name) == "re-create it: snakemake --cores all --forcerun merge"
    assert making_rule("other.parquet") is None
    assert "replace it" in remedy("other.parquet")


def test_damaged_intermediate_stops_with_one_line_and_forcerun_remakes_it(tmp_path):
    """The issue's case: a truncated results/posts/posts.parquet. The next stage stops with one
    line naming the file and `--forcerun merge_posts`; that command then finishes the run."""
    work = copy_repo(tmp_path / "repo")
    posts = work / "results" / "posts" / "posts.parquet"
    made = _run(work, "results/posts/posts.parquet", timeout=900)
    assert made.returncode == 0, made.stderr[-3000:]
    data = posts.read_bytes()
    posts.write_bytes(data[: len(data) // 2])
    target = "results/graph/summary.json"
    proc = _run(work, target, timeout=900)
    assert proc.returncode != 0
    named = [line for line in proc.stderr.splitlines() if "damaged Parquet file" in line]
    assert named and "results/posts/posts.parquet: " in named[0], proc.stderr[-3000:]
    assert "snakemake --cores all --forcerun merge_posts" in named[0]
    log = (work / "logs" / "graph" / "graph.log").read_text()
    assert "Traceback" not in proc.stderr + log, log[-3000:]
    fixed = _run(work, target, "--forcerun", "merge_posts", timeout=900)
    assert fixed.returncode == 0, fixed.stderr[-3000:]


def test_full_disk_is_one_line_naming_the_path_and_leaves_no_partial_output(tmp_path):
    """A write the file system refuses (here the process's file-size limit, as a full disk
    would: the same errors reach the writers) stops synth with one line naming the path and the
    cause, and leaves neither a truth file, a corpus shard, nor the parts folder."""
    import resource

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    truth = tmp_path / "truth"
    proc = _splits(
        "synth",
        "--demographics",
        str(REPO / "config" / "demographics.sample.yaml"),
        "--topics",
        str(REPO / "config" / "topics.yaml"),
        "--out",
        str(tmp_path / "corpus"),
        "--truth-dir",
        str(truth),
        "--settings",
        _settings(SynthSettings, posts=20000),
        cwd=tmp_path,
        preexec_fn=small_files,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("splits synth: error: "), last
    assert str(tmp_path) in last and "file too large" in last, last
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert not (truth / ".post_truth_parts").exists(), left
    assert not (truth / "post_truth.parquet").exists(), left
    assert not [p for p in left if p.startswith("corpus/")], left

    # a Parquet output polars cannot finish (its error quotes the OS error): the output is named
    posts, report = _posts_and_report(tmp_path / "in")
    out = tmp_path / "merged"

    def tiny_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))

    proc = _splits(
        "merge-posts",
        "--posts",
        str(posts),
        "--reports",
        str(report),
        "--out",
        str(out / "posts.parquet"),
        "--report",
        str(out / "report.json"),
        cwd=tmp_path,
        preexec_fn=tiny_files,
    )
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert last.startswith(f"splits merge-posts: error: {out}/"), last
    assert "file too large" in last
    assert not out.exists() or not list(out.iterdir())  # no partial output, no temporary


def test_os_errors_are_worded_with_the_path_and_the_cause():
    """Permission denied (not reproducible as root, which reads every file), a full disk quoted
    inside a polars error, and an error that names no file (then the outputs are named)."""
    import argparse
    import errno

    from splits.filecheck import os_error_line

    denied = PermissionError(errno.EACCES, "Permission denied", "results/posts/posts.parquet")
    assert os_error_line(denied) == "results/posts/posts.parquet: permission denied"
    full = pl.exceptions.ComputeError("parquet: underlying IO error: No space left (os error 28)")
    assert os_error_line(full, "out.parquet") == "out.parquet: no space left on the device"
    args = argparse.Namespace(out_dir="results/graph", posts=["a.parquet"])
    assert os_error_line(OSError(errno.ENOSPC, "x"), args=args) == (
        "no space left on the device (while writing results/graph)"
    )


# --------------------------------------------------------------------------- privacy


def test_real_inputs_without_a_salt_stop_before_any_job(tmp_path):
    """synth.enabled false and no $SPLITS_SALT: one line naming the variable, no job run (before:
    the public development salt hashed real usernames, reversible by dictionary)."""
    work = copy_repo(tmp_path / "repo")
    dump = work / "RC_2019-01.ndjson"
    dump.write_text('{"id": "a1", "author": "u", "subreddit": "s", "body": "hi"}\n')
    _configure(work, {"synth": {"enabled": False}, "ingest": {"inputs": [dump.name]}})
    env = {k: v for k, v in os.environ.items() if k != "SPLITS_SALT"}
    env["PYTHONHASHSEED"] = "0"
    proc = snakemake_fork.run(["--cores", "2"], work, env, 300)
    lines = error_lines(proc.stderr)
    assert proc.returncode != 0
    assert len(lines) == 1 and "$SPLITS_SALT is not set" in lines[0], proc.stderr[-2000:]
    assert not (work / "logs").exists() and not (work / "results").exists()
    dry = _run(work, "-n", env={"SPLITS_SALT": SALT}, timeout=300)
    assert dry.returncode == 0, dry.stderr[-2000:]


def _hmac16(salt: str, message: str) -> str:
    import hashlib
    import hmac

    return hmac.new(salt.encode(), message.encode(), hashlib.sha256).hexdigest()[:16]


def test_export_card_says_post_ids_link_rows_and_post_ids_can_be_hashed_or_dropped(
    tmp_path, default_run
):
    dataset = default_run / "results" / "dataset"
    card = (dataset / "export" / "README.md").read_text()
    assert "every row links back to its author's Reddit account" in card
    source_q = pl.read_parquet(dataset / "quadruplets.parquet")
    source_t = pl.read_parquet(default_run / "results" / "topics" / "topic_posts.parquet")
    ids = set(source_t["post_id"])
    out = {}
    for mode in ("hash", "drop"):
        out[mode] = tmp_path / mode
        proc = _splits(
            "export",
            "--quadruplets",
            str(dataset / "quadruplets.parquet"),
            "--topic-posts",
            str(default_run / "results" / "topics" / "topic_posts.parquet"),
            "--settings",
            json.dumps(
                {
                    "k": 42,
                    "salt_env": "SPLITS_SALT",
                    "post_ids": mode,
                    "license": None,
                    "source": None,
                }
            ),
            "--out-dir",
            str(out[mode]),
            cwd=tmp_path,
            env={**os.environ, "SPLITS_SALT": SALT},
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
    hashed_q = pl.read_parquet(out["hash"] / "quadruplets.parquet")
    hashed_t = pl.read_parquet(out["hash"] / "topic_posts.parquet")
    # the formula, written here: HMAC-SHA256(salt, "post:" + id), 16 hex digits
    assert hashed_t["post_id"].to_list() == [
        _hmac16(SALT, f"post:{i}") for i in source_t["post_id"]
    ]
    assert hashed_q["sample_A_ids"].to_list() == [
        [_hmac16(SALT, f"post:{i}") for i in row] for row in source_q["sample_A_ids"]
    ]
    # no Reddit id is left, and rows still join across the files
    exported = set(hashed_t["post_id"]) | set(hashed_q["example_post_ids"].explode())
    assert not exported & ids
    assert set(hashed_q["example_post_ids"].explode()) <= set(hashed_t["post_id"])
    assert "replaced by salted hashes" in (out["hash"] / "README.md").read_text()
    dropped_q = pl.read_parquet(out["drop"] / "quadruplets.parquet")
    dropped_t = pl.read_parquet(out["drop"] / "topic_posts.parquet")
    gone = {"post_id", "example_post_ids", "sample_A_ids", "sample_B_ids"}
    assert not gone & set(dropped_q.columns) and not gone & set(dropped_t.columns)
    assert dropped_q.height == source_q.height and dropped_t.height == source_t.height
    assert "post ids are dropped" in (out["drop"] / "README.md").read_text()


def test_response_cache_files_have_the_umasks_mode(tmp_path):
    """SQLite creates a database 0644 whatever the umask: the cache (and its -wal and -shm
    files) are made group-writable under umask 002 like every other output."""
    from splits.llm.cache import ResponseCache

    old = os.umask(0o002)
    try:
        cache = ResponseCache(tmp_path / "llm_cache.sqlite")
        cache._conn.execute("CREATE TABLE t (x)")
        modes = {p.name: oct(p.stat().st_mode & 0o777) for p in tmp_path.iterdir()}
    finally:
        os.umask(old)
    assert modes and set(modes.values()) == {"0o664"}, modes


def test_a_file_damaged_past_its_footer_is_found_and_named_when_the_stage_fails(tmp_path):
    """The footer check passes a file whose pages are damaged; the stage then fails inside
    polars or pyarrow, and every input is read whole to name the damaged one in one line."""
    import random

    import pyarrow.parquet as pq
    from splits.ingest.clean import POSTS_SCHEMA

    n = 50_000
    posts = pl.DataFrame(
        {
            "post_id": [f"p{i}" for i in range(n)],
            "kind": ["comment"] * n,
            "subreddit": [f"s{i % 50}" for i in range(n)],
            "author": [f"u{i % 997}" for i in range(n)],
            "created_utc": list(range(n)),
            "text": [f"hello world {i}" for i in range(n)],
            "score": [1] * n,
            "conversation_id": ["c"] * n,
            "reply_to": [None] * n,
        },
        schema=POSTS_SCHEMA,
    )
    good = write_parquet(posts, tmp_path / "posts.parquet")
    data = bytearray(good.read_bytes())
    noise = random.Random(0)
    # the pages of the columns the graph reads (author, subreddit), found from the footer, which
    # is left whole: damage elsewhere (say, in the texts) is rightly never seen by the graph
    metadata = pq.ParquetFile(good).metadata
    for group in range(metadata.num_row_groups):
        for column in range(metadata.num_columns):
            chunk = metadata.row_group(group).column(column)
            if chunk.path_in_schema in ("author", "subreddit"):
                at = chunk.data_page_offset + chunk.total_compressed_size // 2
                data[at : at + 64] = noise.randbytes(64)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(bytes(data))
    proc = _splits(
        "graph",
        "--posts",
        str(bad),
        "--settings",
        '{"top_n": 50000, "min_posts": 1, "k": 20, "block_mb": 256}',
        "--out-dir",
        str(tmp_path / "out"),
        cwd=tmp_path,
    )
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert last.startswith(f"splits graph: input error: {bad}: damaged Parquet file"), last
    assert not (tmp_path / "out" / "summary.json").exists()


def test_the_folder_claim_refuses_a_second_run_lets_a_dry_run_through_and_dies_with_its_holder(
    tmp_path,
):
    """splits.pipeline.runlock directly: a process holds the claim; a run is refused naming it, a dry run
    and --unlock are let through and remove nothing; once the holder is killed the claim is free
    and the locks its run left are removed."""
    from splits.pipeline import runlock

    state = tmp_path / ".snakemake"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import json, os, socket, sys, time\n"
            "from splits.pipeline import runlock\n"
            f"runlock.claim_folder({str(state)!r}, argv=[])\n"
            "locks = os.path.join(sys.argv[1], 'locks')\n"
            "os.makedirs(locks)\n"
            "open(os.path.join(locks, '0.input.lock'), 'w').close()\n"
            f"runlock.record_owner({str(state)!r})\n"
            "print('ready', flush=True)\n"
            "time.sleep(600)\n",
            str(state),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(runlock.FolderBusy, match=rf"Snakemake pid {holder.pid} on "):
            runlock.claim_folder(state, argv=["--cores", "2"])
        assert runlock.claim_folder(state, argv=["--cores", "2", "-n"]) is False
        assert runlock.claim_folder(state, argv=["--unlock"]) is False
        assert (state / "locks" / "0.input.lock").exists()
    finally:
        holder.kill()
        holder.wait()
    assert runlock.claim_folder(state, argv=["--cores", "2"]) is True
    assert not (state / "locks" / "0.input.lock").exists()  # the killed run's lock
    record = json.loads((state / runlock.CLAIM_FILE).read_text())
    assert record["pid"] == os.getpid()
