"""Served mode (``llm.serve``): one engine per model per run, shared by every LLM job.

Batch mode (the default) gives each LLM one batch job per role, and each LLM job of other stages
(self-ID verification, probes, hypotheses) builds its own engine. In served mode the first job
whose request misses the response cache starts a server for that model (``splits serve run``:
the model's own engine behind an OpenAI-compatible HTTP API on 127.0.0.1), detached from the
job; later jobs, of any stage and role, find its endpoint file and send their requests to it
through the ``openai`` client. The response cache keeps the model's own identity (the spec's, as
in batch mode), so switching served mode on or off reuses every cached answer.

Snakemake's ``service()`` outputs do not fit: a service job is grouped with all its consumers
and the group's jobs start at once, while a model's consumers run at different points of the
DAG (a CM batch needs the theories that its own TM batch made possible). So the package manages
the server's life itself, with three files in the servers folder (``<model>.*``):

- ``.lock``: a client holds it (exclusive) while it checks the endpoint and, if needed, starts a
  server, so two jobs never start two servers of one model;
- ``.lease``: every client that uses the server holds it shared; the server exits once it has
  been able to take it exclusive (no client) for ``idle_timeout_s``, holding it while it removes
  its endpoint file, so a client never connects to a server that is going away;
- ``.json``: the endpoint (host, port, pid, engine load seconds), written once the engine is
  built and the server answers ``/health``; ``.log`` the server's log.

A killed server leaves a stale endpoint file: the next client finds it unhealthy and starts a
new server. ``splits serve stop`` ends the servers of a folder (the workflow calls it when a run
ends). The in-process server collects the requests that arrive together into one engine call
(the engine batches them as in batch mode) and answers identical requests in flight once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

from splits.errors import ConfigError
from splits.llm.backends import backend_class, model_spec
from splits.llm.base import Backend, Completion, LLMError, Request

log = logging.getLogger(__name__)

#: environment variable holding the served-mode settings (JSON) that every job inherits; the
#: Snakefile sets it (or clears it, in batch mode)
SERVE_ENV = "SPLITS_LLM_SERVE"


@dataclass(frozen=True)
class ServeSettings:
    """Served-mode settings: the servers folder and the ``llm.serve`` keys (their defaults are
    the schema's)."""

    SECTION: ClassVar[str] = "llm.serve"
    dir: str
    idle_timeout_s: float
    startup_timeout_s: float
    concurrency: int
    request_timeout_s: float
    vllm_server: str

    def as_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def settings_from_config(
    config: Mapping[str, Any], servers_dir: str | Path
) -> ServeSettings | None:
    """The served-mode settings of a validated config (None: batch mode, ``enabled: false``).
    The Snakefile exports them as ``SPLITS_LLM_SERVE`` for its jobs; they are not a rule
    parameter, so switching modes re-runs nothing."""
    serve = config["llm"]["serve"]
    if not serve["enabled"]:
        return None
    keys = [f.name for f in dataclasses.fields(ServeSettings) if f.name != "dir"]
    return ServeSettings(dir=str(Path(servers_dir).resolve()), **{k: serve[k] for k in keys})


def settings_from_env(environ: Mapping[str, str]) -> ServeSettings | None:
    """The served-mode settings a job inherited (None: batch mode)."""
    text = environ.get(SERVE_ENV)
    return settings_from_json(text, SERVE_ENV) if text else None


def settings_from_json(text: str, where: str) -> ServeSettings:
    """The settings of ``ServeSettings.as_json()``; ConfigError naming ``where`` otherwise."""
    try:
        return ServeSettings(**json.loads(text))
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where}: not valid served-mode settings ({err})") from err


def served_build(name: str, spec: Mapping[str, Any], identity: Mapping[str, Any] | None):
    """What builds model ``name``'s backend in served mode (a client of its server), or None
    where the model runs in the job itself (batch mode, or a backend that is not served)."""
    settings = settings_from_env(os.environ)
    if settings is None or identity is None or not backend_class(spec["backend"]).servable:
        return None
    return lambda: connect(name, dict(spec), dict(identity), settings)


# --------------------------------------------------------------------------- files and locks


def server_files(folder: str | Path, name: str) -> dict[str, Path]:
    base = Path(folder)
    return {s: base / f"{name}.{s}" for s in ("lock", "lease", "json", "log", "server")}


