"""The ``openai`` backend: any OpenAI-compatible HTTP server (``vllm serve``, hosted APIs).

A request with ``messages`` goes to ``/chat/completions``, one with a raw ``prompt`` to
``/completions`` (the CM prompt of the paper is a raw prompt with a pre-filled answer). At most
``concurrency`` requests are in flight (a thread pool over one ``httpx.Client``); completions are
yielded as they arrive so the cache stores each at once. Timeouts, connection errors, 408/409/
425/429, 5xx and malformed bodies are retried with exponential backoff and jitter (honouring
``Retry-After``), then fail with an ``LLMError`` naming the server and the last status; other 4xx
fail at once. ``timeout_s`` bounds each attempt as a whole (connect, send, wait, read): a server
that keeps a request alive by dripping bytes is cut off at the deadline (the connection's socket
is shut down), not only one that falls silent. The API key is read from the environment variable
named by ``api_key_env`` and never appears in identities, logs, exceptions, the cache or outputs
(:mod:`splits.llm.secrets` scrubs it, also from answers of a server that echoes it).
"""

from __future__ import annotations

import dataclasses
import email.utils
import json
import logging
import os
import random
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import CancelledError, ThreadPoolExecutor, as_completed
from typing import Any

from splits.errors import ConfigError
from splits.llm.base import Backend, Completion, LLMError, Request
from splits.llm.secrets import register_secret, scrub_secrets

log = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 409, 425, 429})


class MalformedResponse(ValueError):
    """A 200 response whose body is not a usable completion."""


class RequestDeadline(Exception):
    """An attempt ran past its whole-request deadline."""


