"""The ``--tiny`` option every ``bench/bench_*.py`` script has: sizes small enough that the whole
benchmark runs in seconds, so that ``tests/test_bench.py`` runs every one of them and a
benchmark cannot go stale unseen (its numbers mean nothing at that size).

A script parses its arguments with :func:`parse_args`, naming the values ``--tiny`` sets; where
a benchmark cannot run here at all (no vllm, no reference data), its tiny run calls
:func:`skip` with the reason once its arguments are parsed."""

from __future__ import annotations

import argparse
import sys

SKIP_PREFIX = "bench skipped: "


def parse_args(
    parser: argparse.ArgumentParser, argv: list[str] | None = None, **tiny: object
) -> argparse.Namespace:
    """``parser``'s arguments, with a ``--tiny`` flag that sets the given values."""
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="tiny sizes, seconds: checks that the benchmark runs (its numbers mean nothing)",
    )
    args = parser.parse_args(argv)
    if args.tiny:
        for name, value in tiny.items():
            if not hasattr(args, name):
                raise SystemExit(f"--tiny sets {name!r}, which is not an argument of this script")
            setattr(args, name, value)
    return args


def skip(reason: str) -> None:
    """Stop a benchmark that cannot run on this machine, saying why (exit status 0)."""
    print(f"{SKIP_PREFIX}{reason}", flush=True)
    sys.exit(0)
