"""Theory-model (TM) stage of the Group Theorization evaluation (docs/method.md §2.8), and the evaluation
subsample every TM, CM and k shares.

``splits theorize subsample``: read the pipeline's quadruplets or the public release (version-4
columns), check every row, take a seeded random subset of N rows. The subset is the first N rows
of one seeded permutation, so a smaller subsample is a subset of a larger one.

``splits theorize generate``: one theory per row from a registry model (or, for a
``precomputed`` TM, read from its file; see :mod:`splits.evaluation.custom_tm` for the TMs a researcher
brings: a theories file or a Python function). LLM TMs get the prompt
template (slots ``{group_a} {group_b} {topic} {category} {k} {posts}``; the posts are the first k
of the calibration set, each cut to 2,000 characters and put on one line) as one chat user
message (or as a raw completion with ``--raw-prompt``). Builtin TMs:

- ``no-theory``: the empty theory (what the CM does unaided);
- ``oracle-lexical``: reads the hidden calibration labels and states each group's most
  distinctive words among the k posts, by the log-odds ratio with an informative Dirichlet prior
  (Monroe, Colaresi and Quinn 2008), one line per group:
  ``Group A (<name>) posts use words like: w1, w2, ...``. A ceiling for word-level theories.
"""

from __future__ import annotations

import argparse
import logging
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from splits.config.templates import TM_SLOTS
from splits.errors import ConfigError, InputError
from splits.evaluation.common import (
    MAX_POST_CHARS,
    REQUIRED_COLUMNS,
    PromptTemplate,
    check_builtin_keys,
    display_names,
    load_template,
    model_registry,
    one_line,
    read_rows,
)
from splits.io import write_json, write_parquet
from splits.llm.base import Backend, Completion, Request, SamplingParams
from splits.text import content_terms, words

log = logging.getLogger(__name__)

TM_REQUIRED = ("group_a", "group_b", "topic", "posts")
SUBSAMPLE_STREAM = 0x5E1
#: words per group in an oracle-lexical theory: with 8 + 8 calibration posts most distinctive
#: words occur once, so a long list covers more of a group's real markers (a longer list gave the
#: lexical CM a higher accuracy on the sample corpus)
ORACLE_N_WORDS = 50

# --------------------------------------------------------------------------- subsample


