"""``splits llm``: run a JSONL file of prompts through a registry model (debugging, smoke tests).

Input lines: ``{"prompt": "..."}`` or ``{"messages": [{"role": ..., "content": ...}, ...]}``,
optionally with ``id``, ``temperature``, ``max_tokens``, ``seed``, ``stop`` (list) and
``payload`` (for builtin models). Output lines (same order): ``id, text, finish_reason,
prompt_tokens, output_tokens, latency_s, cached``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from splits.config.settings import add_settings_arguments, settings_from_args
from splits.errors import ConfigError
from splits.io import write_text
from splits.llm.base import LLMError, Request, SamplingParams
from splits.llm.registry import load_model
from splits.llm.settings import LLMBatchSettings

log = logging.getLogger(__name__)
REQUEST_KEYS = {"id", "prompt", "messages", "temperature", "max_tokens", "seed", "stop", "payload"}


def default_cache() -> Path:
    """The response cache of hand-run batches: the user's cache folder (XDG), so that running
    `splits llm` in any folder leaves no file behind there."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "splits" / "llm_cache.sqlite"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    add_settings_arguments(parser)  # --config FILE (the models registry, seed) or --settings
    parser.add_argument("--model", required=True, help="model name in config['models']")
    parser.add_argument("--input", required=True, help="JSONL file of requests ('-' for stdin)")
    parser.add_argument("--output", default="-", help="JSONL file of completions ('-' for stdout)")
    parser.add_argument(
        "--cache",
        default=str(default_cache()),
        help="response cache (SQLite); by default in the user's cache folder "
        "($XDG_CACHE_HOME/splits, else ~/.cache/splits), never in the working directory: "
        "%(default)s",
    )
    parser.add_argument("--no-cache", action="store_true", help="do not read or write the cache")
    parser.add_argument(
        "--temperature",
        type=float,
        help="temperature of requests that set none (default: greedy, 0)",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        help="max_tokens of requests that set none (default: SamplingParams's, 256)",
    )
    parser.add_argument("--seed", type=int, help="seed of requests that set none (default: seed)")


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


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, LLMBatchSettings)
    given = {"temperature": args.temperature, "max_tokens": args.max_tokens, "seed": args.seed}
    defaults = SamplingParams(
        **{"seed": settings.seed, **{k: v for k, v in given.items() if v is not None}}
    )
    items = read_requests(args.input, defaults)
    cache = None if args.no_cache else args.cache
    try:
        with load_model(args.model, settings.models, cache_path=cache) as model:
            completions = model.generate(
                [r for _, r in items],
                labels=[
                    f"request {n} of {args.input}" + (f", id {ident}" if ident is not None else "")
                    for n, (ident, _) in enumerate(items, start=1)
                ],
            )
    except LLMError as err:
        print(f"splits llm: {err}", file=sys.stderr)
        return 1
    lines = []
    for n, ((ident, _), c) in enumerate(zip(items, completions, strict=True)):
        lines.append(
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
        )
    text = "\n".join(lines) + ("\n" if lines else "")
    if args.output == "-":
        sys.stdout.write(text)
    else:
        write_text(text, args.output)
    n_cached = sum(c.cached for c in completions)
    log.info(
        "%d completions (%d from the cache) from model %s", len(completions), n_cached, args.model
    )
    return 0
