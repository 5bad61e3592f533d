"""``splits hypotheses <action>``: one action per job of the hypotheses stage family.

Sets (each writes ``<set>.parquet`` with the columns of ``lexicon.SET_COLUMNS`` and a JSON report
of what was kept and skipped): ``file``, ``sample``, ``theories``, ``generate``. Per set:
``lift`` and ``triviality``. The run: ``table`` (BH q, the two-stage filter), ``report`` (plots).
"""

from __future__ import annotations

import argparse
import json
import logging
from collections import Counter
from pathlib import Path

import polars as pl

from splits.config.definitions import load_demographics, load_topics
from splits.errors import ConfigError
from splits.hypotheses.lexicon import (
    Limits,
    frame_hypotheses,
    hypotheses_frame,
    read_records,
)
from splits.io import read_json, write_json, write_parquet, write_text

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- helpers


def _run_context(args: argparse.Namespace) -> tuple[list, list[str]]:
    topics = load_topics(args.topics_file)
    demographics = [d.key for d in load_demographics(args.demographics)]
    return topics, demographics


def _limits(args: argparse.Namespace) -> dict:
    if not 1 <= args.max_phrase_tokens <= 32:
        raise ConfigError("hypotheses.max_phrase_tokens: must be between 1 and 32")
    if args.max_entries < 1:
        raise ConfigError("hypotheses.max_entries: must be at least 1")
    return {"limits": Limits(args.max_entries, args.max_phrase_tokens)}


def _write_set(cleaned, out: str, report: str, extra: dict | None = None) -> None:
    frame = hypotheses_frame(cleaned.hypotheses)
    write_parquet(frame, out)
    counts = cleaned.report()
    counts["by_source"] = dict(sorted(Counter(frame["source"].to_list()).items()))
    write_json({**counts, **(extra or {})}, report)
    log.info("%d hypotheses written to %s (skipped: %s)", frame.height, out, counts["skipped"])


def _read_topic_posts(path: str) -> pl.DataFrame:
    if not Path(path).is_file():
        raise ConfigError(f"topic posts {path} do not exist")
    frame = pl.read_parquet(path)
    missing = {"post_id", "text", "demographic", "topic"} - set(frame.columns)
    if missing:
        raise ConfigError(f"{path}: missing column(s) {', '.join(sorted(missing))}")
    return frame


def _model(args: argparse.Namespace):
    from splits.evaluation.common import model_registry
    from splits.llm import load_model

    return load_model(args.model, model_registry(args.model, args.model_spec), args.cache)


def _sampling(args: argparse.Namespace):
    from splits.llm.base import SamplingParams

    return SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens, seed=args.seed)


def _complete(model, requests) -> tuple[list[str], Counter]:
    problems: Counter = Counter()
    replies = []
    for completion in model.generate(requests):
        if completion.finish_reason == "error":
            problems["model_error"] += 1
        elif completion.finish_reason == "length":
            problems["reply_cut_at_max_tokens"] += 1
        replies.append(completion.text if completion.finish_reason != "error" else "")
    return replies, problems


# --------------------------------------------------------------------------- set actions


def run_file(args: argparse.Namespace) -> int:
    from splits.hypotheses.sources import clean_records

    topics, demographics = _run_context(args)
    records, unreadable = read_records(args.input)
    cleaned = clean_records(
        records,
        [t.topic for t in topics],
        demographics,
        _limits(args),
        f"file/{args.name}:",
        f"hypotheses.files.{args.name} ({args.input})",
    )
    cleaned.skipped.update(unreadable)
    _write_set(cleaned, args.out, args.report, {"records": len(records) + sum(unreadable.values())})
    return 0


def run_sample(args: argparse.Namespace) -> int:
    from splits.hypotheses.sources import clean_records, sample_records
    from splits.hypotheses.triviality import load_identity_words

    topics, demographics = _run_context(args)
    meta = read_json(args.meta)
    identity = load_identity_words(args.identity_words, args.demographics)
    posts = _read_topic_posts(args.topic_posts)
    records = sample_records(
        meta, posts, identity, [t.topic for t in topics], demographics, args.seed
    )
    cleaned = clean_records(
        records,
        [t.topic for t in topics],
        demographics,
        _limits(args),
        "sample:",
        "hypotheses.sample (synth_meta.json)",
    )
    _write_set(cleaned, args.out, args.report, {"records": len(records)})
    return 0


