"""``splits serve``: the entry point of a model's server in served mode (``run``, started by the
jobs, :mod:`splits.llm.serve`) and ``stop`` (the workflow calls it when a run ends)."""

from __future__ import annotations

import argparse
import json
import logging

from splits.errors import ConfigError
from splits.llm.backends import BACKENDS, backend_class
from splits.llm.serve import settings_from_json, stop_servers
from splits.llm.server import run_server

log = logging.getLogger(__name__)


def _servable(backend: object) -> bool:
    return isinstance(backend, str) and backend in BACKENDS and backend_class(backend).servable


def configure_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    serve = sub.add_parser("run", help="serve one model until it is idle (started by the jobs)")
    serve.add_argument("--model", required=True, help="model name in the registry")
    serve.add_argument("--model-spec", required=True, help="the registry entry of --model, as JSON")
    serve.add_argument(
        "--settings",
        required=True,
        help="served mode's settings as JSON, as the jobs inherit them (SPLITS_LLM_SERVE): the "
        "servers folder (dir) and the llm.serve keys",
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
    if not isinstance(spec, dict) or not _servable(spec.get("backend")):
        served = [name for name in sorted(BACKENDS) if backend_class(name).servable]
        raise ConfigError(f"--model-spec: served mode serves backends {', '.join(served)} only")
    return run_server(args.model, spec, settings_from_json(args.settings, "--settings"))