def _shut_down(network_stream) -> None:
    """Shut the connection's socket down, so that a read blocked on it returns at once."""
    sock = network_stream.get_extra_info("socket") if network_stream is not None else None
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP date); None if absent."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """Delay before retry ``attempt`` (0-based): ``base * 2**attempt`` capped, times a jitter
    factor drawn uniformly from [0.5, 1)."""
    return min(cap, base * (2**attempt)) * (0.5 + 0.5 * rng.random())


def parse_completion(body: Any, chat: bool, latency: float) -> Completion:
    """A Completion from an OpenAI chat or completions response body; MalformedResponse if the
    body lacks what a completion needs."""
    if not isinstance(body, dict):
        raise MalformedResponse("body is not a JSON object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise MalformedResponse("no choices in the body")
    choice = choices[0]
    if chat:
        message = choice.get("message")
        text = message.get("content") if isinstance(message, dict) else None
        if text is None and isinstance(message, dict) and "content" in message:
            text = ""  # e.g. a refusal or tool call: an empty answer, not a broken body
    else:
        text = choice.get("text")
    if not isinstance(text, str):
        raise MalformedResponse("choice has no text")
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    try:
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        output_tokens = int(usage.get("completion_tokens") or 0)
    except (TypeError, ValueError) as err:
        raise MalformedResponse("usage counts are not integers") from err
    finish = choice.get("finish_reason") or "stop"
    return Completion(text, str(finish), prompt_tokens, output_tokens, latency)


def auth_headers(name: str, spec: Mapping[str, Any]) -> dict[str, str]:
    """The Authorization header of the key in the environment variable ``api_key_env`` (none
    without one); the key is registered as a secret, so it is scrubbed wherever it shows."""
    env = spec.get("api_key_env")
    if not env:
        return {}
    key = os.environ.get(str(env), "")
    if not key:
        raise ConfigError(
            f"models.{name}.api_key_env: environment variable {env} is not set or empty"
        )
    register_secret(key)
    return {"Authorization": f"Bearer {key}"}


class OpenAIBackend(Backend):
    prompted = True
    hub_files = ("tokenizer",)  # a local tokenizer counts prompt tokens; the model is the server's

    def __init__(self, name: str, spec: Mapping[str, Any]):
        import httpx

        self.name = name
        self.base_url = str(spec["base_url"]).rstrip("/")
        self.model = str(spec["model"])
        self.concurrency = int(spec["concurrency"])
        self.max_retries = int(spec["max_retries"])
        self.timeout_s = float(spec["timeout_s"])
        self.backoff_base_s = float(spec["backoff_base_s"])
        self.backoff_max_s = float(spec["backoff_max_s"])
        self.retry_after_max_s = float(spec["retry_after_max_s"])
        headers = {"Content-Type": "application/json", **auth_headers(name, spec)}
        self._rng = random.Random()
        self._rng_lock = threading.Lock()
        self._client = httpx.Client(
            timeout=httpx.Timeout(self.timeout_s),
            limits=httpx.Limits(
                max_connections=self.concurrency, max_keepalive_connections=self.concurrency
            ),
            headers=headers,
        )
        # httpx logs every request at INFO; keep our logs to retries and throughput
        logging.getLogger("httpx").setLevel(logging.WARNING)
        self.sleep = time.sleep

    def identity(self) -> dict[str, Any]:
        return {"backend": "openai", "base_url": self.base_url, "model": self.model}

    def __repr__(self) -> str:
        return f"OpenAIBackend({self.name!r}, base_url={self.base_url!r}, model={self.model!r})"

    def _scrub(self, text: str) -> str:
        return scrub_secrets(text)

    def _exchange(self, url: str, content: str) -> tuple[int, Mapping[str, str], bytes]:
        """(status, headers, body) of one attempt, within ``timeout_s`` in all; RequestDeadline
        past it. httpx's own timeouts bound each wait; a watchdog shuts the socket down at the
        deadline once the answer has begun, and the body is read in pieces checked against
        the deadline."""
        import httpx

        deadline = time.monotonic() + self.timeout_s
        with self._client.stream("POST", url, content=content) as response:
            watchdog = threading.Timer(
                max(0.0, deadline - time.monotonic()),
                _shut_down,
                (response.extensions.get("network_stream"),),
            )
            watchdog.daemon = True
            watchdog.start()
            try:
                body = bytearray()
                for piece in response.iter_bytes():
                    body += piece
                    if time.monotonic() > deadline:
                        raise RequestDeadline
            except httpx.HTTPError:
                if time.monotonic() >= deadline:
                    raise RequestDeadline from None
                raise
            finally:
                watchdog.cancel()
            return response.status_code, response.headers, bytes(body)

    def request_body(self, request: Request) -> tuple[str, dict[str, Any]]:
        """(endpoint path, JSON body) of one request."""
        params = request.params
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": int(params.max_tokens),
            "temperature": float(params.temperature),
            "seed": int(params.seed),
        }
        if params.stop:
            body["stop"] = list(params.stop)
        if request.messages is not None:
            body["messages"] = [dict(m) for m in request.messages]
            return "/chat/completions", body
        body["prompt"] = request.prompt
        return "/completions", body

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.retry_after_max_s)
        with self._rng_lock:
            return backoff_delay(attempt, self.backoff_base_s, self.backoff_max_s, self._rng)

    def call(self, request: Request) -> Completion:
        """One request with retries; LLMError when it fails for good."""
        import httpx

        path, body = self.request_body(request)
        url = self.base_url + path
        chat = request.messages is not None
        attempts = self.max_retries + 1
        last = "no attempt"
        for attempt in range(attempts):
            retry_after = None
            started = time.perf_counter()
            try:
                status, headers, raw = self._exchange(url, json.dumps(body))
            except (httpx.TimeoutException, RequestDeadline):
                last = f"timeout: no complete answer within {self.timeout_s:g} s"
            except httpx.TransportError as err:
                last = f"connection error ({type(err).__name__})"
            else:
                if status == 200:
                    try:
                        completion = parse_completion(
                            json.loads(raw), chat, time.perf_counter() - started
                        )
                    except (ValueError, MalformedResponse) as err:
                        last = f"HTTP 200 with a malformed body ({self._scrub(str(err))[:120]})"
                    else:
                        # a server may echo the key: it must not reach the cache or outputs
                        return dataclasses.replace(completion, text=self._scrub(completion.text))
                elif status in RETRYABLE_STATUS or status >= 500:
                    last = f"HTTP {status}"
                    retry_after = parse_retry_after(headers.get("retry-after"))
                else:
                    text = raw.decode("utf-8", errors="replace")
                    detail = self._scrub(text.strip().replace("\n", " "))[:300]
                    raise LLMError(
                        f"model {self.name}: server {self.base_url} rejected the request to "
                        f"{path}: HTTP {status}: {detail}"
                    )
            if attempt + 1 < attempts:
                delay = self._delay(attempt, retry_after)
                log.warning(
                    "model %s: server %s: %s (attempt %d/%d), retrying in %.2f s",
                    self.name,
                    self.base_url,
                    last,
                    attempt + 1,
                    attempts,
                    delay,
                )
                self.sleep(delay)
        raise LLMError(
            f"model {self.name}: server {self.base_url} failed after {attempts} attempts; "
            f"last status: {last}"
        )

    def stream(self, requests: list[Request]) -> Iterator[tuple[int, Completion]]:
        if not requests:
            return
        pool = ThreadPoolExecutor(max_workers=min(self.concurrency, len(requests)))
        error: BaseException | None = None
        try:
            futures = {pool.submit(self.call, r): i for i, r in enumerate(requests)}
            for future in as_completed(futures):
                try:
                    completion = future.result()
                except CancelledError:
                    continue
                except Exception as err:  # first failure: cancel what has not started
                    if error is None:
                        error = err
                        for other in futures:
                            other.cancel()
                    continue
                yield futures[future], completion
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        if error is not None:
            raise error

    def generate(self, requests: list[Request]) -> list[Completion]:
        results = dict(self.stream(requests))
        return [results[i] for i in range(len(requests))]

    def close(self) -> None:
        self._client.close()
