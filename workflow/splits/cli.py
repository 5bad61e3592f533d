"""The `splits` command: one subcommand per pipeline stage.

Each stage module defines ``configure_parser(parser)`` and ``run(args) -> int`` (or, for a stage
family's ``cli`` module with several subcommands, a table ``SUBCOMMANDS`` of subcommand ->
(configure_parser, run)); this file only maps subcommand names to modules and imports a module when its subcommand is used, so that
``splits ingest --help`` does not pay for importing torch.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import logging
import os
import resource
import sys
import threading
import time

from splits import __version__
from splits.errors import ConfigError, InputError
from splits.filecheck import check_inputs, find_damaged, is_data_error, os_errno, os_error_line

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "synth": (
        "splits.ingest.cli.synth",
        "generate the deterministic sample Reddit corpus and its ground truth",
    ),
    "fetch-convokit": (
        "splits.ingest.cli.fetch_convokit",
        "download ConvoKit subreddit corpora (needs the convokit extra)",
    ),
    "ingest": (
        "splits.ingest.cli.ingest",
        "ingest one ConvoKit / Pushshift input shard into the posts table",
    ),
    "merge-posts": (
        "splits.ingest.cli.merge_posts",
        "merge ingested shards: cross-shard duplicates and the ingest report",
    ),
    "merge-bucket": (
        "splits.ingest.cli.buckets",
        "one posts bucket from every shard's file of it: duplicates, bots, its report",
    ),
    "ingest-report": (
        "splits.ingest.cli.buckets",
        "the ingest report from the shards' and the posts buckets' reports",
    ),
    "graph": (
        "splits.graph.cli",
        "subreddit user graph: top-N subreddits, Jaccard and cosine neighbours",
    ),
    "graph-bucket": (
        "splits.graph.cli",
        "one user bucket's memberships and subreddit counts (ingest.buckets > 1)",
    ),
    "graph-subreddits": (
        "splits.graph.cli",
        "the user buckets' subreddit counts added up, and the top-N rule",
    ),
    "graph-overlaps": (
        "splits.graph.cli",
        "one user bucket's co-membership counts of the kept subreddits",
    ),
    "expand-seeds": (
        "splits.graph.seeds",
        "interactive (or replayed) seed-set expansion over the neighbour lists",
    ),
    "groupness": (
        "splits.demographics.cli",
        "per-demographic users, D_d posts, group-ness and percentiles",
    ),
    "groupness-bucket": (
        "splits.demographics.cli",
        "one posts bucket's seed users of every demographic: counts and group-ness scores",
    ),
    "groupness-posts": (
        "splits.demographics.cli",
        "one posts bucket's part of each demographic's posts D_d (after group-ness's reduce)",
    ),
    "selfid": (
        "splits.demographics.cli",
        "self-ID phrase search, verification, curves and thresholds",
    ),
    "generate-topics": (
        "splits.topics.generate_cli",
        "generate a neutral topic list through an LLM",
    ),
    "topic-splits": ("splits.topics.cli", "BM25 retrieval of topic posts per demographic"),
    "sample": ("splits.sampling.cli", "sample Group Theorization quadruplets and validate them"),
    "export": (
        "splits.sampling.cli",
        "export the dataset (Parquet, dataset card, hashed authors, counts)",
    ),
    "theorize": ("splits.evaluation.cli.theorize", "theory-model (TM) stage"),
    "classify": ("splits.evaluation.cli.classify", "classification-model (CM) stage"),
    "model-batch": (
        "splits.evaluation.cli.model_batch",
        "every TM or CM prompt of one model through one engine (evaluation batch jobs)",
    ),
    "metrics": ("splits.evaluation.cli.metrics", "accuracy tables with intervals and paired tests"),
    "group-splits": (
        "splits.evaluation.cli.group_splits",
        "groups of TMs (strong vs weak) per split: gaps, paired tests, examples",
    ),
    "report": ("splits.evaluation.cli.report", "plots and tables for the evaluation report"),
    "report-tables": (
        "splits.report.tables",
        "HTML pages of table outputs (CSV, Parquet, JSON, Markdown) for the Snakemake report",
    ),
    "human": ("splits.evaluation.cli.human", "human-validation annotation sheets and scores"),
    "release-data": (
        "splits.release_data.cli",
        "the authors' Hugging Face dataset (ecaplan/splits, a local copy) as the pipeline's tables",
    ),
    "hypotheses": (
        "splits.hypotheses.cli",
        "hypothesis validation: lexicon sets, lift@k by BM25 retrieval, triviality, the filter",
    ),
    "fighting-words": (
        "splits.hypotheses.fighting_words_cli",
        "the Fighting Words z-score table (n-gram, counts, prior, z) of two groups of a posts table",
    ),
    "sandbox": (
        "splits.sandbox.cli",
        "local web page: a lexicon's lift@k and retrieved posts, the run's hypotheses table",
    ),
    "lexicon": (
        "splits.api.cli",
        "score one lexicon: lift@k, triviality and top posts of a run, a posts table or the "
        "authors' data",
    ),
    "check": (
        "splits.pipeline.runcheck",
        "read every output of a finished run; name each damaged one and the command remaking it",
    ),
    "probe": ("splits.probes.cli", "bias probes: stress, empathy, grasp, personalization"),
    "llm": ("splits.llm.cli", "run a batch of prompts through a registry model (debugging aid)"),
    "serve": (
        "splits.llm.serve_cli",
        "a model's shared OpenAI-compatible server (served mode, llm.serve; started by the jobs)",
    ),
}


# subcommand -> environment variables set before its module is imported (the one place the
# package writes the environment: library code never does)
ENVIRONMENT: dict[str, dict[str, str]] = {
    "sandbox": {"GRADIO_ANALYTICS_ENABLED": "False"},  # no analytics, no version check
}


class DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default, except where there is none to show (a required option, a flag,
    no value) or the help says it in words already."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        no_value = action.default is None or action.default is False
        if action.required or no_value or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """Every `--help` shows each option's default (subcommands' parsers are of the same class)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def _parse_optional(self, arg_string):
        """A word that starts with a dash but names no option of this parser (a path such as
        ``-data/x.ndjson`` or ``-out/posts.parquet``, a text) is a value, not an unknown option:
        the rules pass every path as one quoted word after its option."""
        parsed = super()._parse_optional(arg_string)
        found = parsed if isinstance(parsed, list) else [parsed]  # a list from Python 3.12.7
        if parsed is not None and all(item[0] is None for item in found):
            return None
        return parsed


