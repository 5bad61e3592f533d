"""``splits probe empathy``: perceiver x experiencer intensity ratings and the empathy gap, on the
topic posts or on crowd-enVent, one prompt variant per run (docs/method.md §3.1); and ``splits
probe empathy-variants``: the variants of a (source, group set) side by side."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import polars as pl

from splits.config.settings import add_settings_arguments, settings_from_args
from splits.errors import ConfigError
from splits.io import write_json, write_parquet
from splits.probes.cli_common import (
    add_group_arguments,
    add_model_arguments,
    config_entry,
    filled_entry,
    json_arg,
    load,
    model_spec,
    plain,
    probe_groups,
)
from splits.probes.settings import EMPATHY_SETTINGS, EmpathySettings

log = logging.getLogger("splits.probe")
VARIANTS_KEY = "probes.empathy.variants"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source",
        choices=sorted(EMPATHY_SETTINGS),
        required=True,
        help="topics: the run's topic posts; envent: the crowd-enVent data set",
    )
    parser.add_argument(
        "--input", required=True, help="topic_posts.parquet or the crowd-enVent folder"
    )
    parser.add_argument(
        "--variant", required=True, help="name of the prompt variant (of probes.empathy.variants)"
    )
    parser.add_argument(
        "--variant-spec",
        type=json_arg,
        default=None,
        help="the variant's entry as JSON {system_prompt, prompt, text, scale} (unset keys take "
        "the schema's defaults); with --config it may be left out",
    )
    parser.add_argument(
        "--group-set",
        required=True,
        help="'demographics' (the demographics and extra groups) or a set of --group-sets-file",
    )
    parser.add_argument("--group-sets-file", default=None, help="YAML {set: {group: [names]}}")
    parser.add_argument("--outdir", required=True, help="folder of the probe's tables")
    add_model_arguments(parser)
    add_group_arguments(parser)
    add_settings_arguments(parser)


def variant_entry(args: argparse.Namespace) -> dict:
    """The prompt variant: as given (the rule passes it), else from the ``--config`` file."""
    if args.variant_spec is not None:
        return filled_entry(VARIANTS_KEY, args.variant_spec)
    if args.config is None:
        raise ConfigError("--variant-spec: required with --settings (the variant's entry)")
    return config_entry(args, VARIANTS_KEY, args.variant)


def personas(args: argparse.Namespace, settings):
    """The personas asked about (and notes on them) of ``--group-set``."""
    from splits.config.definitions import DEMOGRAPHICS_GROUP_SET, load_group_sets
    from splits.probes.empathy_prompts import personas_from_groups, personas_from_set

    neutral = (settings.neutral or "").strip() or None
    if args.group_set == DEMOGRAPHICS_GROUP_SET:
        return personas_from_groups(probe_groups(args.demographics, settings.probes), neutral)
    if not args.group_sets_file:
        raise ConfigError("--group-sets-file: required with a group set other than demographics")
    sets = load_group_sets(args.group_sets_file)
    if args.group_set not in sets:
        raise ConfigError(
            f"probes.empathy.group_sets: {args.group_set!r} is not a set of "
            f"{args.group_sets_file} ({', '.join(sorted(sets))})"
        )
    return personas_from_set(sets[args.group_set], neutral), []


def run(args: argparse.Namespace) -> int:
    from splits.probes.common import envent_items, read_prompt, topic_post_items
    from splits.probes.empathy import empathy_gap, heatmap
    from splits.probes.empathy_prompts import EmpathyPrompt, empathy_requests, parse_intensity

    settings = settings_from_args(args, EMPATHY_SETTINGS[args.source])
    spec = model_spec(args, settings.model, args.model_spec)
    variant = variant_entry(args)
    scale = (float(variant["scale"][0]), float(variant["scale"][1]))
    if not scale[0] < scale[1]:
        raise ConfigError(f"{VARIANTS_KEY}.{args.variant}.scale: low must be below high")
    alpha = float(settings.alpha)
    if not 0 < alpha < 1:
        raise ConfigError("probes.empathy.alpha: must lie between 0 and 1")
    cast, notes = personas(args, settings)
    for note in notes:
        log.info("empathy probe: %s", note)
    if isinstance(settings, EmpathySettings):
        items = topic_post_items(args.input, settings.max_items or 10**9, settings.seed)
    else:
        items = envent_items(args.input, settings.envent_max_items, settings.seed, variant["text"])
    prompt = EmpathyPrompt(
        system_template=read_prompt(variant["system_prompt"], ("perceiver",)),
        user_template=read_prompt(variant["prompt"], ("experiencer", "text", "emotion")),
        scale=scale,
    )
    keys, requests = empathy_requests(items, cast, prompt, settings)
    log.info(
        "empathy probe (%s, %s): %d items x %d x %d cells",
        args.group_set,
        args.variant,
        items.height,
        len(cast),
        len(cast),
    )
    texts = [c.text for c in load(settings.model, spec, args.cache).generate(requests)]
    parsed = [parse_intensity(t, scale) for t in texts]
    responses = keys.with_columns(
        pl.Series("response", texts, dtype=pl.String),
        pl.Series("intensity", [p[0] for p in parsed], dtype=pl.Float64),
        pl.Series("status", [p[1] for p in parsed], dtype=pl.String),
    )
    result = empathy_gap(
        responses, cast, settings.permutations, settings.flips, settings.seed, alpha
    )
    result.notes[:0] = notes
    out = Path(args.outdir)
    write_parquet(responses, out / "responses.parquet")
    write_parquet(result.cells, out / "cells.parquet")
    write_json(
        plain(
            {
                "source": args.source,
                "group_set": args.group_set,
                "variant": args.variant,
                "text": variant["text"] if args.source == "envent" else "post",
                "scale": list(scale),
                "model": settings.model,
                "permutations": settings.permutations,
                "flips": settings.flips,
                **result.summary(),
            }
        ),
        out / "summary.json",
    )
    heatmap(
        result,
        str(out / "heatmap.png"),
        f"empathy gap ({args.source}, {args.group_set}, {args.variant}, {settings.model})",
    )
    log.info(
        "empathy probe: delta=%.3f kept %d/%d items, primary test %s",
        result.delta,
        result.n_items_kept,
        result.n_items,
        result.primary_test,
    )
    return 0


# --------------------------------------------------------------------------- variants side by side

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


def run_variants(args: argparse.Namespace) -> int:
    """The per-variant summaries of one (source, group set) side by side: CSV and Markdown."""

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


def configure_variants_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--summaries", nargs="+", required=True, help="summary.json files")
    parser.add_argument("--out", required=True, help="CSV path (a .md table is written next)")
