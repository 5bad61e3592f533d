"""The set jobs as plain functions: each builds one hypothesis set (``Cleaned``) from its source
and the counts its report adds (``splits.hypotheses.sources`` holds the sources' logic), and
``write_set`` writes the set and its report.

A theory model's answers are sampled greedily with at most ``THEORY_MAX_TOKENS`` tokens: the
config has no key for them (the generator's are ``hypotheses.generate.temperature`` and
``max_tokens``).
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import polars as pl

from splits.errors import ConfigError
from splits.hypotheses.lexicon import frame_hypotheses, hypotheses_frame, read_records
from splits.hypotheses.settings import (
    FightingWordsSettings,
    FileSettings,
    GenerateSettings,
    SampleSettings,
    TheoriesSettings,
)
from splits.hypotheses.sources import (
    clean_records,
    generation_requests,
    oracle_records,
    records_from_replies,
    sample_records,
    theory_requests,
)
from splits.io import write_json, write_parquet

log = logging.getLogger(__name__)

THEORY_TEMPERATURE = 0.0
THEORY_MAX_TOKENS = 1024


def read_topic_posts(path: str) -> pl.DataFrame:
    if not Path(path).is_file():
        raise ConfigError(f"topic posts {path} do not exist")
    frame = pl.read_parquet(path)
    missing = {"post_id", "text", "demographic", "topic"} - set(frame.columns)
    if missing:
        raise ConfigError(f"{path}: missing column(s) {', '.join(sorted(missing))}")
    return frame


def read_set(path: str) -> list:
    if not Path(path).is_file():
        raise ConfigError(f"hypothesis set {path} does not exist")
    return frame_hypotheses(pl.read_parquet(path))


def write_set(cleaned, out: str, report: str, extra: dict | None = None) -> None:
    frame = hypotheses_frame(cleaned.hypotheses)
    write_parquet(frame, out)
    counts = cleaned.report()
    counts["by_source"] = dict(sorted(Counter(frame["source"].to_list()).items()))
    write_json({**counts, **(extra or {})}, report)
    log.info("%d hypotheses written to %s (skipped: %s)", frame.height, out, counts["skipped"])


def complete(model, requests) -> tuple[list[str], Counter]:
    """The model's replies ('' for an error) and the counts of errors and cut replies."""
    problems: Counter = Counter()
    replies = []
    for completion in model.generate(requests):
        if completion.finish_reason == "error":
            problems["model_error"] += 1
        elif completion.finish_reason == "length":
            problems["reply_cut_at_max_tokens"] += 1
        replies.append(completion.text if completion.finish_reason != "error" else "")
    return replies, problems


def file_set(path: str, name: str, topics: list, demographics: list[str], s: FileSettings):
    records, unreadable = read_records(path)
    cleaned = clean_records(
        records,
        [t.topic for t in topics],
        demographics,
        s.limits,
        f"file/{name}:",
        f"hypotheses.files.{name} ({path})",
    )
    cleaned.skipped.update(unreadable)
    return cleaned, {"records": len(records) + sum(unreadable.values())}


def sample_set(
    meta: dict,
    posts: pl.DataFrame,
    identity: dict,
    topics: list,
    demographics: list[str],
    s: SampleSettings,
):
    names = [t.topic for t in topics]
    records = sample_records(meta, posts, identity, names, demographics, s.seed)
    cleaned = clean_records(
        records,
        names,
        demographics,
        s.limits,
        "sample:",
        "hypotheses.sample (synth_meta.json)",
    )
    return cleaned, {"records": len(records)}