# The LLM layer (its package imports jsonschema and the model registry: ~0.1 s) is imported only
# by the subcommands that call a model. Until one has imported it, no secret can have been
# registered and no LLMError raised, so the scrubbing and the model-error line look it up in
# sys.modules instead of importing it for every command.
_SECRETS_MODULE = "splits.llm.secrets"


def scrub_secrets(text: str) -> str:
    """``text`` with the registered secrets replaced (splits.llm.secrets), if any can exist."""
    secrets = sys.modules.get(_SECRETS_MODULE)
    return secrets.scrub_secrets(text) if secrets is not None else text


class _Scrubbing(logging.Filter):
    """splits.llm.secrets.ScrubbingFilter on each record, once that module is loaded."""

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = sys.modules.get(_SECRETS_MODULE)
        return secrets.ScrubbingFilter().filter(record) if secrets is not None else True


def _llm_errors() -> tuple[type[BaseException], ...]:
    """LLMError once splits.llm.base is loaded (it cannot be raised before), else nothing."""
    base = sys.modules.get("splits.llm.base")
    return (base.LLMError,) if base is not None else ()


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="splits", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_module, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def command_functions(module, command: str):
    """(configure_parser, run) of ``command`` in its module."""
    table = getattr(module, "SUBCOMMANDS", None)
    if table is not None:
        return table[command]
    return module.configure_parser, module.run


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    top = build_parser()
    known, rest = top.parse_known_args(argv)
    module_name, help_text = COMMANDS[known.command]
    os.environ.update(ENVIRONMENT.get(known.command, {}))
    module = importlib.import_module(module_name)
    configure_parser, run = command_functions(module, known.command)
    parser = Parser(prog=f"splits {known.command}", description=help_text)
    configure_parser(parser)
    args = parser.parse_args(rest)
    logging.basicConfig(
        level=logging.DEBUG if known.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for handler in logging.getLogger().handlers:  # no API key in any log line
        if not any(isinstance(f, _Scrubbing) for f in handler.filters):
            handler.addFilter(_Scrubbing())
    start = time.perf_counter()
    try:
        check_inputs(args)  # a damaged or unreadable input: one line naming it (splits.filecheck)
        status = int(run(args) or 0)
    except OSError as err:  # a full disk, a refused write: one line naming the path
        found = find_damaged(args) if is_data_error(err) else None
        if found is not None:  # pyarrow's decompression errors are OSErrors with no number
            print(f"splits {known.command}: input error: {found}", file=sys.stderr)
            return 2
        print(f"splits {known.command}: error: {os_error_line(err, args=args)}", file=sys.stderr)
        return 1
    except ConfigError as err:
        print(f"splits {known.command}: config error: {scrub_secrets(str(err))}", file=sys.stderr)
        return 2
    except InputError as err:
        print(f"splits {known.command}: input error: {scrub_secrets(str(err))}", file=sys.stderr)
        return 2
    except _llm_errors() as err:
        print(f"splits {known.command}: model error: {scrub_secrets(str(err))}", file=sys.stderr)
        return 3
    except Exception as err:  # polars and pyarrow quote an OS error in their own exceptions
        if os_errno(err) is not None:
            line = os_error_line(err, args=args)
            print(f"splits {known.command}: error: {line}", file=sys.stderr)
            return 1
        # a file damaged past its footer fails while it is read: find it and name it
        found = find_damaged(args) if is_data_error(err) else None
        if found is None:
            raise
        print(f"splits {known.command}: input error: {found}", file=sys.stderr)
        return 2
    # the job's own peak (kernel high-water mark of this process), for logs and benchmarks
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    logging.getLogger("splits").info(
        "%s: %.1f s, peak memory %.0f MiB", known.command, time.perf_counter() - start, peak_mib
    )
    return status


# modules whose objects own processes, threads or files outside Python (an LLM engine's worker
# processes, the JVM of Lucene, an SQLite cache whose close folds its write-ahead log back into
# the database): where one is loaded, the interpreter's full shutdown runs, which gives their
# finalizers (``__del__``) the chance to stop or close them
_FULL_SHUTDOWN_MODULES = ("torch", "vllm", "jnius", "transformers", "multiprocessing", "sqlite3")


def _children_alive() -> bool:
    """Whether this process has a child still running (Linux's /proc lists them per thread;
    elsewhere none is assumed: the data stages start no processes)."""
    try:
        tasks = os.listdir(f"/proc/{os.getpid()}/task")
    except OSError:
        return False
    for task in tasks:
        try:
            with open(f"/proc/{os.getpid()}/task/{task}/children") as fh:
                if fh.read().strip():
                    return True
        except OSError:
            continue
    return False


def quick_exit_allowed() -> bool:
    """A quick exit skips only the interpreter's teardown (every module and object freed one by
    one: 0.06 s after importing polars, ~0.1 s after an ingest of 340 MB): allowed where
    nothing else is running (no thread but this one that is not a daemon, no child process) and
    no module that owns outside resources is loaded (``_FULL_SHUTDOWN_MODULES``)."""
    if any(name in sys.modules for name in _FULL_SHUTDOWN_MODULES):
        return False
    current = threading.current_thread()
    if any(t is not current and t.is_alive() and not t.daemon for t in threading.enumerate()):
        return False
    return not _children_alive()


def console() -> None:
    """The ``splits`` command (the console script; ``python -m splits.cli``): :func:`main`, then
    the exit. Every job of the workflow is one such process, so the interpreter's teardown is
    paid once per job; where :func:`quick_exit_allowed`, what a normal exit does for the outside
    world is done (the ``atexit`` functions: temporary folders, log handlers flushed and closed;
    the standard streams flushed) and the process ends with ``os._exit``, without freeing its
    objects one by one. ``main`` itself returns normally (tests and notebooks call it)."""
    status = main()
    if not quick_exit_allowed():
        sys.exit(status)
    atexit._run_exitfuncs()  # what sys.exit would run: the atexit functions, logging.shutdown
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said there
            pass
    os._exit(status)


if __name__ == "__main__":
    console()
