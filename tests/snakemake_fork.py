"""Snakemake's command line for the tests, each run a process of its own forked from one that
has already imported Snakemake.

A `python -m snakemake ...` costs ~3.7 CPU s before it reads the Snakefile, importing Snakemake
and collecting its plugins (the Slurm executor plugin imports pandas), against ~1.4 s for the
parse and the DAG that follow (measured 2026-11-29 on a 2-core machine, a dry run of the default
workflow); the suite runs Snakemake some 150 times. ``run`` gives what ``subprocess.run([python,
"-m", "snakemake", *args], cwd=..., env=..., capture_output=True, text=True, timeout=...)``
gives, and each run is still a new process with its own working directory, environment, umask,
address-space limit and standard streams, running Snakemake's own ``main`` on its own argv:
only the imports are shared, made once per pytest worker by a launcher process started without
threads (a fork copies no thread, so none can hold a lock the run needs). The launcher runs with
PYTHONHASHSEED=0, the value every test gives its Snakemake runs, since a forked process keeps its
parent's string hashing.

A run given another PYTHONPATH than the tests' own (a stand-in engine's sitecustomize.py, which
Python runs at its start) gets a fresh interpreter, as before. Tests that need the interpreter's
start otherwise (a run stopped by a signal at a given point, a patched Snakemake, the installed
command of a fresh environment) keep starting `python -m snakemake` or their own script.
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# The launcher: reads one JSON request a line, forks a run for it, answers its pid, then (once the
# run ends) its wait status. It never starts a thread.
LAUNCHER = r"""
import importlib, json, os, resource, sys

import snakemake.cli  # the imports every run shares

# each registry collects the installed plugins once (importing their modules: the Slurm
# executor's imports pandas); one a Snakemake version lacks is left to the runs
for module, name in (
    ("snakemake_interface_executor_plugins.registry", "ExecutorPluginRegistry"),
    ("snakemake_interface_logger_plugins.registry", "LoggerPluginRegistry"),
    ("snakemake_interface_report_plugins.registry", "ReportPluginRegistry"),
    ("snakemake_interface_storage_plugins.registry", "StoragePluginRegistry"),
):
    try:
        getattr(importlib.import_module(module), name)()
    except (ImportError, AttributeError):
        pass

requests, answers = sys.stdin.buffer, sys.stdout
for line in requests:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()  # its own session: a test's kill reaches the run and its jobs
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            if request["umask"] >= 0:
                os.umask(request["umask"])
            if request["limit_bytes"]:
                limit = request["limit_bytes"]
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            for fd, name in ((1, "stdout"), (2, "stderr")):
                out = os.open(request[name], os.O_WRONLY | os.O_TRUNC)
                os.dup2(out, fd)
                os.close(out)
            # as `python -m snakemake` sets them
            sys.argv = [os.path.join(os.path.dirname(snakemake.__file__), "__main__.py")]
            sys.argv += request["args"]
            sys.path[0] = os.getcwd()
            code = snakemake.cli.main()
        except SystemExit as stop:
            code = stop.code
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        if code is None:
            code = 0
        elif not isinstance(code, int):  # sys.exit("message"): printed, status 1, as Python does
            print(code, file=sys.stderr)
            code = 1
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)
    answers.write(json.dumps({"pid": pid}) + "\n")
    answers.flush()
    _, status = os.waitpid(pid, 0)
    answers.write(json.dumps({"status": status}) + "\n")
    answers.flush()
