"""``splits hypotheses <action>``: one action per job of the hypotheses stage family.

Sets (each writes ``<set>.parquet`` with the columns of ``lexicon.SET_COLUMNS`` and a JSON report
of what was kept and skipped): ``file``, ``sample``, ``theories``, ``generate``, ``fighting-words`` (the counting baseline). Per set:
``lift`` and ``triviality``. The run: ``table`` (BH q, the two-stage filter), ``report`` (plots).

Each action takes its paths as flags and its settings (``splits.hypotheses.settings``, one class
per rule) as ``--settings JSON`` (what the rule passes) or ``--config FILE`` (by hand).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import polars as pl

from splits.config.definitions import load_demographics, load_topics
from splits.config.settings import add_settings_arguments, settings_from_args
from splits.errors import ConfigError
from splits.hypotheses import sets
from splits.hypotheses.settings import (
    FightingWordsSettings,
    FileSettings,
    GenerateSettings,
    LiftSettings,
    ReportSettings,
    SampleSettings,
    TableSettings,
    TheoriesSettings,
    TrivialitySettings,
)
from splits.io import read_json, write_json, write_parquet, write_text

log = logging.getLogger(__name__)


def _context(args: argparse.Namespace) -> tuple[list, list[str]]:
    return load_topics(args.topics_file), [d.key for d in load_demographics(args.demographics)]


def _open_model(args: argparse.Namespace):
    from splits.evaluation.common import model_registry
    from splits.llm import load_model

    return load_model(args.model, model_registry(args.model, args.model_spec), args.cache)


# --------------------------------------------------------------------------- set actions


def run_file(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, FileSettings)
    topics, demographics = _context(args)
    cleaned, extra = sets.file_set(args.input, args.name, topics, demographics, settings)
    sets.write_set(cleaned, args.out, args.report, extra)
    return 0


def run_sample(args: argparse.Namespace) -> int:
    from splits.hypotheses.triviality import load_identity_words

    settings = settings_from_args(args, SampleSettings)
    topics, demographics = _context(args)
    identity = load_identity_words(args.identity_words, args.demographics)
    posts = sets.read_topic_posts(args.topic_posts)
    cleaned, extra = sets.sample_set(
        read_json(args.meta), posts, identity, topics, demographics, settings
    )
    sets.write_set(cleaned, args.out, args.report, extra)
    return 0


def run_theories(args: argparse.Namespace) -> int:
    from splits.evaluation.common import display_names, read_rows

    settings = settings_from_args(args, TheoriesSettings)
    topics, demographics = _context(args)
    rows = read_rows(args.rows)
    if not Path(args.theories).is_file():
        raise ConfigError(f"theories {args.theories} do not exist")
    theories = pl.read_parquet(args.theories)
    name = f"theory/{args.experiment}/{args.tm}/k-{args.k}"
    where = f"hypotheses.theories ({args.tm}, k={args.k})"
    if args.tm_kind == "oracle-lexical":
        cleaned, extra = sets.theory_set(
            theories, rows, topics, demographics, settings, name, where
        )
    else:
        if not args.model:
            raise ConfigError(
                "hypotheses.theory_model: set a registry LLM to turn free-text theories into lexicons"
            )
        if not args.prompt:
            raise ConfigError("hypotheses.theory_prompt: an LLM TM needs the prompt (--prompt)")
        by = (display_names(args.demographics), args.prompt)
        with _open_model(args) as model:
            cleaned, extra = sets.theory_set(
                theories, rows, topics, demographics, settings, name, where, (model, *by)
            )
    sets.write_set(cleaned, args.out, args.report, extra)
    return 0


def run_generate(args: argparse.Namespace) -> int:
    from splits.evaluation.common import display_names

    settings = settings_from_args(args, GenerateSettings)
    topics, demographics = _context(args)
    posts = sets.read_topic_posts(args.topic_posts)
    names = display_names(args.demographics)
    requests, contexts = sets.generation_plan(
        posts, topics, demographics, names, args.prompt, settings
    )
    log.info("%d generation requests to %s", len(requests), args.model)
    with _open_model(args) as model:
        replies, problems = sets.complete(model, requests)
    cleaned, extra = sets.generated_set(
        replies, problems, contexts, topics, demographics, settings, args.model
    )
    sets.write_set(cleaned, args.out, args.report, extra)
    return 0


def run_fighting_words(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, FightingWordsSettings)
    topics, demographics = _context(args)
    posts = sets.read_topic_posts(args.topic_posts)
    for path in args.posts or []:
        if not Path(path).is_file():
            raise ConfigError(f"posts table {path} does not exist")
    cleaned, extra = sets.fighting_words_set(
        posts, args.posts, [p for p in args.model_sets or [] if p], topics, demographics, settings
    )
    sets.write_set(cleaned, args.out, args.report, extra)
    return 0


# --------------------------------------------------------------------------- per set


def run_lift(args: argparse.Namespace) -> int:
    from splits.hypotheses.baseline import read_threads
    from splits.hypotheses.lift import evaluate_set, lift_frame, lift_report, matches_frame

    settings = settings_from_args(args, LiftSettings)
    hypotheses = sets.read_set(args.set)
    for path in (args.topic_posts, *(args.posts or [])):
        if path and not Path(path).is_file():
            raise ConfigError(f"{path} does not exist")
    topic_posts = pl.scan_parquet(args.topic_posts)
    threads = read_threads(
        args.posts, topic_posts.select(pl.col("post_id").cast(pl.String)).collect()["post_id"]
    )
    result = evaluate_set(hypotheses, topic_posts, settings, threads)
    frame = lift_frame(result.rows, settings.alpha)
    write_parquet(frame, args.out)
    if args.matches:
        write_parquet(matches_frame(result), args.matches)
    report = lift_report(len(hypotheses), result, frame, settings)
    write_json(report, args.report)
    log.info(
        "%d lift rows of %d/%d hypotheses over %d pools (skipped: %s)",
        frame.height,
        report["hypotheses_with_rows"],
        len(hypotheses),
        result.pools,
        dict(result.skipped),
    )
    return 0


def run_triviality(args: argparse.Namespace) -> int:
    from splits.hypotheses.triviality import (
        load_encoder,
        load_identity_words,
        require_identity_words,
        triviality_frame,
    )

    settings = settings_from_args(args, TrivialitySettings)
    hypotheses = sets.read_set(args.set)
    words = load_identity_words(args.identity_words, args.demographics)
    try:
        registry = json.loads(args.models_json) if args.models_json else {}
    except json.JSONDecodeError as err:
        raise ConfigError(f"--models-json is not JSON ({err.msg})") from err
    require_identity_words(words, sorted({h.target for h in hypotheses}))  # before the encoder
    encoder = load_encoder(settings.encoder, registry)
    frame = triviality_frame(hypotheses, words, encoder, settings.encoder_batch)
    write_parquet(frame, args.out)
    log.info("triviality of %d hypotheses with %s", frame.height, encoder.name)
    return 0


# --------------------------------------------------------------------------- the run


def run_table(args: argparse.Namespace) -> int:
    from splits.hypotheses.table import run_table as table_of

    settings = settings_from_args(args, TableSettings)
    table, survivors, counts = table_of(
        args.lift, args.triviality, args.sets, settings, args.matches
    )
    write_parquet(table, args.out_table)
    write_text(survivors.write_csv(), args.out_filtered)
    write_text(counts.write_csv(), args.out_stages)
    return 0


def run_report(args: argparse.Namespace) -> int:
    from splits.health import log_findings, write_findings
    from splits.hypotheses.comparison import compare, comparison_plot, counting_finding
    from splits.hypotheses.table import draw_report

    settings = settings_from_args(args, ReportSettings)
    table = pl.read_parquet(args.table)
    counts = pl.read_csv(args.stages)
    outs = (Path(args.out_scatter), Path(args.out_curves), Path(args.out_stages))
    draw_report(table, counts, settings, *outs)
    comparison = compare(table, settings.report_k)
    write_text(comparison.write_csv(), args.out_comparison)
    comparison_plot(comparison, args.out_comparison_plot, settings.report_k)
    finding = counting_finding(comparison, settings.report_k)
    findings = [finding] if finding else []
    log_findings(findings)
    write_findings(args.health, findings)
    return 0


# --------------------------------------------------------------------------- parser


def _add(parser: argparse.ArgumentParser, *flags: tuple[str, str], nargs: str | None = None):
    for flag, help_text in flags:
        parser.add_argument(flag, required=True, nargs=nargs, help=help_text)


def _add_context(parser: argparse.ArgumentParser) -> None:
    _add(
        parser,
        ("--topics-file", "the run's topic list"),
        ("--demographics", "the run's demographics file"),
    )


def _add_set_out(parser: argparse.ArgumentParser) -> None:
    _add(
        parser,
        ("--out", "the set (Parquet)"),
        ("--report", "counts of kept and skipped (JSON)"),
    )
    add_settings_arguments(parser)


def _add_llm(parser: argparse.ArgumentParser, required: bool) -> None:
    parser.add_argument("--model", required=required, help="registry model name")
    parser.add_argument("--model-spec", help="the model's registry entry (JSON)")
    parser.add_argument("--cache", help="response cache (SQLite)")
    parser.add_argument("--prompt", required=required, help="prompt template")


def _identity(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--identity-words", help="identity words mapping (default: demographics file)"
    )


def configure_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)

    p = sub.add_parser("file", help="a user hypothesis file (YAML, CSV, JSONL) -> a set")
    _add(p, ("--input", "the hypothesis file"), ("--name", "the set's name (hypotheses.files key)"))
    _add_context(p)
    _add_set_out(p)

    p = sub.add_parser("sample", help="planted, null and trivial hypotheses of the sample corpus")
    _add(
        p,
        ("--meta", "synth_meta.json of the generated corpus"),
        ("--topic-posts", "topic posts of the run (topic_posts.parquet)"),
    )
    _identity(p)
    _add_context(p)
    _add_set_out(p)

    p = sub.add_parser("theories", help="lexicons from the theories of one TM at one k")
    _add(
        p,
        ("--theories", "the TM's theories (Parquet)"),
        ("--rows", "the evaluation rows the theories are of"),
        ("--experiment", "experiment name (evaluation.experiments key)"),
        ("--tm", "theory model name"),
        ("--k", "posts per side the theories were written from (k)"),
    )
    p.add_argument(
        "--tm-kind",
        choices=("oracle-lexical", "llm"),
        required=True,
        help="oracle-lexical: words read from the theory; llm: a model turns it into lexicons",
    )
    _add_llm(p, required=False)
    _add_context(p)
    _add_set_out(p)

    p = sub.add_parser("generate", help="an LLM proposes lexicons per (topic, pair)")
    _add(p, ("--topic-posts", "topic posts of the run (topic_posts.parquet)"))
    _add_llm(p, required=True)
    _add_context(p)
    _add_set_out(p)

    p = sub.add_parser(
        "fighting-words", help="the counting baseline: Fighting Words lexicons per (topic, pair)"
    )
    _add(p, ("--topic-posts", "topic posts of the run (topic_posts.parquet)"))
    p.add_argument(
        "--posts",
        nargs="+",
        help="the merged posts table, its files (its conversation_id are the threads of the "
        "held-out split; without it each post is its own thread)",
    )
    p.add_argument(
        "--model-sets",
        nargs="*",
        help="the model sets (theory, llm) whose median lexicon size per pool the lexicons take",
    )
    _add_context(p)
    _add_set_out(p)

    p = sub.add_parser("lift", help="lift@k, p and the interval of every hypothesis of a set")
    _add(
        p,
        ("--set", "the hypothesis set (Parquet)"),
        ("--topic-posts", "topic posts of the run (topic_posts.parquet)"),
        ("--out", "lift of every hypothesis (Parquet)"),
        ("--report", "counts of scored and skipped hypotheses (JSON)"),
    )
    p.add_argument(
        "--matches", help="the pool's posts each lexicon matches (Parquet; the table's redundancy)"
    )
    p.add_argument(
        "--posts",
        nargs="+",
        help="the merged posts table, its files (threads of the held-out split; without it "
        "each post is its own thread)",
    )
    add_settings_arguments(p)

    p = sub.add_parser("triviality", help="SubspaceBERTScore recall of a set's lexicons")
    _add(
        p,
        ("--set", "the hypothesis set (Parquet)"),
        ("--demographics", "the run's demographics file (identity words)"),
        ("--out", "triviality of every hypothesis (Parquet)"),
    )
    _identity(p)
    p.add_argument("--models-json", help="registry entry of the encoder (JSON)")
    add_settings_arguments(p)

    p = sub.add_parser("table", help="the run's table: BH q, the two-stage filter, stage counts")
    _add(
        p,
        ("--lift", "lift tables of the sets (Parquet)"),
        ("--triviality", "triviality tables of the sets (Parquet)"),
        ("--sets", "the hypothesis sets (Parquet)"),
        ("--matches", "the posts each set's lexicons match (Parquet)"),
        nargs="+",
    )
    _add(
        p,
        ("--out-table", "every hypothesis with q and filter columns (Parquet)"),
        ("--out-filtered", "the hypotheses that pass the filter (CSV)"),
        ("--out-stages", "hypotheses left after each filter stage (CSV)"),
    )
    add_settings_arguments(p)

    p = sub.add_parser("report", help="plots: lift vs triviality, lift@k curves, stage counts")
    _add(
        p,
        ("--table", "the run's hypotheses table (Parquet)"),
        ("--stages", "stage counts (CSV)"),
        ("--out-scatter", "lift against triviality plot (PNG)"),
        ("--out-curves", "lift@k curves plot (PNG)"),
        ("--out-stages", "stage counts plot (PNG)"),
        ("--out-comparison", "the best model lexicon against Fighting Words (CSV)"),
        ("--out-comparison-plot", "the comparison's plot (PNG)"),
        ("--health", "run-health findings of the stage (JSON)"),
    )
    add_settings_arguments(p)


ACTIONS = {
    "file": run_file,
    "sample": run_sample,
    "theories": run_theories,
    "generate": run_generate,
    "fighting-words": run_fighting_words,
    "lift": run_lift,
    "triviality": run_triviality,
    "table": run_table,
    "report": run_report,
}


def run(args: argparse.Namespace) -> int:
    return ACTIONS[args.action](args)
