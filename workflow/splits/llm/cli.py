"""``splits llm``: run a JSONL file of prompts through a registry model (debugging, smoke tests).

Input lines: ``{"prompt": "..."}`` or ``{"messages": [{"role": ..., "content": ...}, ...]}``,
optionally with ``id``, ``temperature``, ``max_tokens``, ``seed``, ``stop`` (list) and
``payload`` (for builtin models). Output lines (same order): ``id, text, finish_reason,
prompt_tokens, output_tokens, latency_s, cached``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from splits.config.settings import add_settings_arguments, settings_from_args
from splits.io import write_text
from splits.llm.base import LLMError, SamplingParams
from splits.llm.jsonl import completion_lines, read_requests
from splits.llm.registry import load_model
from splits.llm.settings import LLMBatchSettings

log = logging.getLogger(__name__)


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
    text = completion_lines([ident for ident, _ in items], completions)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        write_text(text, args.output)
    n_cached = sum(c.cached for c in completions)
    log.info(
        "%d completions (%d from the cache) from model %s", len(completions), n_cached, args.model
    )
    return 0
