"""Resume after a killed Snakemake run without ``--unlock``.

Snakemake locks the working directory with files under ``.snakemake/locks/`` that name no
process, so a run killed with SIGKILL (OOM killer, a closed terminal, a node failure) leaves locks
that stop the next plain ``snakemake`` with ``LockException`` until ``snakemake --unlock``. The
Snakefile records the running Snakemake process here when the run starts (``onstart``, which runs
after the locks are taken) and, when the Snakefile is read again, removes the locks only where that
process has died on this host. Locks of a live run, of a run on another host (a shared file
system) or of a run this module did not record are left alone, so two runs never share outputs.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import psutil

OWNER_FILE = "splits_lock_owner.json"


def _process_start(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def record_owner(state_dir: str | Path = ".snakemake") -> None:
    """Record this process as the holder of the working directory's locks."""
    pid = os.getpid()
    owner = {"host": socket.gethostname(), "pid": pid, "started": _process_start(pid)}
    path = Path(state_dir) / OWNER_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{OWNER_FILE}.{pid}.tmp")
    tmp.write_text(json.dumps(owner))
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
    """Remove the locks a killed run left behind; returns the files removed."""
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
