"""Theory-model (TM) stage of the Group Theorization evaluation (docs/method.md §2.8).

``splits theorize generate`` (:mod:`splits.evaluation.cli.theorize`): one theory per row from a
registry model (or, for a ``precomputed`` TM, read from its file; see
:mod:`splits.evaluation.custom_tm` for the TMs a researcher brings: a theories file or a Python
function). LLM TMs get the prompt template (slots ``{group_a} {group_b} {topic} {category} {k}
{posts}``; the posts are the first k of the calibration set, each cut to
``evaluation.max_post_chars`` characters and put on one line) as one chat user message (or as a
raw completion with ``evaluation.tm_raw_prompt``). Builtin TMs:

- ``no-theory``: the empty theory (what the CM does unaided);
- ``oracle-lexical``: reads the hidden calibration labels and states each group's most
  distinctive words among the k posts, by the log-odds ratio with an informative Dirichlet prior
  (Monroe, Colaresi and Quinn 2008), one line per group:
  ``Group A (<name>) posts use words like: w1, w2, ...``. A ceiling for word-level theories.

The evaluation subsample the TMs read is :mod:`splits.evaluation.subsample`.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from splits.errors import ConfigError
from splits.evaluation.common import (
    PromptTemplate,
    check_builtin_keys,
    one_line,
    sampling_params,
)
from splits.evaluation.settings import TMSettings
from splits.llm.base import Backend, Completion, Request
from splits.text import content_terms, words

log = logging.getLogger(__name__)

TM_REQUIRED = ("group_a", "group_b", "topic", "posts")
#: words per group in an oracle-lexical theory: with 8 + 8 calibration posts most distinctive
#: words occur once, so a long list covers more of a group's real markers (a longer list gave the
#: lexical CM a higher accuracy on the sample corpus)
ORACLE_N_WORDS = 50


# --------------------------------------------------------------------------- prompts


def calibration_posts(example_posts: Sequence[str], k: int) -> list[str]:
    if k > len(example_posts):
        raise ConfigError(
            f"evaluation ks: k={k} exceeds the calibration set size ({len(example_posts)}) of the rows"
        )
    return list(example_posts[:k])


def tm_slot_values(
    row: Mapping[str, Any], k: int, names: Mapping[str, str], max_chars: int
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
    names: Mapping[str, str],
    settings: TMSettings,
) -> list[Request]:
    """One TM request per row at calibration size ``k`` (the prompt from ``template``, or the
    listed posts for a TM that takes none)."""
    params = sampling_params(settings)
    max_chars = settings.max_post_chars
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
        if settings.raw_prompt:
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
    names: Mapping[str, str],
    tm_name: str,
    settings: TMSettings,
) -> pl.DataFrame:
    requests = build_tm_requests(rows, k, template, names, settings)
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
