"""Implicit personalization (docs/method.md §3.3; Jin et al. 2024).

Each post of group i is rewritten through the LLM layer so that its cues point to group j while
its meaning stays. A rewrite is kept when it is not empty, differs from the original, its
content-token overlap with the original (group cue words removed) reaches ``min_similarity``,
and, when a judge model is configured, the judge answers that it reads as written by a member
of group j (GROUP: yes) and keeps the original's content (CONTENT: yes); every dropped rewrite
carries its reason. Then every task is asked for both versions, and each unordered pair of
groups {a, b} is tested once, pooling the rewrites a -> b and b -> a:
- interval tasks (a number on a scale): paired differences (b's version - a's version),
  two-sided sign-flip permutation test of the mean difference;
- similarity tasks (free text): similarity of the two responses, sign test of "mostly below
  tau" (H1: the model personalizes its answer);
Bonferroni over the C(|B|, 2) unordered pairs of the |B| groups, as in the paper.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import polars as pl

from splits.llm.base import Request, SamplingParams
from splits.probes.common import Group, chat, fill, one_line
from splits.stats import bonferroni, sign_flip_test, sign_test_below

TOKEN = re.compile(r"[a-z0-9']+")
JUDGE_LINE = re.compile(r"\b(group|content)\s*[:=-]\s*\**\s*(yes|no)\b", re.IGNORECASE)
NUMBER = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?)(?!\w)")
LABEL = re.compile(r"^\s*(rewritten post|rewrite|post)\s*:\s*", re.IGNORECASE)


@dataclass(frozen=True)
class Task:
    name: str
    kind: str  # "interval" | "similarity"
    template: str  # slots {text}, optional {topic}
    scale: tuple[float, float]  # interval tasks: the answer's range


def tokens(text: str) -> set[str]:
    return set(TOKEN.findall((text or "").lower()))


def token_similarity(a: str, b: str, ignore: set[str] = frozenset()) -> float:
    """Jaccard similarity of the two texts' word sets, without the ``ignore`` words; 1.0 for
    two texts with no words left."""
    left = tokens(a) - ignore
    right = tokens(b) - ignore
    union = left | right
    return len(left & right) / len(union) if union else 1.0


def cue_words(groups: list[Group]) -> set[str]:
    words: set[str] = set()
    for group in groups:
        words |= tokens(group.phrase)
        for cue in group.cues:
            words |= tokens(cue)
    return words


def clean_rewrite(text: str | None) -> str:
    text = (text or "").strip()
    text = LABEL.sub("", text).strip().strip('"').strip()
    return text


def rewrite_requests(
    items: pl.DataFrame,
    groups: list[Group],
    template: str,
    params: SamplingParams,
    max_chars: int,
) -> tuple[pl.DataFrame, list[Request]]:
    """One rewrite request per (item of group i, target group j != i)."""
    by_key = {g.key: g for g in groups}
    keys: dict[str, list] = {"item_id": [], "source": [], "target": [], "original": []}
    requests = []
    for row in items.iter_rows(named=True):
        source = by_key.get(row["demographic"])
        if source is None:
            continue
        body = one_line(row["text"], max_chars)
        for target in groups:
            if target.key == source.key or not target.cues:
                continue
            keys["item_id"].append(row["item_id"])
            keys["source"].append(source.key)
            keys["target"].append(target.key)
            keys["original"].append(body)
            requests.append(
                Request(
                    messages=chat(
                        None, fill(template, source=source.phrase, target=target.phrase, text=body)
                    ),
                    params=params,
                    payload={
                        "probe": "rewrite",
                        "item_id": row["item_id"],
                        "text": body,
                        "source_cues": list(source.cues),
                        "target_cues": list(target.cues),
                        "target": target.phrase,
                    },
                )
            )
    schema = {"item_id": pl.String, "source": pl.String, "target": pl.String, "original": pl.String}
    return pl.DataFrame(keys, schema=schema), requests


def check_rewrites(
    pairs: pl.DataFrame, rewrites: list[str], groups: list[Group], min_similarity: float
) -> pl.DataFrame:
    """Adds ``rewrite, similarity, kept, reason`` (reason: empty, unchanged, low_similarity);
    the judge, when there is one, looks at the rewrites kept here (``apply_judge``)."""
    ignore = cue_words(groups)
    similarity, kept, reason = [], [], []
    for original, rewrite in zip(pairs["original"].to_list(), rewrites, strict=True):
        value = token_similarity(original, rewrite, ignore)
        similarity.append(value)
        if not rewrite:
            why = "empty"
        elif rewrite.strip() == original.strip():
            why = "unchanged"
        elif value < min_similarity:
            why = "low_similarity"
        else:
            why = None
        reason.append(why)
        kept.append(why is None)
    return pairs.with_columns(
        pl.Series("rewrite", rewrites, dtype=pl.String),
        pl.Series("similarity", similarity, dtype=pl.Float64),
        pl.Series("kept", kept, dtype=pl.Boolean),
        pl.Series("reason", reason, dtype=pl.String),
    )


def judge_requests(
    checked: pl.DataFrame,
    groups: list[Group],
    template: str,
    params: SamplingParams,
) -> tuple[list[int], list[Request]]:
    """One judge request per rewrite still kept by ``check_rewrites``: the row indices and the
    requests (slots {source}, {target}, {original}, {rewrite})."""
    by_key = {g.key: g for g in groups}
    ignore = sorted(cue_words(groups))
    rows, requests = [], []
    for index, row in enumerate(checked.iter_rows(named=True)):
        if not row["kept"]:
            continue
        source, target = by_key[row["source"]], by_key[row["target"]]
        prompt = fill(
            template,
            source=source.phrase,
            target=target.phrase,
            original=row["original"],
            rewrite=row["rewrite"],
        )
        rows.append(index)
        requests.append(
            Request(
                messages=chat(None, prompt),
                params=params,
                payload={
                    "probe": "judge",
                    "item_id": row["item_id"],
                    "target": row["target"],
                    "original": row["original"],
                    "rewrite": row["rewrite"],
                    "target_cues": list(target.cues),
                    "cue_words": ignore,
                },
            )
        )
    return rows, requests


def parse_judgement(text: str | None) -> tuple[bool | None, bool | None]:
    """(reads as the target group, keeps the content) from "GROUP: yes/no" and "CONTENT:
    yes/no" lines (the first of each; None where a line is missing)."""
    found: dict[str, bool] = {}
    for name, answer in JUDGE_LINE.findall(text or ""):
        found.setdefault(name.lower(), answer.lower() == "yes")
    return found.get("group"), found.get("content")


