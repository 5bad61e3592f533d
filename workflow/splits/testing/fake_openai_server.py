"""A scripted OpenAI-compatible HTTP server on 127.0.0.1 (stdlib only), for tests, benchmarks
and offline smoke runs of the ``openai`` backend.

It speaks ``POST /v1/chat/completions`` and ``POST /v1/completions`` and answers
deterministically (``reply: <last user message or prompt>``). A script injects failures: each
request takes the next action of ``script`` (then ``default_action``), or ``action_for(body)``
decides. Actions: ``ok``, ``429`` (optionally ``429:<retry-after seconds>``), ``500``, ``503``,
``400``, ``timeout`` (sleep ``hang_s`` before answering), ``drip`` (a 200 answer whose body comes
one byte every ``drip_s``: never idle for long, never done), ``malformed`` (200 with a broken body),
``nochoices`` (200 with valid JSON but no choices), ``drop`` (close the connection). It records
every request (path, body, headers, arrival time) and the most requests ever in flight at once.
Like ``vllm serve``, it can tell its context (``GET /v1/models`` lists ``max_model_len`` when
``context`` is set) and count tokens (``POST /tokenize`` answers ``{"count": n}`` with
``count_tokens(body)`` when given); those two routes are not scripted, and ``tokenize_calls``
counts the latter.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def default_reply(body: dict[str, Any]) -> str:
    if "messages" in body:
        return "reply: " + str(body["messages"][-1].get("content", ""))
    return "reply: " + str(body.get("prompt", ""))


class FakeOpenAIServer:
    def __init__(
        self,
        script: list[str] | None = None,
        default_action: str = "ok",
        latency_s: float = 0.0,
        hang_s: float = 2.0,
        drip_s: float = 0.5,
        action_for: Callable[[dict[str, Any]], str] | None = None,
        reply: Callable[[dict[str, Any]], str] = default_reply,
        context: int | None = None,
        count_tokens: Callable[[dict[str, Any]], int] | None = None,
    ):
        self.script = list(script or [])
        self.default_action = default_action
        self.latency_s = latency_s
        self.hang_s = hang_s
        self.drip_s = drip_s
        self.action_for = action_for
        self.reply = reply
        self.context = context
        self.count_tokens = count_tokens
        self.tokenize_calls = 0
        self.lock = threading.Lock()
        self.records: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> FakeOpenAIServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else headers and body wait 40 ms for a delayed ACK

            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):  # noqa: N802 - http.server API
                if self.path.rstrip("/") == "/tokenize" and server.count_tokens is not None:
                    length = int(self.headers.get("Content-Length") or 0)
                    body = json.loads(self.rfile.read(length) or b"{}")
                    with server.lock:
                        server.tokenize_calls += 1
                    count = {"count": int(server.count_tokens(body))}
                    server._send(self, 200, json.dumps(count).encode())
                    return
                server._handle(self)

            def do_GET(self):  # noqa: N802 - http.server API
                if self.path.rstrip("/") == "/v1/models" and server.context is not None:
                    models = {"data": [{"id": "fake", "max_model_len": server.context}]}
                    server._send(self, 200, json.dumps(models).encode())
                elif self.path.rstrip("/").endswith("/stats"):
                    with server.lock:
                        stats = {
                            "requests": len(server.records),
                            "max_in_flight": server.max_in_flight,
                        }
                        server.max_in_flight = server.in_flight
                    server._send(self, 200, json.dumps(stats).encode())
                else:
                    server._send(self, 404, b'{"error": {"message": "not found"}}')

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.request_queue_size = 128
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ requests

    def calls(self, path_suffix: str = "") -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.records if r["path"].endswith(path_suffix)]

    def _next_action(self, body: dict[str, Any]) -> str:
        if self.action_for is not None:
            return self.action_for(body)
        with self.lock:
            return self.script.pop(0) if self.script else self.default_action

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = {"_unparsed": raw.decode("utf-8", "replace")}
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.records.append(
                {
                    "path": handler.path,
                    "body": body,
                    "headers": dict(handler.headers.items()),
                    "t": time.perf_counter(),
                }
            )
        try:
            action = self._next_action(body)
            if self.latency_s:
                time.sleep(self.latency_s)
            self._respond(handler, action, body)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with self.lock:
                self.in_flight -= 1

    def _send(self, handler, status: int, payload: bytes, headers: dict[str, str] | None = None):
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(payload)
        handler.wfile.flush()

    def _respond(self, handler, action: str, body: dict[str, Any]) -> None:
        name, _, arg = action.partition(":")
        if name == "timeout":
            time.sleep(self.hang_s)
            name = "ok"
        if name == "drip":
            payload = self._completion(handler, body)
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            for i in range(len(payload)):
                handler.wfile.write(payload[i : i + 1])
                handler.wfile.flush()
                time.sleep(self.drip_s)
            return
        if name == "drop":
            handler.close_connection = True
            handler.connection.shutdown(2)
            return
        if name == "malformed":
            self._send(handler, 200, b'{"choices": [ {"text": ')
            return
        if name == "nochoices":
            self._send(handler, 200, json.dumps({"object": "text_completion"}).encode())
            return
        if name != "ok":
            status = int(name)
            headers = {"Retry-After": arg} if arg else None
            error = {"error": {"message": f"scripted {status}", "code": status}}
            self._send(handler, status, json.dumps(error).encode(), headers)
            return
        payload = self._completion(handler, body)
        if payload is None:
            self._send(handler, 404, b'{"error": {"message": "not found"}}')
            return
        self._send(handler, 200, payload)

    def _completion(self, handler, body: dict[str, Any]) -> bytes | None:
        """The JSON body of a successful answer (None for an unknown path)."""
        text = self.reply(body)
        stops = body.get("stop") or []
        finish = "stop"
        for stop in stops:
            if stop and stop in text:
                text = text[: text.index(stop)]
        words = text.split()
        max_tokens = int(body.get("max_tokens") or 16)
        if len(words) > max_tokens:
            text, finish = " ".join(words[:max_tokens]), "length"
        prompt_source = (
            json.dumps(body.get("messages")) if "messages" in body else body.get("prompt", "")
        )
        usage = {
            "prompt_tokens": len(str(prompt_source).split()),
            "completion_tokens": len(text.split()),
        }
        if handler.path.endswith("/chat/completions"):
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish,
            }
            obj = "chat.completion"
        elif handler.path.endswith("/completions"):
            choice = {"index": 0, "text": text, "finish_reason": finish}
            obj = "text_completion"
        else:
            return None
        payload = {
            "id": "cmpl-fake",
            "object": obj,
            "model": body.get("model"),
            "choices": [choice],
            "usage": usage,
        }
        return json.dumps(payload).encode()


def main() -> None:
    """Serve in a process of its own (benchmarks: the client's threads then do not share a GIL
    with the server). Prints the base URL on one line; GET <base_url>/stats returns the request
    count and the most requests in flight since the last /stats call."""
    import argparse

    parser = argparse.ArgumentParser(description="scripted OpenAI-compatible server on 127.0.0.1")
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--default-action", default="ok")
    args = parser.parse_args()
    server = FakeOpenAIServer(default_action=args.default_action, latency_s=args.latency_ms / 1000)
    server.start()
    print(server.base_url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