def theory_set(
    theories: pl.DataFrame,
    rows: pl.DataFrame,
    topics: list,
    demographics: list[str],
    s: TheoriesSettings,
    name: str,
    where: str,
    lexicons_by=None,
):
    """The lexicons of a TM's theories: read from the theory (``lexicons_by`` None: the builtin
    oracle-lexical TM), or asked of a model; ``lexicons_by`` is ``(model, names, prompt)``."""
    from splits.llm.base import SamplingParams

    if lexicons_by is None:
        records, problems = oracle_records(theories, rows)
    else:
        model, names, prompt = lexicons_by
        params = SamplingParams(
            temperature=THEORY_TEMPERATURE, max_tokens=THEORY_MAX_TOKENS, seed=s.seed
        )
        requests, contexts, problems = theory_requests(theories, rows, names, prompt, params)
        replies, failed = complete(model, requests)
        problems.update(failed)
        records, unread = records_from_replies(replies, contexts, "theory")
        problems.update(unread)
    cleaned = clean_records(
        records,
        [t.topic for t in topics],
        demographics,
        s.limits,
        f"{name}:",
        where,
        default_source="theory",
    )
    cleaned.skipped.update(problems)
    return cleaned, {"theories": theories.height}


def generation_plan(posts, topics, demographics, names, prompt, s: GenerateSettings):
    """The generation requests and their contexts (one per (topic, pair) with posts of both)."""
    from splits.llm.base import SamplingParams

    g = s.generate
    wanted = set(g.topics or [t.topic for t in topics])
    unknown = wanted - {t.topic for t in topics}
    if unknown:
        raise ConfigError(f"hypotheses.generate.topics: unknown topic(s) {sorted(unknown)}")
    params = SamplingParams(temperature=g.temperature, max_tokens=g.max_tokens, seed=s.seed)
    requests, contexts = generation_requests(
        posts,
        [(t.category, t.topic) for t in topics if t.topic in wanted],
        demographics,
        names,
        prompt,
        g.posts_per_group,
        g.per_pool,
        params,
        s.seed,
    )
    if not requests:
        raise ConfigError("hypotheses.generate: no (topic, pair) has posts of both groups")
    return requests, contexts


def generated_set(
    replies, problems: Counter, contexts, topics, demographics, s: GenerateSettings, model: str
):
    records, unread = records_from_replies(replies, contexts, "llm")
    problems.update(unread)
    cleaned = clean_records(
        records,
        [t.topic for t in topics],
        demographics,
        s.limits,
        f"llm/{model}:",
        f"hypotheses.generate ({model}, {len(replies)} replies)",
        default_source="llm",
    )
    cleaned.skipped.update(problems)
    return cleaned, {"requests": len(replies)}


def fighting_words_set(
    posts: pl.DataFrame,
    posts_table: str | list[str] | None,
    model_sets: list[str],
    topics: list,
    demographics: list[str],
    s: FightingWordsSettings,
):
    """The counting baseline's set (``splits.hypotheses.baseline``): threads from the merged posts
    table (None: every post is its own thread), lexicon sizes from the model sets."""
    from splits.hypotheses.baseline import (
        SOURCE,
        baseline_records,
        model_lexicon_sizes,
        read_threads,
    )
    from splits.hypotheses.sources import pairs_of

    names = [t.topic for t in topics]
    threads = read_threads(posts_table, posts["post_id"])
    for path in model_sets:
        if not Path(path).is_file():
            raise ConfigError(f"hypothesis set {path} does not exist")
    sizes = model_lexicon_sizes([pl.read_parquet(p) for p in model_sets])
    records, report = baseline_records(posts, threads, pairs_of(demographics), names, s, sizes)
    cleaned = clean_records(
        records,
        names,
        demographics,
        s.limits,
        "",
        f"hypotheses.fighting_words ({len(report['pools'])} pools)",
        default_source=SOURCE,
    )
    cleaned.skipped.update(
        report.pop("skipped")
    )  # one count of what was left out, with the cleaner's
    report["threads"] = "conversation_id" if posts_table else "none: each post its own thread"
    report["posts_with_thread"] = len(threads)
    report["model_lexicon_sizes"] = len(sizes)
    return cleaned, report