def run_theories(args: argparse.Namespace) -> int:
    from splits.evaluation.common import display_names, read_rows
    from splits.hypotheses.sources import (
        clean_records,
        oracle_records,
        records_from_replies,
        theory_requests,
    )

    topics, demographics = _run_context(args)
    rows = read_rows(args.rows)
    if not Path(args.theories).is_file():
        raise ConfigError(f"theories {args.theories} do not exist")
    theories = pl.read_parquet(args.theories)
    name = f"theory/{args.experiment}/{args.tm}/k-{args.k}"
    if args.tm_kind == "oracle-lexical":
        records, problems = oracle_records(theories, rows)
    else:
        if not args.model:
            raise ConfigError(
                "hypotheses.theory_model: set a registry LLM to turn free-text theories into lexicons"
            )
        names = display_names(args.demographics)
        requests, contexts, problems = theory_requests(
            theories, rows, names, args.prompt, _sampling(args)
        )
        with _model(args) as model:
            replies, failed = _complete(model, requests)
        problems.update(failed)
        records, unread = records_from_replies(replies, contexts, "theory")
        problems.update(unread)
    cleaned = clean_records(
        records,
        [t.topic for t in topics],
        demographics,
        _limits(args),
        f"{name}:",
        f"hypotheses.theories ({args.tm}, k={args.k})",
        default_source="theory",
    )
    cleaned.skipped.update(problems)
    _write_set(cleaned, args.out, args.report, {"theories": theories.height})
    return 0


def run_generate(args: argparse.Namespace) -> int:
    from splits.evaluation.common import display_names
    from splits.hypotheses.sources import clean_records, generation_requests, records_from_replies

    topics, demographics = _run_context(args)
    wanted = set(args.topics or [t.topic for t in topics])
    unknown = wanted - {t.topic for t in topics}
    if unknown:
        raise ConfigError(f"hypotheses.generate.topics: unknown topic(s) {sorted(unknown)}")
    posts = _read_topic_posts(args.topic_posts)
    requests, contexts = generation_requests(
        posts,
        [(t.category, t.topic) for t in topics if t.topic in wanted],
        demographics,
        display_names(args.demographics),
        args.prompt,
        args.posts_per_group,
        args.per_pool,
        _sampling(args),
        args.seed,
    )
    if not requests:
        raise ConfigError("hypotheses.generate: no (topic, pair) has posts of both groups")
    log.info("%d generation requests to %s", len(requests), args.model)
    with _model(args) as model:
        replies, problems = _complete(model, requests)
    records, unread = records_from_replies(replies, contexts, "llm")
    problems.update(unread)
    cleaned = clean_records(
        records,
        [t.topic for t in topics],
        demographics,
        _limits(args),
        f"llm/{args.model}:",
        f"hypotheses.generate ({args.model}, {len(requests)} replies)",
        default_source="llm",
    )
    cleaned.skipped.update(problems)
    _write_set(cleaned, args.out, args.report, {"requests": len(requests)})
    return 0


# --------------------------------------------------------------------------- per set


def _read_set(path: str) -> list:
    if not Path(path).is_file():
        raise ConfigError(f"hypothesis set {path} does not exist")
    return frame_hypotheses(pl.read_parquet(path))


def run_lift(args: argparse.Namespace) -> int:
    from splits.hypotheses.lift import LiftSettings, evaluate_set, lift_frame

    hypotheses = _read_set(args.set)
    fractions = tuple(sorted(set(args.k_fractions)))
    if not fractions or not all(0 < f <= 1 for f in fractions):
        raise ConfigError("hypotheses.k_fractions: each must be in (0, 1]")
    if args.list_size is not None and args.list_size < 1:
        raise ConfigError("hypotheses.list_size: must be at least 1 (or null: the whole pool)")
    if not 0 < args.alpha < 1:
        raise ConfigError("hypotheses.alpha: must be in (0, 1)")
    if not Path(args.topic_posts).is_file():
        raise ConfigError(f"topic posts {args.topic_posts} do not exist")
    retrieval = retrieval_settings(args)
    if retrieval.analyzer == "wordpiece" and not retrieval.vocab:
        raise ConfigError("hypotheses.retrieval.vocab: the wordpiece analyzer needs a vocab.txt")
    settings = LiftSettings(fractions, args.list_size, args.alpha, args.seed, retrieval)
    result = evaluate_set(hypotheses, pl.scan_parquet(args.topic_posts), settings)
    frame = lift_frame(result.rows, args.alpha)
    write_parquet(frame, args.out)
    evaluated = frame["hypothesis_id"].n_unique() if frame.height else 0
    write_json(
        {
            "hypotheses": len(hypotheses),
            "hypotheses_with_rows": evaluated,
            "rows": frame.height,
            "pools": result.pools,
            "posts_left_out_in_both_groups": result.posts_in_both_groups,
            "skipped": dict(sorted(result.skipped.items())),
            "retrieval": {
                "mode": retrieval.mode,
                "bm25": retrieval.bm25.method,
                "k1": retrieval.bm25.k1,
                "b": retrieval.bm25.b,
                "delta": retrieval.bm25.delta,
                "analyzer": retrieval.analyzer,
                "max_tokens": retrieval.max_tokens,
                "doc_count": retrieval.doc_count if retrieval.mode == "release" else None,
            },
        },
        args.report,
    )
    log.info(
        "%d lift rows of %d/%d hypotheses over %d pools (skipped: %s)",
        frame.height,
        evaluated,
        len(hypotheses),
        result.pools,
        dict(result.skipped),
    )
    return 0


