"""``splits sandbox``: serve the sandbox page over a finished run, on localhost by default."""

from __future__ import annotations

import argparse
import logging

from splits.errors import ConfigError
from splits.hypotheses.engine import TOP_POSTS

log = logging.getLogger(__name__)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--results", default="results", help="the run's results folder (default: results)"
    )
    parser.add_argument(
        "--configfile",
        default="config/config.yaml",
        help="the run's config (seed, hypotheses settings, demographics file, encoder)",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 opens it to the network)",
    )
    parser.add_argument("--port", type=int, default=7860, help="port (default 7860)")
    parser.add_argument(
        "--encoder",
        help="triviality encoder (default: the config's hypotheses.encoder; none: no triviality)",
    )
    parser.add_argument(
        "--top-posts", type=int, default=TOP_POSTS, help="retrieved posts shown per query"
    )


def run(args: argparse.Namespace) -> int:
    from splits.sandbox.app import import_gradio, launch
    from splits.sandbox.query import Sandbox

    if not 0 < args.port < 65536:
        raise ConfigError(f"--port: {args.port} is not a port number")
    if args.top_posts < 1:
        raise ConfigError("--top-posts: must be at least 1")
    import_gradio()  # fail before loading the run when the extra is missing
    logging.getLogger("httpx").setLevel(logging.WARNING)  # Gradio's own startup requests
    sandbox = Sandbox.from_run(args.results, args.configfile, args.encoder, args.top_posts)
    log.info(
        "serving %d topics x %d groups from %s on http://%s:%d (Ctrl-C stops)",
        len(sandbox.engine.topics),
        len(sandbox.engine.demographics),
        args.results,
        args.host,
        args.port,
    )
    launch(sandbox, args.host, args.port)
    return 0
