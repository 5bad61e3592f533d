"""Human validation of theories (docs/method.md §2.11, paper Appendix C). Command line only.

``splits human export``: annotation sheets in the paper's design.

- Instances: evaluation rows where the strongest TM's theory made the CM right and every weaker
  TM's theory made it wrong (one CM, one k), in a seeded random order. The strongest TM is
  ``--strong`` or, by default, the TM with the highest accuracy among those given; the weaker
  ones are all other TMs given.
- One sheet per (instance, TM): one post set (the 3 sample posts of one group of the row, the
  same group for every TM's sheet of that row) and 6 statements of that TM's theory, 3 about
  each group, shuffled, with their "Group A:"-style labels removed. Rows whose theory (of any
  TM) has fewer than 3 statements about either group are skipped and counted.
- Part 1 (``part1.csv``): the annotator is told the pair of groups and the topic but not which
  statement is meant for which group, and rates each statement's relevance and centrality to
  the post set (0-4). Part 2 (``part2.csv``, to be done after part 1): each statement shown with
  the group it is about, rated for unexpectedness and specificity (0-4). ``sheets.html`` shows
  both parts. Which model wrote a statement and which group it is meant for is only in
  ``key.csv``; sheets of all TMs are interleaved under random ids.

``splits human score`` (:mod:`splits.evaluation.human_scores`): read the key and the filled part 1 and part 2 files of each annotator
(``NAME=PATH``; files with the same NAME are one annotator's) and score:

- relevance and centrality per (annotator, sheet): only ratings of 4 count; a statement meant
  for the post set adds +4, one meant for the other group -4; normalised score = sum /
  (4 x number of counted statements), 0 when none counts; the sheet is won when the score is
  positive. A sheet counts for a measure only when the annotator rated all its statements on
  that measure (incomplete and unrated sheets are counted, not scored);
- a model's score is the mean normalised score over its (annotator, sheet) pairs, with the
  number of sheets won;
- unexpectedness and specificity: plain means of the 0-4 ratings;
- agreement, when several annotators rated the same statements: Krippendorff's alpha (nominal,
  through the GRASP module) per measure over the statements rated by at least two annotators,
  and on the "rated 4" indicator that the scores use.
"""

from __future__ import annotations

import html
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from splits.errors import ConfigError
from splits.evaluation.common import group_names, statements_by_group

log = logging.getLogger(__name__)

MEASURES = ("relevance", "centrality", "unexpectedness", "specificity")
SIGNED_MEASURES = ("relevance", "centrality")
PLAIN_MEASURES = ("unexpectedness", "specificity")
STATEMENTS_PER_GROUP = 3
HUMAN_STREAM = 0x4A11

_LABEL = re.compile(
    r"^\s*(?:[-*•]\s*|\d+[.)]\s*)?(?:group|demographic)?\s*<?[AB]>?\s*(?:\([^)]*\))?\s*[:\-–]\s*",
    re.IGNORECASE,
)


def blind(statement: str) -> str:
    """A statement without its leading group label ("Group A:", "B (teacher) -", "1. A:")."""
    return _LABEL.sub("", statement, count=1).strip()


# --------------------------------------------------------------------------- selection


def accuracies(predictions: pl.DataFrame) -> dict[str, float]:
    return dict(
        predictions.group_by("tm").agg(pl.col("correct").cast(pl.Float64).mean()).iter_rows()
    )


def select_instances(predictions: pl.DataFrame, strong: str, weak: Sequence[str]) -> list[str]:
    """Rows (quadruplet ids, by evaluation row) where ``strong`` is right and every TM of
    ``weak`` is wrong; rows some of them did not answer are left out."""
    wide = predictions.filter(pl.col("tm").is_in([strong, *weak])).pivot(
        on="tm", index=["quadruplet_id", "eval_row"], values="correct"
    )
    chosen = wide.drop_nulls().filter(
        pl.col(strong) & ~pl.any_horizontal([pl.col(tm) for tm in weak])
    )
    return chosen.sort("eval_row")["quadruplet_id"].to_list()


# --------------------------------------------------------------------------- export