def open_lock(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # the umask's mode


def read_endpoint(folder: str | Path, name: str) -> dict[str, Any] | None:
    path = server_files(folder, name)["json"]
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def healthy(endpoint: Mapping[str, Any] | None, timeout_s: float = 5.0) -> bool:
    """Whether the endpoint's server is alive and answers ``/health``."""
    import httpx

    if not endpoint:
        return False
    try:
        os.kill(int(endpoint["pid"]), 0)
    except (OSError, KeyError, ValueError, TypeError):
        return False
    try:
        response = httpx.get(
            f"http://{endpoint['host']}:{endpoint['port']}/health", timeout=timeout_s
        )
    except httpx.HTTPError:
        return False
    return response.status_code == 200


# --------------------------------------------------------------------------- the client side


class ServedBackend(Backend):
    """A client of model ``name``'s server: the ``openai`` backend's HTTP code (retries, deadlines,
    concurrency), under the model's own cache identity, holding the server's lease while open."""

    def __init__(
        self,
        name: str,
        identity: Mapping[str, Any],
        endpoint: Mapping[str, Any],
        lease_fd: int,
        started: bool,
        settings: ServeSettings,
    ):
        from splits.llm.openai_api import OpenAIBackend

        self.name = name
        self._identity = dict(identity)
        self._lease_fd: int | None = lease_fd
        self.endpoint = dict(endpoint)
        self.started_server = started
        # the engine build this client caused: the server's, when this client started it
        self.engine_builds = 1 if started else 0
        self.engine_load_s = float(endpoint.get("load_s", 0.0)) if started else 0.0
        client_spec = {
            "backend": "openai",
            "base_url": f"http://{endpoint['host']}:{endpoint['port']}/v1",
            "model": name,
            "concurrency": settings.concurrency,
            "timeout_s": settings.request_timeout_s,
            "max_retries": 2,
        }
        self.client = OpenAIBackend(name, model_spec(name, {name: client_spec}))
        self.client.request_body = self._request_body

    def _request_body(self, request: Request) -> tuple[str, dict[str, Any]]:
        from splits.llm.openai_api import OpenAIBackend

        path, body = OpenAIBackend.request_body(self.client, request)
        # for engines that read it (the benchmark's stand-in); vLLM's own server is not told
        if request.payload is not None and self.endpoint.get("server") != "vllm":
            body["splits_payload"] = json.loads(json.dumps(request.payload, default=str))
        return path, body

    def identity(self) -> dict[str, Any]:
        return dict(self._identity)

    def stream(self, requests: list[Request]):
        return self.client.stream(requests)

    def generate(self, requests: list[Request]) -> list[Completion]:
        return self.client.generate(requests)

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            if self._lease_fd is not None:
                os.close(self._lease_fd)  # releases the shared lease
                self._lease_fd = None


def connect(
    name: str, spec: Mapping[str, Any], identity: Mapping[str, Any], settings: ServeSettings
) -> ServedBackend:
    """A client of model ``name``'s server, started first when none is running."""
    files = server_files(settings.dir, name)
    lock_fd = open_lock(files["lock"])
    lease_fd = open_lock(files["lease"])
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        # blocks while a server is shutting down (it holds the lease exclusive until it is gone)
        fcntl.flock(lease_fd, fcntl.LOCK_SH)
        endpoint = read_endpoint(settings.dir, name)
        started = False
        if not healthy(endpoint):
            endpoint = start_server(name, spec, settings)
            started = True
        log.info(
            "model %s: %s server pid %s at %s:%s",
            name,
            "started" if started else "using the running",
            endpoint["pid"],
            endpoint["host"],
            endpoint["port"],
        )
        return ServedBackend(name, identity, endpoint, lease_fd, started, settings)
    except BaseException:
        os.close(lease_fd)
        raise
    finally:
        os.close(lock_fd)


def start_server(name: str, spec: Mapping[str, Any], settings: ServeSettings) -> dict[str, Any]:
    """Start ``splits serve run`` for model ``name`` detached (its own session, so it outlives
    the job) and wait for its endpoint; LLMError with the log's tail when it fails to come up."""
    files = server_files(settings.dir, name)
    files["json"].unlink(missing_ok=True)
    argv = [
        sys.executable,
        "-m",
        "splits.cli",
        "serve",
        "run",
        "--model",
        name,
        "--model-spec",
        json.dumps(dict(spec), sort_keys=True),
        "--settings",
        settings.as_json(),
    ]
    with open(files["log"], "ab") as out:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + settings.startup_timeout_s
    while time.monotonic() < deadline:
        endpoint = read_endpoint(settings.dir, name)
        if endpoint is not None and endpoint.get("pid") == process.pid and healthy(endpoint):
            return endpoint
        if process.poll() is not None:
            raise LLMError(
                f"model {name}: its server exited with status {process.returncode} before it "
                f"was ready; last lines of {files['log']}: {_tail(files['log'])}"
            )
        time.sleep(0.1)
    process.terminate()
    raise LLMError(
        f"model {name}: its server was not ready within llm.serve.startup_timeout_s "
        f"({settings.startup_timeout_s:g} s); see {files['log']}"
    )


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"


def stop_servers(folder: str | Path, names: list[str] | None = None, wait_s: float = 30) -> int:
    """SIGTERM the servers of ``folder`` (all, or ``names``) and wait for them to exit; returns
    how many were running."""
    folder = Path(folder)
    if not folder.is_dir():
        return 0
    chosen = names or sorted(p.stem for p in folder.glob("*.json"))
    pids = []
    for name in chosen:
        endpoint = read_endpoint(folder, name)
        if endpoint is None:
            continue
        with contextlib.suppress(OSError, KeyError, ValueError, TypeError):
            os.kill(int(endpoint["pid"]), signal.SIGTERM)
            pids.append(int(endpoint["pid"]))
    deadline = time.monotonic() + wait_s
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except OSError:
                break
            time.sleep(0.1)
    return len(pids)
