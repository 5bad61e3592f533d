"""Persistent response cache: SQLite in WAL mode, shared by concurrent jobs and processes.

Key: sha256 of the canonical JSON of (model identity, sampling parameters, chat messages or raw
prompt, and the payload for builtin models). Value: the completion fields. Every finished
request is committed on its own, so a run killed halfway repeats none of its finished calls, and
several Snakemake jobs may read and write the same file at once (WAL, busy timeout, retries).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from splits.llm.base import Completion, LLMError, Request
from splits.llm.secrets import scrub_secrets

SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 60_000
LOCK_RETRIES = 20


def _canonical(value: Any) -> Any:
    """JSON-able form of payload values (tuples -> lists, sets sorted, numpy scalars -> items)."""
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((_canonical(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        return value.item()
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy array
        return value.tolist()
    return str(value)


def canonical_json(value: Any) -> str:
    return json.dumps(_canonical(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_key(identity: Mapping[str, Any], request: Request, with_payload: bool) -> str:
    """The cache key of one request to one model (hex sha256)."""
    params = asdict(request.params)
    params["stop"] = list(params["stop"])
    if params["temperature"] == 0:
        params.pop("seed")  # greedy decoding does not depend on the seed
    body: dict[str, Any] = {"v": SCHEMA_VERSION, "model": identity, "params": params}
    if request.messages is not None:
        body["messages"] = [dict(m) for m in request.messages]
    else:
        body["prompt"] = request.prompt
    if with_payload:
        body["payload"] = request.payload
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()


def _is_lock_error(err: sqlite3.OperationalError) -> bool:
    text = str(err).lower()
    return "locked" in text or "busy" in text


class ResponseCache:
    """One SQLite file of completions. Safe across threads (one connection behind a lock) and
    processes (WAL mode, busy timeout, retry with jittered backoff on lock errors)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # created here with the umask's mode (SQLite's own default, 0644, ignores a group-writable
        # umask); SQLite gives its -wal and -shm files the database file's mode
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666))
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(
            str(self.path),
            timeout=BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,  # autocommit: each write is its own committed transaction
            check_same_thread=False,
        )
        self._retry(lambda: self._conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}"))
        mode = self._retry(lambda: self._conn.execute("PRAGMA journal_mode=WAL").fetchone())
        if mode is None or str(mode[0]).lower() != "wal":
            raise LLMError(f"response cache {self.path}: cannot switch SQLite to WAL mode")
        self._retry(lambda: self._conn.execute("PRAGMA synchronous=NORMAL"))
        self._retry(
            lambda: self._conn.execute(
                "CREATE TABLE IF NOT EXISTS completions ("
                " key TEXT PRIMARY KEY,"
                " text TEXT NOT NULL,"
                " finish_reason TEXT NOT NULL,"
                " prompt_tokens INTEGER NOT NULL,"
                " output_tokens INTEGER NOT NULL,"
                " latency_s REAL NOT NULL,"
                " created_at REAL NOT NULL)"
            )
        )

    def _retry(self, action):
        for attempt in range(LOCK_RETRIES):
            try:
                with self._lock:
                    return action()
            except sqlite3.OperationalError as err:
                if not _is_lock_error(err) or attempt == LOCK_RETRIES - 1:
                    raise LLMError(f"response cache {self.path}: {err}") from err
                time.sleep(min(2.0, 0.01 * 2**attempt) * (0.5 + random.random()))
        raise AssertionError("unreachable")

    def get_many(self, keys: Iterable[str]) -> dict[str, Completion]:
        """The cached completions among ``keys`` (flagged ``cached=True``)."""
        keys = list(dict.fromkeys(keys))
        found: dict[str, Completion] = {}
        step = 500  # stay under SQLite's bound-parameter limit
        for start in range(0, len(keys), step):
            chunk = keys[start : start + step]
            marks = ",".join("?" * len(chunk))
            rows = self._retry(
                lambda chunk=chunk, marks=marks: self._conn.execute(
                    "SELECT key, text, finish_reason, prompt_tokens, output_tokens, latency_s"
                    f" FROM completions WHERE key IN ({marks})",
                    chunk,
                ).fetchall()
            )
            for key, text, finish, n_prompt, n_out, latency in rows:
                found[key] = Completion(text, finish, n_prompt, n_out, latency, cached=True)
        return found

    def put(self, key: str, completion: Completion) -> None:
        """Store (and commit) one completion."""
        self.put_many([(key, completion)])

    def put_many(self, items: Iterable[tuple[str, Completion]]) -> None:
        rows = [
            (
                key,
                scrub_secrets(c.text),  # no API key is ever stored, whatever the backend
                c.finish_reason,
                int(c.prompt_tokens),
                int(c.output_tokens),
                float(c.latency_s),
                time.time(),
            )
            for key, c in items
        ]
        if not rows:
            return

        def write():
            if len(rows) == 1:
                self._conn.execute(
                    "INSERT OR REPLACE INTO completions VALUES (?,?,?,?,?,?,?)", rows[0]
                )
                return
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.executemany(
                    "INSERT OR REPLACE INTO completions VALUES (?,?,?,?,?,?,?)", rows
                )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

        self._retry(write)

    def __len__(self) -> int:
        return int(
            self._retry(lambda: self._conn.execute("SELECT COUNT(*) FROM completions").fetchone())[
                0
            ]
        )

    def close(self) -> None:
        with self._lock:
            self._conn.close()
