"""One Snakemake run per working folder, and resuming after a killed run without ``--unlock``.

Snakemake locks the working directory with files under ``.snakemake/locks/`` that name no
process, so a run killed with SIGKILL (OOM killer, a closed terminal, a node failure) leaves locks
that stop the next plain ``snakemake`` with ``LockException`` until ``snakemake --unlock``.

When the main Snakemake process reads the Snakefile it claims the folder (:func:`claim_folder`):
it takes an exclusive ``flock`` on ``.snakemake/splits_run.lock`` and writes its pid, host and
start time into that file while holding it, one step before Snakemake takes its own locks. The
kernel drops a ``flock`` when its process dies, however it dies, so:

- a second run in the same folder cannot take it: it stops at once with one line naming the
  running one (a dry run, ``--report``, ``--unlock`` and other commands that run no job are let
  through, as Snakemake lets them through its own lock);
- the holder alone may remove Snakemake's locks, and only where the run that owned them (recorded
  in ``.snakemake/splits_lock_owner.json`` at ``onstart``, after Snakemake locked) has died on
  this host. Locks of a run on another host (a shared file system) or of a run this module did not
  record are left alone.

A file system without ``flock`` support (some network mounts) leaves Snakemake's own lock alone
in charge: nothing is removed and nothing refused.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

import psutil

OWNER_FILE = "splits_lock_owner.json"
CLAIM_FILE = "splits_run.lock"

#: the claims of this process (state folder -> an open descriptor holding its flock), kept until
#: the process exits
_CLAIMS: dict[Path, int] = {}

#: Snakemake options with which a command runs no job and takes no lock of its own
NO_JOB_OPTIONS = (
    "dryrun",
    "nolock",
    "unlock",
    "report",
    "lint",
    "list_rules",
    "list_target_rules",
    "list_changes",
    "list_input_changes",
    "list_params_changes",
    "list_untracked",
    "list_conda_envs",
    "summary",
    "detailed_summary",
    "dag",
    "rulegraph",
    "filegraph",
    "d3dag",
    "print_compilation",
    "containerize",
    "export_cwl",
    "generate_unit_tests",
    "archive",
    "debug_dag",
)


class FolderBusy(RuntimeError):
    """Another Snakemake process runs jobs in this folder."""


def _process_start(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def _me() -> dict:
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "started": _process_start(pid)}


def runs_jobs(argv: list[str] | None = None) -> bool:
    """Whether the Snakemake command line ``argv`` (default: this process's) runs jobs under
    Snakemake's lock: False for a dry run and the other commands of ``NO_JOB_OPTIONS``, and for
    a command line Snakemake's own parser cannot read (then Snakemake decides)."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        from snakemake.cli import get_argument_parser

        args, _ = get_argument_parser().parse_known_args(argv)
    except (SystemExit, Exception):
        return False
    return not any(getattr(args, name, None) for name in NO_JOB_OPTIONS)


def describe(owner: dict | None) -> str:
    if not owner:
        return "another Snakemake process"
    started = owner.get("started")
    when = time.strftime(" since %Y-%m-%d %H:%M:%S", time.localtime(started)) if started else ""
    return f"Snakemake pid {owner.get('pid')} on {owner.get('host')}{when}"


def _read_claim(fd: int) -> dict | None:
    for _ in range(20):  # the holder writes its record right after taking the flock
        try:
            text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
            if text.strip():
                return json.loads(text)
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    return None


def claim_folder(state_dir: str | Path = ".snakemake", argv: list[str] | None = None) -> bool:
    """Claim the working folder for this Snakemake process (see the module docstring); remove
    the locks a killed run left. Raises :class:`FolderBusy` (one line naming the running process)
    when another process holds the claim and this command runs jobs. Returns whether this process
    holds the claim."""
    state = Path(state_dir)
    if state.resolve() in _CLAIMS:
        return True
    try:
        state.mkdir(parents=True, exist_ok=True)
        fd = os.open(state / CLAIM_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:  # a read-only folder: Snakemake's own lock (and its message) decide
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_claim(fd)
        os.close(fd)
        if runs_jobs(argv):
            raise FolderBusy(
                f"{describe(holder)} is running in this folder ({Path.cwd()}): wait for it to "
                "finish, or stop it, then run again (a second run would make the same files)"
            ) from None
        return False
    except OSError:  # no flock on this file system: Snakemake's own lock decides
        os.close(fd)
        return False
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(_me()).encode(), 0)
    _CLAIMS[state.resolve()] = fd
    release_stale_locks(state)
    return True


def record_owner(state_dir: str | Path = ".snakemake") -> None:
    """Record this process as the holder of the working directory's Snakemake locks (at
    ``onstart``, after Snakemake locked; only the process that claimed the folder records)."""
    if Path(state_dir).resolve() not in _CLAIMS:
        return
    path = Path(state_dir) / OWNER_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{OWNER_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(_me()))
    tmp.replace(path)


def owner_is_dead(owner: dict) -> bool:
    """True when the recorded process ran on this host and no longer runs (a reused pid is a
    different process: its start time differs)."""
    if owner.get("host") != socket.gethostname():
        return False
    started = _process_start(int(owner["pid"]))
    if started is None:
        return True
    recorded = owner.get("started")
    return recorded is not None and abs(started - recorded) > 1.0


def release_stale_locks(state_dir: str | Path = ".snakemake") -> list[Path]:
    """Remove the locks a killed run left behind; returns the files removed. Called by
    :func:`claim_folder` only, while this process holds the folder's claim."""
    state = Path(state_dir)
    owner_path = state / OWNER_FILE
    locks = sorted((state / "locks").glob("*.lock"))
    if not locks or not owner_path.is_file():
        return []
    try:
        owner = json.loads(owner_path.read_text())
    except (OSError, ValueError):
        return []
    if not owner_is_dead(owner):
        return []
    for lock in locks:
        lock.unlink(missing_ok=True)
    owner_path.unlink(missing_ok=True)
    print(
        f"Removed the locks of a killed Snakemake run (pid {owner['pid']} on this host).",
        file=sys.stderr,
    )
    return locks


def claim_folder_or_stop(state_dir: str | Path = ".snakemake") -> bool:
    """:func:`claim_folder`, stopping the command with its one line when the folder is busy."""
    try:
        return claim_folder(state_dir)
    except FolderBusy as err:
        sys.exit(f"error: {err}")