def retrieval_settings(args: argparse.Namespace):
    from splits.hypotheses.release import RetrievalSettings

    return RetrievalSettings(
        mode=args.retrieval_mode,
        method=None if args.bm25_method == "default" else args.bm25_method,
        k1=args.bm25_k1,
        b=args.bm25_b,
        delta=args.bm25_delta,
        analyzer=args.analyzer,
        vocab=args.vocab,
        max_tokens=args.max_tokens,
        doc_count=args.doc_count,
    )


def run_triviality(args: argparse.Namespace) -> int:
    from splits.hypotheses.triviality import (
        covered_identity_words,
        joined,
        load_encoder,
        load_identity_words,
        require_identity_words,
        triviality_scores,
    )

    hypotheses = _read_set(args.set)
    words = load_identity_words(args.identity_words, args.demographics)
    require_identity_words(words, sorted({h.target for h in hypotheses}))
    try:
        registry = json.loads(args.models_json) if args.models_json else {}
    except json.JSONDecodeError as err:
        raise ConfigError(f"--models-json is not JSON ({err.msg})") from err
    encoder = load_encoder(args.encoder, registry)
    pairs = [(joined(words[h.target]), joined(list(h.lexicon))) for h in hypotheses]
    scores = triviality_scores(encoder, pairs, args.batch_texts)
    frame = pl.DataFrame(
        {
            "hypothesis_id": [h.hypothesis_id for h in hypotheses],
            "triviality": scores,
            "identity_words_covered": [
                covered_identity_words(words[h.target], h.lexicon) for h in hypotheses
            ],
        },
        schema={
            "hypothesis_id": pl.String,
            "triviality": pl.Float64,
            "identity_words_covered": pl.List(pl.String),
        },
    )
    write_parquet(frame, args.out)
    log.info("triviality of %d hypotheses with %s", frame.height, encoder.name)
    return 0


# --------------------------------------------------------------------------- the run


def run_table(args: argparse.Namespace) -> int:
    from splits.hypotheses.table import build_table, filtered, stage_counts

    if len(args.lift) != len(args.triviality) or len(args.lift) != len(args.sets):
        raise ConfigError("hypotheses table: give one --lift, --triviality and --sets per set")
    thresholds = sorted(set(args.thresholds))
    lift = pl.concat([pl.read_parquet(p) for p in args.lift], how="vertical_relaxed")
    triviality = pl.concat([pl.read_parquet(p) for p in args.triviality])
    notes = pl.concat([pl.read_parquet(p, columns=["hypothesis_id", "note"]) for p in args.sets])
    if lift.is_empty():
        raise ConfigError(
            "hypotheses: no hypothesis could be evaluated (see the lift reports under "
            "results/hypotheses/lift/)"
        )
    table = build_table(lift, triviality)
    write_parquet(table, args.out_table)
    survivors = filtered(table, notes, args.alpha, thresholds)
    write_text(
        survivors.with_columns(
            pl.col("lexicon").list.join("; "),
            pl.col("identity_words_covered").list.join("; "),
        ).write_csv(),
        args.out_filtered,
    )
    counts = stage_counts(table, args.alpha, thresholds)
    write_text(counts.write_csv(), args.out_stages)
    log.info(
        "%d rows of %d hypotheses; %d rows pass both stages (q < %g, triviality < %g)",
        table.height,
        table["hypothesis_id"].n_unique(),
        survivors.height,
        args.alpha,
        max(thresholds),
    )
    return 0