def build_sheets(
    rows: pl.DataFrame,
    theories: Mapping[str, pl.DataFrame],
    names: Mapping[str, str],
    instances: Sequence[str],
    sheets_per_model: int,
    seed: int,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, dict[str, Any]]:
    """(part 1, part 2, key, counts): one sheet per (instance, model of ``theories``) for the
    first ``sheets_per_model`` instances (in a seeded random order) whose every model's theory
    has 3 statements about each group."""
    rng = np.random.default_rng([seed, HUMAN_STREAM])
    row_of = {r["quadruplet_id"]: r for r in rows.iter_rows(named=True)}
    theory_of = {
        model: dict(zip(frame["quadruplet_id"], frame["theory"], strict=True))
        for model, frame in theories.items()
    }
    models = sorted(theories)
    counts: dict[str, Any] = {
        "instances": len(instances),
        "skipped_too_few_statements": 0,
        "skipped_no_theory": 0,
        "selected": 0,
    }
    drafts = []
    for index in rng.permutation(len(instances)):
        if counts["selected"] >= sheets_per_model:
            break
        qid = instances[index]
        row = row_of[qid]
        if any(qid not in theory_of[m] for m in models):
            counts["skipped_no_theory"] += 1
            continue
        by_model = {
            m: statements_by_group(
                theory_of[m][qid],
                group_names(row["demographic_A"], names),
                group_names(row["demographic_B"], names),
            )
            for m in models
        }
        if any(len(s[g]) < STATEMENTS_PER_GROUP for s in by_model.values() for g in "AB"):
            counts["skipped_too_few_statements"] += 1
            continue
        counts["selected"] += 1
        target = "A" if rng.random() < 0.5 else "B"
        for model in models:
            items = [(g, s) for g in "AB" for s in by_model[model][g][:STATEMENTS_PER_GROUP]]
            order = rng.permutation(len(items))
            drafts.append((model, row, target, [items[i] for i in order]))
    counts["sheets_per_model"] = counts["selected"]
    part1, part2, key = [], [], []
    for number, index in enumerate(rng.permutation(len(drafts)), start=1):
        model, row, target, items = drafts[index]
        sheet_id = f"S{number:03d}"
        group_of = {"A": row["demographic_A"], "B": row["demographic_B"]}
        pair = (
            f"{names.get(group_of['A'], group_of['A'])} / {names.get(group_of['B'], group_of['B'])}"
        )
        posts = row["sample_A"] if target == "A" else row["sample_B"]
        post_text = "\n\n".join(f"Post {i + 1}: {p}" for i, p in enumerate(posts))
        for item, (group, statement) in enumerate(items, start=1):
            text = blind(statement)
            part1.append(
                {
                    "sheet_id": sheet_id,
                    "item": item,
                    "groups": pair,
                    "topic": row["description"],
                    "posts": post_text,
                    "statement": text,
                    "relevance": None,
                    "centrality": None,
                }
            )
            part2.append(
                {
                    "sheet_id": sheet_id,
                    "item": item,
                    "topic": row["description"],
                    "about": names.get(group_of[group], group_of[group]),
                    "statement": text,
                    "unexpectedness": None,
                    "specificity": None,
                }
            )
            key.append(
                {
                    "sheet_id": sheet_id,
                    "item": item,
                    "model": model,
                    "quadruplet_id": row["quadruplet_id"],
                    "post_set_group": group_of[target],
                    "statement_group": group_of[group],
                    "meant_for_post_set": group == target,
                }
            )
    text_columns = ("sheet_id", "groups", "topic", "posts", "statement", "about")
    part1_schema = {
        c: pl.Int64 if c in ("item", *SIGNED_MEASURES) else pl.String
        for c in ("sheet_id", "item", "groups", "topic", "posts", "statement", *SIGNED_MEASURES)
    }
    part2_schema = {
        c: pl.String if c in text_columns else pl.Int64
        for c in ("sheet_id", "item", "topic", "about", "statement", *PLAIN_MEASURES)
    }
    key_schema = {
        "sheet_id": pl.String,
        "item": pl.Int64,
        "model": pl.String,
        "quadruplet_id": pl.String,
        "post_set_group": pl.String,
        "statement_group": pl.String,
        "meant_for_post_set": pl.Boolean,
    }
    return (
        pl.DataFrame(part1, schema=part1_schema),
        pl.DataFrame(part2, schema=part2_schema),
        pl.DataFrame(key, schema=key_schema),
        counts,
    )


def _rating_cells(n: int) -> str:
    return "<td></td>" * n