"""

_launcher: subprocess.Popen | None = None
_launcher_pythonpath = ""  # the PYTHONPATH the running launcher started with
_launcher_lock = threading.Lock()


def _start() -> subprocess.Popen:
    global _launcher, _launcher_pythonpath
    if _launcher is None or _launcher.poll() is not None:
        _launcher_pythonpath = os.environ.get("PYTHONPATH", "")
        _launcher = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            # unbuffered: a line is read to its end and no further, so that an answer that
            # arrived with the one before is still in the pipe for select() to see
            bufsize=0,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        atexit.register(_launcher.kill)
    return _launcher


def _kill_session(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _stop_launcher() -> None:
    """Kill the launcher (the next run starts another): after an exchange cut short, its
    answers would no longer match the requests."""
    global _launcher
    if _launcher is not None:
        _launcher.kill()
        _launcher.wait()
        _launcher = None


def _answer(launcher: subprocess.Popen, timeout: float | None) -> dict | None:
    """The launcher's next answer, or None when ``timeout`` seconds pass first."""
    ready, _, _ = select.select([launcher.stdout], [], [], timeout)
    if not ready:
        return None
    line = launcher.stdout.readline()
    if not line:
        raise RuntimeError("the Snakemake launcher stopped (see the test's stderr)")
    return json.loads(line)


def run(
    args: list[str],
    cwd: str | Path,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    umask: int = -1,
    limit_bytes: int | None = None,
) -> subprocess.CompletedProcess:
    """``snakemake *args`` in ``cwd`` with the environment ``env`` (this process's when None),
    its output captured as text: the CompletedProcess ``subprocess.run`` gives for ``python -m
    snakemake``. On ``timeout`` the run's session is killed and TimeoutExpired raised, as
    ``subprocess.run`` does. ``umask``: the run's (as ``subprocess.run``'s); ``limit_bytes``: its
    address space capped (RLIMIT_AS), as a user's ulimit."""
    cmd = [sys.executable, "-m", "snakemake", *args]
    env = dict(os.environ if env is None else env)
    # the running launcher's PYTHONPATH, or this process's, which a launcher started now gets
    if _launcher is not None and _launcher.poll() is None:
        launcher_pythonpath = _launcher_pythonpath
    else:
        launcher_pythonpath = os.environ.get("PYTHONPATH", "")
    if env.get("PYTHONPATH", "") != launcher_pythonpath:
        # what Python does at its start (a sitecustomize.py on the path, as a test's stand-in
        # engine installs itself) cannot be replayed in a forked process: a fresh interpreter
        return _fresh(cmd, cwd, env, timeout, umask, limit_bytes)
    with tempfile.TemporaryDirectory(prefix="snakemake-run.") as folder:
        streams = {name: Path(folder, name) for name in ("stdout", "stderr")}
        for path in streams.values():
            path.touch()
        request = {
            "args": list(args),
            "cwd": str(Path(cwd).resolve()),
            "env": env,
            "umask": umask,
            "limit_bytes": limit_bytes or 0,
            **{name: str(path) for name, path in streams.items()},
        }
        with _launcher_lock:
            launcher = _start()
            pid = None
            try:
                launcher.stdin.write((json.dumps(request) + "\n").encode())
                pid = _answer(launcher, None)["pid"]
                answer = _answer(launcher, timeout)
                if answer is None:
                    _kill_session(pid)
                    _answer(launcher, None)
            except BaseException:  # interrupted (a test's timeout): the run and launcher go
                if pid is not None:
                    _kill_session(pid)
                _stop_launcher()
                raise
        if answer is None:
            raise subprocess.TimeoutExpired(
                cmd,
                timeout,
                output=streams["stdout"].read_text(errors="replace"),
                stderr=streams["stderr"].read_text(errors="replace"),
            )
        stdout = streams["stdout"].read_text(errors="replace")
        stderr = streams["stderr"].read_text(errors="replace")
    return subprocess.CompletedProcess(
        cmd, os.waitstatus_to_exitcode(answer["status"]), stdout, stderr
    )


def _fresh(
    cmd: list[str],
    cwd: str | Path,
    env: dict[str, str],
    timeout: float | None,
    umask: int,
    limit_bytes: int | None,
) -> subprocess.CompletedProcess:
    def cap() -> None:
        if limit_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return subprocess.run(
        cmd,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        umask=umask,
        preexec_fn=cap if limit_bytes else None,
    )