def run_report(args: argparse.Namespace) -> int:
    from splits.hypotheses.table import plot_curves, plot_scatter, plot_stages, top_hypotheses

    table = pl.read_parquet(args.table)
    counts = pl.read_csv(args.stages)
    fractions = sorted(set(table["k_fraction"].to_list()))
    if not any(abs(f - args.k) < 1e-12 for f in fractions):
        raise ConfigError(
            f"hypotheses.report_k: {args.k:g} is not one of the k fractions {fractions}"
        )
    plot_scatter(table, args.k, args.alpha, sorted(set(args.thresholds)), Path(args.out_scatter))
    ids = top_hypotheses(table, args.k, args.alpha, args.top)
    plot_curves(table, ids, Path(args.out_curves))
    plot_stages(counts, args.k, Path(args.out_stages))
    return 0


# --------------------------------------------------------------------------- parser


def _add_context(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topics-file", required=True, help="the run's topic list")
    parser.add_argument("--demographics", required=True, help="the run's demographics file")
    parser.add_argument("--max-entries", type=int, default=50, help="most entries per lexicon")
    parser.add_argument(
        "--max-phrase-tokens", type=int, default=6, help="most tokens per lexicon entry"
    )


def _add_set_out(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="the set (Parquet)")
    parser.add_argument("--report", required=True, help="counts of kept and skipped (JSON)")


def _add_llm(parser: argparse.ArgumentParser, required: bool) -> None:
    parser.add_argument("--model", required=required, help="registry model name")
    parser.add_argument("--model-spec", help="the model's registry entry (JSON)")
    parser.add_argument("--cache", help="response cache (SQLite)")
    parser.add_argument("--prompt", help="prompt template")
    parser.add_argument(
        "--temperature", type=float, default=0.0, help="sampling temperature (0: greedy)"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=1024, help="most tokens the model generates per answer"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the model's sampling")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)

    p = sub.add_parser("file", help="a user hypothesis file (YAML, CSV, JSONL) -> a set")
    p.add_argument("--input", required=True, help="the hypothesis file")
    p.add_argument("--name", required=True, help="the set's name (hypotheses.files key)")
    _add_context(p)
    _add_set_out(p)

    p = sub.add_parser("sample", help="planted, null and trivial hypotheses of the sample corpus")
    p.add_argument("--meta", required=True, help="synth_meta.json of the generated corpus")
    p.add_argument("--topic-posts", required=True, help="results/topics/topic_posts.parquet")
    p.add_argument("--identity-words", help="identity words mapping (default: demographics file)")
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the sampled null and trivial hypotheses"
    )
    _add_context(p)
    _add_set_out(p)

    p = sub.add_parser("theories", help="lexicons from the theories of one TM at one k")
    p.add_argument("--theories", required=True, help="the TM's theories (Parquet)")
    p.add_argument("--rows", required=True, help="the evaluation rows the theories are of")
    p.add_argument(
        "--experiment", required=True, help="experiment name (evaluation.experiments key)"
    )
    p.add_argument("--tm", required=True, help="theory model name")
    p.add_argument(
        "--k", type=int, required=True, help="posts per side the theories were written from (k)"
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
    p.add_argument(
        "--topic-posts", required=True, help="topic posts of the run (topic_posts.parquet)"
    )
    p.add_argument("--topics", nargs="*", help="topics to generate for (default: all)")
    p.add_argument(
        "--posts-per-group", type=int, default=10, help="example posts per group shown to the model"
    )
    p.add_argument("--per-pool", type=int, default=5, help="hypotheses asked per (topic, pair)")
    _add_llm(p, required=True)
    _add_context(p)
    _add_set_out(p)

    p = sub.add_parser("lift", help="lift@k, p and the interval of every hypothesis of a set")
    p.add_argument("--set", required=True, help="the hypothesis set (Parquet)")
    p.add_argument(
        "--topic-posts", required=True, help="topic posts of the run (topic_posts.parquet)"
    )
    p.add_argument(
        "--k-fractions",
        type=float,
        nargs="+",
        required=True,
        help="retrieval depths k as fractions of the ranked list",
    )
    p.add_argument(
        "--list-size",
        type=lambda v: None if v == "all" else int(v),
        default=None,
        help="posts per side in the ranked list ('all' or a number)",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="significance level of the lift test and its interval",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the sampled lists")
    p.add_argument("--out", required=True, help="lift of every hypothesis (Parquet)")
    p.add_argument("--report", required=True, help="counts of scored and skipped hypotheses (JSON)")
    p.add_argument(
        "--retrieval-mode",
        choices=("project", "release"),
        default="project",
        help="project: BM25 over the pool; release: the 2026 release's padded Lucene list",
    )
    p.add_argument(
        "--bm25-method",
        choices=("default", "robertson", "lucene", "atire", "bm25l", "bm25+"),
        default="default",
        help="BM25 variant (default: robertson in project mode, lucene in release mode)",
    )
    p.add_argument("--bm25-k1", type=float, default=None, help="k1 (default: the method's)")
    p.add_argument("--bm25-b", type=float, default=None, help="b (default: the method's)")
    p.add_argument("--bm25-delta", type=float, default=0.5, help="delta of bm25l and bm25+")
    p.add_argument(
        "--analyzer",
        choices=("words", "wordpiece"),
        default="words",
        help="tokens of posts and entries: letter/digit words, or WordPiece from --vocab",
    )
    p.add_argument("--vocab", default=None, help="WordPiece vocab.txt (or tokenizer.json)")
    p.add_argument(
        "--max-tokens",
        type=lambda v: None if v == "all" else int(v),
        default=None,
        help="WordPiece pieces kept per post ('all' or a number; the release keeps all)",
    )
    p.add_argument("--doc-count", type=int, default=1000, help="release mode: list length")

    p = sub.add_parser("triviality", help="SubspaceBERTScore recall of a set's lexicons")
    p.add_argument("--set", required=True, help="the hypothesis set (Parquet)")
    p.add_argument(
        "--demographics", required=True, help="the run's demographics file (identity words)"
    )
    p.add_argument("--identity-words", help="identity words mapping (default: demographics file)")
    p.add_argument("--encoder", required=True, help="registry name, or Hugging Face id / path")
    p.add_argument("--models-json", help="registry entry of the encoder (JSON)")
    p.add_argument("--batch-texts", type=int, default=256, help="texts encoded per batch")
    p.add_argument("--out", required=True, help="triviality of every hypothesis (Parquet)")

    p = sub.add_parser("table", help="the run's table: BH q, the two-stage filter, stage counts")
    p.add_argument("--lift", nargs="+", required=True, help="lift tables of the sets (Parquet)")
    p.add_argument(
        "--triviality", nargs="+", required=True, help="triviality tables of the sets (Parquet)"
    )
    p.add_argument("--sets", nargs="+", required=True, help="the hypothesis sets (Parquet)")
    p.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="false discovery rate of the Benjamini-Hochberg step",
    )
    p.add_argument(
        "--thresholds",
        type=float,
        nargs="+",
        default=[0.3, 0.5],
        help="triviality thresholds of the filter's second stage",
    )
    p.add_argument(
        "--out-table", required=True, help="every hypothesis with q and filter columns (Parquet)"
    )
    p.add_argument(
        "--out-filtered", required=True, help="the hypotheses that pass the filter (CSV)"
    )
    p.add_argument(
        "--out-stages", required=True, help="hypotheses left after each filter stage (CSV)"
    )

    p = sub.add_parser("report", help="plots: lift vs triviality, lift@k curves, stage counts")
    p.add_argument("--table", required=True, help="the run's hypotheses table (Parquet)")
    p.add_argument("--stages", required=True, help="stage counts (CSV)")
    p.add_argument(
        "--k", type=float, default=0.05, help="retrieval depth (fraction) of the scatter plot"
    )
    p.add_argument(
        "--alpha", type=float, default=0.05, help="false discovery rate marked in the plots"
    )
    p.add_argument(
        "--thresholds",
        type=float,
        nargs="+",
        default=[0.3, 0.5],
        help="triviality thresholds drawn in the plots",
    )
    p.add_argument("--top", type=int, default=8, help="hypotheses drawn in the lift@k curves")
    p.add_argument("--out-scatter", required=True, help="lift against triviality plot (SVG)")
    p.add_argument("--out-curves", required=True, help="lift@k curves plot (SVG)")
    p.add_argument("--out-stages", required=True, help="stage counts plot (SVG)")


ACTIONS = {
    "file": run_file,
    "sample": run_sample,
    "theories": run_theories,
    "generate": run_generate,
    "lift": run_lift,
    "triviality": run_triviality,
    "table": run_table,
    "report": run_report,
}


def run(args: argparse.Namespace) -> int:
    return ACTIONS[args.action](args)