def sheets_html(part1: pl.DataFrame, part2: pl.DataFrame) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html><head><meta charset="utf-8"><title>Theory annotation sheets</title>',
        "<style>body{font-family:sans-serif;max-width:60em;margin:auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #999;padding:4px}"
        ".posts{white-space:pre-wrap;background:#f4f4f4;padding:8px}"
        "section{page-break-after:always;margin-bottom:3em}</style></head><body>",
        "<h1>Theory annotation sheets</h1>",
        "<h2>Part 1</h2>",
        "<p>Each sheet shows posts written by members of one of two groups (named on the "
        "sheet) and statements about how the two groups write. Some statements describe one "
        "group, some the other; you are not told which. Rate every statement from 0 (not at "
        "all) to 4 (completely): <b>relevance</b> (does the statement describe these posts?) "
        "and <b>centrality</b> (is it about what matters most in them?). Enter the ratings in "
        "part1.csv under the same sheet and item numbers. Finish part 1 before opening part 2."
        "</p>",
    ]
    for (sheet_id,), part in part1.group_by("sheet_id", maintain_order=True):
        first = part.row(0, named=True)
        parts.append(f"<section><h3>Sheet {html.escape(str(sheet_id))} (part 1)</h3>")
        parts.append(
            f"<p>Groups: {html.escape(first['groups'])}. Topic: {html.escape(first['topic'])}. "
            "The posts below were written by members of one of the two groups.</p>"
        )
        parts.append(f'<div class="posts">{html.escape(first["posts"])}</div>')
        parts.append("<table><tr><th>item</th><th>statement</th>")
        parts.extend(f"<th>{m}</th>" for m in SIGNED_MEASURES)
        parts.append("</tr>")
        for row in part.iter_rows(named=True):
            parts.append(
                f"<tr><td>{row['item']}</td><td>{html.escape(row['statement'])}</td>"
                + _rating_cells(len(SIGNED_MEASURES))
                + "</tr>"
            )
        parts.append("</table></section>")
    parts += [
        "<h2>Part 2</h2>",
        "<p>The same statements, each with the group it is about. Rate every statement from 0 "
        "to 4: <b>unexpectedness</b> (is it surprising for that group?) and <b>specificity</b> "
        "(is it concrete rather than generic?). Enter the ratings in part2.csv.</p>",
    ]
    for (sheet_id,), part in part2.group_by("sheet_id", maintain_order=True):
        first = part.row(0, named=True)
        parts.append(f"<section><h3>Sheet {html.escape(str(sheet_id))} (part 2)</h3>")
        parts.append(f"<p>Topic: {html.escape(first['topic'])}.</p>")
        parts.append("<table><tr><th>item</th><th>about</th><th>statement</th>")
        parts.extend(f"<th>{m}</th>" for m in PLAIN_MEASURES)
        parts.append("</tr>")
        for row in part.iter_rows(named=True):
            parts.append(
                f"<tr><td>{row['item']}</td><td>{html.escape(row['about'])}</td>"
                f"<td>{html.escape(row['statement'])}</td>"
                + _rating_cells(len(PLAIN_MEASURES))
                + "</tr>"
            )
        parts.append("</table></section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def export_sheets(
    rows: pl.DataFrame,
    theory_frames: Sequence[pl.DataFrame],
    prediction_frames: Sequence[pl.DataFrame],
    names: Mapping[str, str],
    *,
    strong: str | None,
    cm: str | None,
    k_wanted: int | None,
    sheets_per_model: int,
    seed: int,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, dict[str, Any]]:
    """The annotation sheets (part 1, part 2), their key and the counts, from the theories and
    predictions of two or more TMs at one k (``k_wanted`` picks it when they hold several; ``cm``
    the CM when several; ``strong`` the strongest TM, else the most accurate)."""
    if sheets_per_model < 1:
        raise ConfigError("--sheets-per-model: must be positive")
    theories: dict[str, pl.DataFrame] = {}
    for frame in theory_frames:
        if not frame.height:
            continue
        for (model, k), part in frame.group_by("tm", "k"):
            if k_wanted is not None and int(k) != k_wanted:
                continue
            if model in theories:
                raise ConfigError(f"theories of TM {model!r} given twice (pick one k with --k)")
            theories[model] = part
    if len(theories) < 2:
        raise ConfigError(
            "--theories: needs the theories of at least two TMs (a strong one, weaker ones)"
        )
    ks = {int(frame["k"][0]) for frame in theories.values()}
    if len(ks) != 1:
        raise ConfigError(f"--theories: TMs at different ks {sorted(ks)}; choose one with --k")
    k = ks.pop()
    predictions = pl.concat(
        [
            f.select("quadruplet_id", "eval_row", "tm", "cm", "k", "correct")
            for f in prediction_frames
        ]
    )
    predictions = predictions.filter((pl.col("k") == k) & pl.col("tm").is_in(list(theories)))
    cms = sorted(predictions["cm"].unique().to_list())
    if cm is not None:
        cms = [name for name in cms if name == cm]
    if len(cms) != 1:
        raise ConfigError(
            f"--predictions: {'no' if not cms else 'several'} CMs for these TMs at k={k} "
            f"({', '.join(cms) or 'none'}); choose one with --cm"
        )
    predictions = predictions.filter(pl.col("cm") == cms[0])
    lacking = sorted(set(theories) - set(predictions["tm"].unique()))
    if lacking:
        raise ConfigError(f"--predictions: none of TM {lacking[0]!r} with CM {cms[0]} at k={k}")
    accuracy = accuracies(predictions)
    strong = strong or max(sorted(accuracy), key=lambda tm: accuracy[tm])
    if strong not in theories:
        raise ConfigError(
            f"--strong: {strong!r} is not one of the TMs given ({', '.join(sorted(theories))})"
        )
    weak = sorted(set(theories) - {strong})
    instances = select_instances(predictions, strong, weak)
    part1, part2, key, counts = build_sheets(
        rows, theories, names, instances, sheets_per_model, seed
    )
    counts.update(
        strong=strong,
        weak=weak,
        cm=cms[0],
        k=k,
        accuracy={tm: accuracy[tm] for tm in sorted(accuracy)},
    )
    if counts["selected"] < sheets_per_model:
        log.warning(
            "only %d instances (of %d where %s is right and %s wrong) have 3 statements per "
            "group in every theory; asked for %d",
            counts["selected"],
            len(instances),
            strong,
            ", ".join(weak),
            sheets_per_model,
        )
    if not counts["selected"]:
        raise ConfigError(
            f"no instance to annotate: {len(instances)} rows where {strong} is right and "
            f"{', '.join(weak)} wrong, {counts['skipped_too_few_statements']} of them with fewer "
            "than 3 statements per group in some theory"
        )
    return part1, part2, key, counts