def _string_list(value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return None
    try:
        items = list(value)
    except TypeError:
        return None
    if not all(isinstance(v, str) for v in items):
        return None
    return items


LAYOUTS = ("auto", "by_group", "by_post_set")


def resolve_layout(frame: pl.DataFrame, layout: str) -> str:
    """``by_group``: ``sample_A`` holds A's posts and Post Set 1 is ``sample_B`` when switched
    (docs/method.md §2.7, the pipeline's quadruplets). ``by_post_set``: ``sample_A`` is Post Set 1, i.e. B's
    posts when switched (the public release, version 4: its DETAILS.md, and its evaluator, which
    always shows ``sample_A`` first). ``auto``: by_group when the table has the pipeline's hidden
    columns (``example_labels`` or ``sample_A_ids``), else by_post_set."""
    if layout not in LAYOUTS:
        raise ConfigError(
            f"evaluation.dataset_layout: {layout!r} is not one of {', '.join(LAYOUTS)}"
        )
    if layout != "auto":
        return layout
    pipeline = "example_labels" in frame.columns or "sample_A_ids" in frame.columns
    return "by_group" if pipeline else "by_post_set"


def normalise_quadruplets(
    frame: pl.DataFrame, topic_categories: Mapping[str, str], where: str, layout: str = "by_group"
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Check and complete a quadruplets table: ids, categories, list columns, and samples in the
    by_group layout (``sample_A`` = A's posts; see :func:`resolve_layout`).

    Rows with malformed lists (not lists of strings, empty samples) are dropped and counted.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(f"{where}: missing column(s) {', '.join(missing)} (release v4 columns)")
    layout = resolve_layout(frame, layout)
    counts: dict[str, Any] = {"input_rows": frame.height, "layout": layout}
    if layout == "by_post_set":
        swapped = {
            "sample_A": pl.when(pl.col("switched"))
            .then(pl.col("sample_B"))
            .otherwise(pl.col("sample_A")),
            "sample_B": pl.when(pl.col("switched"))
            .then(pl.col("sample_A"))
            .otherwise(pl.col("sample_B")),
        }
        for ids in ("sample_A_ids", "sample_B_ids"):
            if {"sample_A_ids", "sample_B_ids"} <= set(frame.columns):
                other = "sample_B_ids" if ids == "sample_A_ids" else "sample_A_ids"
                swapped[ids] = (
                    pl.when(pl.col("switched")).then(pl.col(other)).otherwise(pl.col(ids))
                )
        frame = frame.with_columns(**swapped)
        counts["rows_unswapped"] = int(frame["switched"].fill_null(False).sum())
    if "quadruplet_id" not in frame.columns:
        frame = frame.with_row_index("quadruplet_id").with_columns(
            pl.format("row-{}", pl.col("quadruplet_id")).alias("quadruplet_id")
        )
    else:
        frame = frame.with_columns(pl.col("quadruplet_id").cast(pl.String))
    if frame["quadruplet_id"].n_unique() != frame.height:
        raise ConfigError(f"{where}: quadruplet_id is not unique")
    if "category" not in frame.columns:
        frame = frame.with_columns(
            pl.col("description").replace_strict(topic_categories, default=None).alias("category")
        )
        counts["category_from_topics_file"] = frame.height
    unknown = int(frame["category"].is_null().sum())
    counts["category_unknown"] = unknown
    if unknown:
        log.warning(
            "%s: %d rows have a topic not in the topics file (category 'unknown')", where, unknown
        )
        frame = frame.with_columns(pl.col("category").fill_null("unknown"))
    keep = []
    bad = 0
    for row in frame.select("example_posts", "sample_A", "sample_B", "switched").iter_rows():
        examples, sample_a, sample_b = (_string_list(v) for v in row[:3])
        ok = (
            examples is not None
            and sample_a is not None
            and sample_b is not None
            and len(sample_a) > 0
            and len(sample_b) > 0
            and row[3] is not None
        )
        keep.append(ok)
        bad += not ok
    counts["malformed_rows_dropped"] = bad
    if bad:
        log.warning("%s: dropped %d malformed rows", where, bad)
    frame = frame.filter(pl.Series(keep, dtype=pl.Boolean))
    frame = frame.with_columns(pl.col("switched").cast(pl.Boolean))
    return frame, counts


def subsample(frame: pl.DataFrame, rows: int | None, seed: int) -> pl.DataFrame:
    """The first ``rows`` rows (all when None) of a seeded permutation, with ``eval_row``."""
    rng = np.random.default_rng([seed, SUBSAMPLE_STREAM])
    order = rng.permutation(frame.height)
    if rows is not None:
        order = order[:rows]
    return (
        frame.with_row_index("_position")
        .join(
            pl.DataFrame({"_position": order.astype(np.uint32), "eval_row": np.arange(len(order))}),
            on="_position",
        )
        .sort("eval_row")
        .drop("_position")
        .with_columns(pl.col("eval_row").cast(pl.Int64))
    )


def topic_categories(path: str | Path | None) -> dict[str, str]:
    if not path:
        return {}
    from splits.config.definitions import load_topics

    return {t.topic: t.category for t in load_topics(path)}


def parse_rows_arg(value: str) -> int | None:
    if value == "all":
        return None
    try:
        rows = int(value)
    except ValueError as err:
        raise ConfigError(
            f"evaluation rows: {value!r} is neither a positive integer nor 'all'"
        ) from err
    if rows < 1:
        raise ConfigError(f"evaluation rows: {rows} must be positive")
    return rows


def run_subsample(args: argparse.Namespace) -> int:
    path = Path(args.dataset)
    if not path.exists():
        raise ConfigError(f"evaluation.dataset: input {path} does not exist")
    frame = pl.read_parquet(path)
    frame, counts = normalise_quadruplets(
        frame, topic_categories(args.topics), str(path), args.layout
    )
    if frame.height == 0:
        raise InputError(
            f"evaluation.dataset: {path} holds no usable quadruplet "
            f"({counts.get('input_rows', 0)} rows read); nothing to evaluate (for a sweep "
            "dataset: the topic splits hold too few posts per group for its calibration size)"
        )
    rows = parse_rows_arg(args.rows)
    if rows is not None and rows > frame.height:
        log.warning("asked for %d rows, the dataset has %d: using all of them", rows, frame.height)
        counts["rows_short_by"] = rows - frame.height
    sample = subsample(frame, rows, args.seed)
    counts.update(
        rows_requested=rows if rows is not None else "all", rows=sample.height, seed=args.seed
    )
    write_parquet(sample, args.out)
    if args.report:
        write_json(counts, args.report)
    log.info("subsample: %s", counts)
    return 0


# --------------------------------------------------------------------------- prompts


def calibration_posts(example_posts: Sequence[str], k: int) -> list[str]:
    if k > len(example_posts):
        raise ConfigError(
            f"evaluation ks: k={k} exceeds the calibration set size ({len(example_posts)}) of the rows"
        )
    return list(example_posts[:k])


def tm_slot_values(
    row: Mapping[str, Any], k: int, names: Mapping[str, str], max_chars: int = MAX_POST_CHARS
) -> dict[str, str]:
    posts = calibration_posts(row["example_posts"], k)
    listed = "\n".join(f"{i + 1}. {one_line(p, max_chars)}" for i, p in enumerate(posts))
    return {
        "group_a": names.get(row["demographic_A"], row["demographic_A"]),
        "group_b": names.get(row["demographic_B"], row["demographic_B"]),
        "topic": str(row["description"]),
        "category": str(row.get("category") or ""),
        "k": str(k),
        "posts": listed if posts else "(no example posts)",
    }


def _labels(row: Mapping[str, Any], k: int) -> list[str] | None:
    """The hidden calibration labels of the first k posts as "A"/"B", if the row has them."""
    labels = row.get("example_labels")
    if labels is None:
        return None
    out = []
    for label in list(labels)[:k]:
        if isinstance(label, bool):
            out.append("B" if label else "A")
        elif label in ("A", "a", 0):
            out.append("A")
        elif label in ("B", "b", 1):
            out.append("B")
        elif label == row["demographic_A"]:
            out.append("A")
        elif label == row["demographic_B"]:
            out.append("B")
        else:
            return None
    return out


def build_tm_requests(
    rows: pl.DataFrame,
    k: int,
    template: PromptTemplate | None,
    params: SamplingParams,
    names: Mapping[str, str],
    raw_prompt: bool = False,
    max_chars: int = MAX_POST_CHARS,
) -> list[Request]:
    requests = []
    for row in rows.iter_rows(named=True):
        values = tm_slot_values(row, k, names, max_chars)
        posts = calibration_posts(row["example_posts"], k)
        payload = {
            "group_a": values["group_a"],
            "group_b": values["group_b"],
            "topic": values["topic"],
            "category": values["category"],
            "k": k,
            "posts": [str(p)[:max_chars] for p in posts],
            "labels": _labels(row, k),
        }
        prompt = template.render(values) if template is not None else values["posts"]
        if raw_prompt:
            requests.append(Request(prompt=prompt, params=params, payload=payload))
        else:
            requests.append(
                Request(
                    messages=({"role": "user", "content": prompt},), params=params, payload=payload
                )
            )
    return requests


# --------------------------------------------------------------------------- builtin TMs


def log_odds_dirichlet(
    counts_a: Mapping[str, int], counts_b: Mapping[str, int], prior: Mapping[str, float]
) -> dict[str, float]:
    """z-scores of the log-odds ratio of each word, A vs B, with an informative Dirichlet prior
    (Monroe et al. 2008, eq. 22): delta = log((y_a+a_w)/(n_a+a_0-y_a-a_w)) -
    log((y_b+a_w)/(n_b+a_0-y_b-a_w)), var = 1/(y_a+a_w) + 1/(y_b+a_w), z = delta/sqrt(var).
    Positive: characteristic of A."""
    n_a = sum(counts_a.values())
    n_b = sum(counts_b.values())
    a_0 = sum(prior.values())
    out = {}
    for word, a_w in prior.items():
        if a_w <= 0:
            continue
        y_a = counts_a.get(word, 0)
        y_b = counts_b.get(word, 0)
        delta = math.log((y_a + a_w) / (n_a + a_0 - y_a - a_w)) - math.log(
            (y_b + a_w) / (n_b + a_0 - y_b - a_w)
        )
        variance = 1.0 / (y_a + a_w) + 1.0 / (y_b + a_w)
        out[word] = delta / math.sqrt(variance)
    return out


def distinctive_words(
    posts: Sequence[str],
    labels: Sequence[str],
    n_words: int = 10,
    prior_strength: float = 1.0,
    exclude: set[str] | None = None,
    bigrams: bool = True,
) -> dict[str, list[str]]:
    """Each group's top ``n_words`` terms (words, and adjacent word pairs with ``bigrams``) by
    z-scored log-odds (ties by term, so deterministic). Prior: alpha_w = prior_strength x the
    term's count over both groups' posts."""
    exclude = exclude or set()
    counts = {"A": Counter(), "B": Counter()}
    for post, label in zip(posts, labels, strict=True):
        terms = content_terms(post, bigrams)
        counts[label].update(t for t in terms if not set(t.split()) & exclude)
    pooled = counts["A"] + counts["B"]
    prior = {w: prior_strength * c for w, c in pooled.items()}
    z = log_odds_dirichlet(counts["A"], counts["B"], prior)
    ranked_a = sorted((w for w in z if z[w] > 0 and counts["A"][w] > 0), key=lambda w: (-z[w], w))
    ranked_b = sorted((w for w in z if z[w] < 0 and counts["B"][w] > 0), key=lambda w: (z[w], w))
    return {"A": ranked_a[:n_words], "B": ranked_b[:n_words]}


def oracle_theory(
    payload: Mapping[str, Any], n_words: int, prior_strength: float, bigrams: bool = False
) -> str:
    labels = payload.get("labels")
    if labels is None:
        raise ConfigError(
            "oracle-lexical TM needs the hidden calibration labels (column example_labels), "
            "which these evaluation rows lack (the public release has none)"
        )
    posts = payload.get("posts") or []
    exclude = set(words(payload.get("group_a", ""))) | set(words(payload.get("group_b", "")))
    distinctive = distinctive_words(posts, labels, n_words, prior_strength, exclude, bigrams)
    lines = []
    for letter, key in (("A", "group_a"), ("B", "group_b")):
        if distinctive[letter]:
            lines.append(
                f"Group {letter} ({payload.get(key, letter)}) posts use words like: "
                + ", ".join(distinctive[letter])
            )
    return "\n".join(lines)


class NoTheoryTM(Backend):
    def __init__(self, name: str, spec: Mapping[str, Any]):
        check_builtin_keys(name, spec, set())
        self.name = name

    def identity(self) -> dict[str, Any]:
        return {"backend": "builtin", "kind": "no-theory", "version": 1}

    def generate(self, requests: list[Request]) -> list[Completion]:
        return [Completion("", "stop", 0, 0, 0.0) for _ in requests]


class OracleLexicalTM(Backend):
    def __init__(self, name: str, spec: Mapping[str, Any]):
        check_builtin_keys(name, spec, {"n_words", "prior_strength", "bigrams"})
        self.name = name
        n_words = spec.get("n_words", ORACLE_N_WORDS)
        bigrams = spec.get("bigrams", False)
        if not isinstance(bigrams, bool):
            raise ConfigError(f"models.{name}.bigrams: must be true or false")
        self.bigrams = bigrams
        prior_strength = spec.get("prior_strength", 1.0)
        if not isinstance(n_words, int) or isinstance(n_words, bool) or n_words < 1:
            raise ConfigError(f"models.{name}.n_words: must be a positive integer")
        if not isinstance(prior_strength, int | float) or prior_strength <= 0:
            raise ConfigError(f"models.{name}.prior_strength: must be a positive number")
        self.n_words = n_words
        self.prior_strength = float(prior_strength)

    def identity(self) -> dict[str, Any]:
        return {
            "backend": "builtin",
            "kind": "oracle-lexical",
            "version": 1,
            "n_words": self.n_words,
            "prior_strength": self.prior_strength,
            "bigrams": self.bigrams,
        }

    def generate(self, requests: list[Request]) -> list[Completion]:
        out = []
        for request in requests:
            text = oracle_theory(
                request.payload or {}, self.n_words, self.prior_strength, self.bigrams
            )
            out.append(Completion(text, "stop", 0, len(text.split()), 0.0))
        return out


# --------------------------------------------------------------------------- generate

THEORY_SCHEMA = {
    "quadruplet_id": pl.String,
    "eval_row": pl.Int64,
    "tm": pl.String,
    "k": pl.Int64,
    "theory": pl.String,
    "finish_reason": pl.String,
    "prompt_tokens": pl.Int64,
    "output_tokens": pl.Int64,
}


def theorize_rows(
    rows: pl.DataFrame,
    k: int,
    model,
    template: PromptTemplate | None,
    params: SamplingParams,
    names: Mapping[str, str],
    tm_name: str,
    raw_prompt: bool = False,
    max_chars: int = MAX_POST_CHARS,
) -> pl.DataFrame:
    requests = build_tm_requests(rows, k, template, params, names, raw_prompt, max_chars)
    completions = model.generate(requests)
    records = [
        {
            "quadruplet_id": row["quadruplet_id"],
            "eval_row": row["eval_row"],
            "tm": tm_name,
            "k": k,
            "theory": completion.text if completion.finish_reason != "error" else "",
            "finish_reason": completion.finish_reason,
            "prompt_tokens": completion.prompt_tokens,
            "output_tokens": completion.output_tokens,
        }
        for row, completion in zip(rows.iter_rows(named=True), completions, strict=True)
    ]
    return pl.DataFrame(records, schema=THEORY_SCHEMA)


def precomputed_frame(rows: pl.DataFrame, k: int, name: str, path: str) -> pl.DataFrame:
    """The theories of a ``precomputed`` TM for ``rows`` at ``k``, in the theories schema."""
    from splits.evaluation.custom_tm import precomputed_theories

    theory = precomputed_theories(path, rows, k, name)
    return pl.DataFrame(
        {
            "quadruplet_id": rows["quadruplet_id"].cast(pl.String),
            "eval_row": rows["eval_row"],
            "tm": [name] * rows.height,
            "k": [k] * rows.height,
            "theory": theory["theory"],
            "finish_reason": ["precomputed"] * rows.height,
            "prompt_tokens": [0] * rows.height,
            "output_tokens": [len(t.split()) for t in theory["theory"].to_list()],
        },
        schema=THEORY_SCHEMA,
    )


def run_generate(args: argparse.Namespace) -> int:
    from splits.llm import load_model, model_spec

    rows = read_rows(args.rows)
    if args.k < 0:
        raise ConfigError(f"evaluation ks: k={args.k} must be >= 0")
    registry = model_registry(args.model, args.model_spec)
    spec = model_spec(args.model, registry)
    if spec["backend"] == "precomputed":
        theories = precomputed_frame(rows, args.k, args.model, spec["theories"])
        write_parquet(theories, args.out)
        log.info("TM %s k=%d: %d precomputed theories", args.model, args.k, theories.height)
        return 0
    template = load_template(args.template, TM_SLOTS, TM_REQUIRED) if args.template else None
    names = display_names(args.demographics)
    params = SamplingParams(
        temperature=args.temperature, max_tokens=args.max_tokens, seed=args.seed
    )
    model = load_model(args.model, registry, cache_path=args.cache, cache_only=args.cache_only)
    try:
        theories = theorize_rows(
            rows,
            args.k,
            model,
            template,
            params,
            names,
            args.model,
            args.raw_prompt,
            args.max_post_chars,
        )
    finally:
        model.close()
    write_parquet(theories, args.out)
    n_error = int((theories["finish_reason"] == "error").sum())
    n_empty = int((theories["theory"].str.strip_chars() == "").sum())
    log.info(
        "TM %s k=%d: %d theories (%d empty, %d errors)",
        args.model,
        args.k,
        theories.height,
        n_empty,
        n_error,
    )
    return 0


def configure_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    sample = sub.add_parser("subsample", help="seeded subsample of the quadruplets")
    sample.add_argument(
        "--dataset", required=True, help="quadruplets Parquet (pipeline or release v4)"
    )
    sample.add_argument("--rows", required=True, help="number of rows, or 'all'")
    sample.add_argument("--seed", type=int, required=True, help="seed of the row subsample")
    sample.add_argument(
        "--topics", help="topics file: category of each topic when the input has none"
    )
    sample.add_argument(
        "--layout",
        default="auto",
        choices=LAYOUTS,
        help="by_group: sample_A is A's posts (pipeline); by_post_set: sample_A is Post Set 1 "
        "(public release v4); auto: by the presence of the pipeline's hidden columns",
    )
    sample.add_argument("--out", required=True, help="the subsampled rows (Parquet)")
    sample.add_argument("--report", help="JSON with the counts")
    gen = sub.add_parser("generate", help="one theory per row from a TM")
    gen.add_argument("--rows", required=True, help="evaluation rows Parquet")
    gen.add_argument("--model", required=True, help="TM name in the model registry")
    gen.add_argument("--model-spec", required=True, help="the registry entry of --model, as JSON")
    gen.add_argument("--k", type=int, required=True, help="calibration posts shown to the TM")
    gen.add_argument("--template", help="TM prompt template (builtin TMs need none)")
    gen.add_argument(
        "--raw-prompt", action="store_true", help="send the prompt as a raw completion"
    )
    gen.add_argument("--demographics", help="demographics file (display names)")
    gen.add_argument(
        "--temperature", type=float, default=0.0, help="sampling temperature of LLM TMs (0: greedy)"
    )
    gen.add_argument(
        "--max-tokens", type=int, default=400, help="most tokens an LLM TM generates per theory"
    )
    gen.add_argument("--seed", type=int, default=0, help="seed of the model's sampling")
    gen.add_argument(
        "--max-post-chars",
        type=int,
        default=MAX_POST_CHARS,
        help="characters kept of each post in the prompt",
    )
    gen.add_argument("--cache", help="LLM response cache (SQLite) path")
    gen.add_argument(
        "--cache-only",
        action="store_true",
        help="answer from the cache only (the model's batch job generated every request)",
    )
    gen.add_argument("--out", required=True, help="theories Parquet")


def run(args: argparse.Namespace) -> int:
    if args.action == "subsample":
        return run_subsample(args)
    return run_generate(args)
