"""The JSONL files of ``splits llm``: request lines in, completion lines out.

Input lines: ``{"prompt": "..."}`` or ``{"messages": [{"role": ..., "content": ...}, ...]}``,
optionally with ``id``, ``temperature``, ``max_tokens``, ``seed``, ``stop`` (list) and
``payload`` (for builtin models). Output lines (same order): ``id, text, finish_reason,
prompt_tokens, output_tokens, latency_s, cached``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from splits.errors import ConfigError
from splits.llm.base import Completion, Request, SamplingParams

REQUEST_KEYS = {"id", "prompt", "messages", "temperature", "max_tokens", "seed", "stop", "payload"}


def parse_request(line: str, where: str, defaults: SamplingParams) -> tuple[Any, Request]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{where}: not valid JSON ({err.msg})") from err
    if not isinstance(record, dict):
        raise ConfigError(f"{where}: expected a JSON object")
    unknown = sorted(set(record) - REQUEST_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}")
    stop = record.get("stop", list(defaults.stop))
    if isinstance(stop, str):
        stop = [stop]
    try:
        params = SamplingParams(
            temperature=float(record.get("temperature", defaults.temperature)),
            max_tokens=int(record.get("max_tokens", defaults.max_tokens)),
            seed=int(record.get("seed", defaults.seed)),
            stop=tuple(str(s) for s in stop),
        )
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where}: bad sampling parameter ({err})") from err
    messages = record.get("messages")
    if messages is not None:
        if not isinstance(messages, list) or not all(
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str)
            for m in messages
        ):
            raise ConfigError(f"{where}: messages must be a list of {{role, content}} strings")
        messages = tuple({"role": m["role"], "content": m["content"]} for m in messages)
    prompt = record.get("prompt")
    if prompt is not None and not isinstance(prompt, str):
        raise ConfigError(f"{where}: prompt must be a string")
    if (messages is None) == (prompt is None):
        raise ConfigError(f"{where}: needs exactly one of 'prompt' or 'messages'")
    return record.get("id"), Request(
        messages=messages, prompt=prompt, params=params, payload=record.get("payload")
    )


def read_requests(path: str, defaults: SamplingParams) -> list[tuple[Any, Request]]:
    if path == "-":
        lines = sys.stdin.read().splitlines()
    else:
        if not Path(path).exists():
            raise ConfigError(f"--input: file {path} does not exist")
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    name = "<stdin>" if path == "-" else path
    return [
        parse_request(line, f"{name}:{n}", defaults)
        for n, line in enumerate(lines, start=1)
        if line.strip()
    ]


def completion_lines(ids: list[Any], completions: list[Completion]) -> str:
    """The output file's text: one JSON line per completion (``id``: the request's, else its
    position)."""
    lines = [
        json.dumps(
            {
                "id": n if ident is None else ident,
                "text": c.text,
                "finish_reason": c.finish_reason,
                "prompt_tokens": c.prompt_tokens,
                "output_tokens": c.output_tokens,
                "latency_s": round(c.latency_s, 6),
                "cached": c.cached,
            },
            ensure_ascii=False,
        )
        for n, (ident, c) in enumerate(zip(ids, completions, strict=True))
    ]
    return "\n".join(lines) + ("\n" if lines else "")