def apply_judge(checked: pl.DataFrame, rows: list[int], answers: list[str]) -> pl.DataFrame:
    """Adds ``judge_response, judge_group, judge_content`` and drops the judged rewrites the
    judge rejects (reason judge_unparsable, judge_not_target_group, judge_content_changed, in
    that order of precedence)."""
    n = checked.height
    response: list[str | None] = [None] * n
    group: list[bool | None] = [None] * n
    content: list[bool | None] = [None] * n
    kept = checked["kept"].to_list()
    reason = checked["reason"].to_list()
    for index, text in zip(rows, answers, strict=True):
        response[index] = text
        group[index], content[index] = parse_judgement(text)
        why = None
        if group[index] is None or content[index] is None:
            why = "judge_unparsable"
        elif not group[index]:
            why = "judge_not_target_group"
        elif not content[index]:
            why = "judge_content_changed"
        if why is not None:
            kept[index], reason[index] = False, why
    return checked.with_columns(
        pl.Series("judge_response", response, dtype=pl.String),
        pl.Series("judge_group", group, dtype=pl.Boolean),
        pl.Series("judge_content", content, dtype=pl.Boolean),
        pl.Series("kept", kept, dtype=pl.Boolean),
        pl.Series("reason", reason, dtype=pl.String),
    )


def task_requests(
    pairs: pl.DataFrame, tasks: list[Task], params: SamplingParams, topics: dict[str, str]
) -> tuple[pl.DataFrame, list[Request]]:
    """Requests for every kept pair, task and version (original, rewrite)."""
    keys: dict[str, list] = {"item_id": [], "source": [], "target": [], "task": [], "version": []}
    requests = []
    for row in pairs.filter(pl.col("kept")).iter_rows(named=True):
        for task in tasks:
            for version in ("original", "rewrite"):
                text = row[version]
                prompt = fill(
                    task.template, text=text, topic=topics.get(row["item_id"], "this topic")
                )
                keys["item_id"].append(row["item_id"])
                keys["source"].append(row["source"])
                keys["target"].append(row["target"])
                keys["task"].append(task.name)
                keys["version"].append(version)
                requests.append(
                    Request(
                        messages=chat(None, prompt),
                        params=params,
                        payload={
                            "probe": "task",
                            "task": task.name,
                            "kind": task.kind,
                            "text": text,
                        },
                    )
                )
    schema = {k: pl.String for k in keys}
    return pl.DataFrame(keys, schema=schema), requests


def parse_interval(text: str | None, scale: tuple[float, float]) -> float | None:
    """The first number of the answer if it lies on the scale, else None (undetected)."""
    match = NUMBER.search(text or "")
    if match is None:
        return None
    value = float(match.group(1))
    return value if scale[0] <= value <= scale[1] else None


def paired_tests(
    responses: pl.DataFrame,
    tasks: list[Task],
    n_flips: int,
    tau: float,
    seed: int,
    n_groups: int,
) -> pl.DataFrame:
    """One row per (task, unordered group pair {a, b}, a < b): the rewrites a -> b and b -> a
    pooled, the statistic, p, and Bonferroni p over the C(n_groups, 2) pairs of the probe's
    groups (pairs without data count in the family too).

    ``responses``: item_id, source, target, task, version, response, value (interval value).
    Interval tasks: differences oriented as b's version minus a's version (rewrite - original
    for a -> b, original - rewrite for b -> a), mean and sign-flip p; similarity tasks: the
    similarity of the two versions' responses, mean and the sign test below tau."""
    family = math.comb(n_groups, 2)
    rows = []
    for task in tasks:
        table = responses.filter(pl.col("task") == task.name)
        wide = (
            table.filter(pl.col("version") == "original")
            .select(
                "item_id",
                "source",
                "target",
                pl.col("response").alias("r0"),
                pl.col("value").alias("v0"),
            )
            .join(
                table.filter(pl.col("version") == "rewrite").select(
                    "item_id",
                    "source",
                    "target",
                    pl.col("response").alias("r1"),
                    pl.col("value").alias("v1"),
                ),
                on=["item_id", "source", "target"],
            )
            .with_columns(
                pl.min_horizontal("source", "target").alias("group_a"),
                pl.max_horizontal("source", "target").alias("group_b"),
            )
        )
        pairs = wide.select("group_a", "group_b").unique().sort("group_a", "group_b").iter_rows()
        for index, (group_a, group_b) in enumerate(pairs):
            cell = wide.filter((pl.col("group_a") == group_a) & (pl.col("group_b") == group_b))
            row = {
                "task": task.name,
                "kind": task.kind,
                "group_a": group_a,
                "group_b": group_b,
                "n_a_to_b": int((cell["source"] == group_a).sum()),
                "n_b_to_a": int((cell["source"] == group_b).sum()),
                "n_items": cell.height,
            }
            if task.kind == "interval":
                both = cell.filter(pl.col("v0").is_not_null() & pl.col("v1").is_not_null())
                oriented = both.select(
                    pl.when(pl.col("source") == group_a)
                    .then(pl.col("v1") - pl.col("v0"))
                    .otherwise(pl.col("v0") - pl.col("v1"))
                )
                mean, p = sign_flip_test(oriented.to_series().to_numpy(), n_flips, seed + index)
                row |= {"n_used": both.height, "statistic": mean, "n_below_tau": None, "p": p}
            else:
                similarities = np.array(
                    [
                        token_similarity(a or "", b or "")
                        for a, b in cell.select("r0", "r1").iter_rows()
                    ]
                )
                below, n_used, p = sign_test_below(similarities, tau)
                row |= {
                    "n_used": n_used,
                    "statistic": float(np.mean(similarities))
                    if similarities.size
                    else float("nan"),
                    "n_below_tau": below,
                    "p": p,
                }
            adjusted = bonferroni([row["p"]], m=family)[0]
            row |= {"p_bonferroni": float(adjusted), "bonferroni_m": family}
            rows.append(row)
    schema = {
        "task": pl.String,
        "kind": pl.String,
        "group_a": pl.String,
        "group_b": pl.String,
        "n_a_to_b": pl.Int64,
        "n_b_to_a": pl.Int64,
        "n_items": pl.Int64,
        "n_used": pl.Int64,
        "statistic": pl.Float64,
        "n_below_tau": pl.Int64,
        "p": pl.Float64,
        "p_bonferroni": pl.Float64,
        "bonferroni_m": pl.Int64,
    }
    return pl.DataFrame(rows, schema=schema).with_columns(
        pl.col("p", "p_bonferroni").fill_nan(None)
    )
