"""``splits probe stress``: the yes/no stress question varied over the writer's group, on the
topic posts or on Dreaddit (docs/method.md §3.1)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import polars as pl

from splits.config.settings import add_settings_arguments, settings_from_args
from splits.errors import ConfigError
from splits.io import write_json, write_parquet
from splits.probes.cli_common import (
    add_group_arguments,
    add_model_arguments,
    bar_plot,
    load,
    model_spec,
    plain,
    probe_groups,
)
from splits.probes.settings import STRESS_SETTINGS, StressSettings

log = logging.getLogger("splits.probe")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source",
        choices=sorted(STRESS_SETTINGS),
        required=True,
        help="topics: the run's topic posts; dreaddit: the Dreaddit data set",
    )
    parser.add_argument("--input", required=True, help="topic_posts.parquet or the Dreaddit folder")
    parser.add_argument("--prompt", required=True, help="template with {group} and {text}")
    parser.add_argument("--outdir", required=True, help="folder of the probe's tables")
    add_model_arguments(parser)
    add_group_arguments(parser)
    add_settings_arguments(parser)


def stress_items(source: str, path: str, settings) -> pl.DataFrame:
    from splits.probes.common import dreaddit_items, topic_post_items

    if isinstance(settings, StressSettings):
        return topic_post_items(path, settings.max_items or 10**9, settings.seed).with_columns(
            pl.lit(None, dtype=pl.Int64).alias("label")
        )
    return dreaddit_items(path, settings.dreaddit_split, settings.dreaddit_max_items, settings.seed)


def run(args: argparse.Namespace) -> int:
    from splits.probes.common import read_prompt
    from splits.probes.perception import (
        parse_yes_no,
        stress_metrics,
        stress_ratings,
        stress_requests,
    )

    settings = settings_from_args(args, STRESS_SETTINGS[args.source])
    spec = model_spec(args, settings.model, args.model_spec)
    if settings.attempts < 1:
        raise ConfigError("probes.stress.attempts: must be at least 1")
    if settings.attempts > 1 and settings.temperature <= 0:
        log.warning("several attempts at temperature 0 repeat the same answer")
    groups = probe_groups(args.demographics, settings.probes, settings.groups)
    items = stress_items(args.source, args.input, settings)
    template = read_prompt(args.prompt, ("group", "text"))
    keys, requests = stress_requests(items, groups, template, settings)
    log.info(
        "stress probe: %d items x %d groups x %d attempts",
        items.height,
        len(groups),
        settings.attempts,
    )
    completions = load(settings.model, spec, args.cache).generate(requests)
    texts = [c.text for c in completions]
    answers = [parse_yes_no(t, settings.answer_rule) for t in texts]
    responses = keys.with_columns(
        pl.Series("response", texts, dtype=pl.String),
        pl.Series("answer", answers, dtype=pl.String),
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
        plain(
            {
                "source": args.source,
                "model": settings.model,
                "answer_rule": settings.answer_rule,
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
    ratings, raters = stress_ratings(responses, settings.model)
    write_parquet(ratings, out / "ratings.parquet")
    write_parquet(raters, out / "raters.parquet")
    bar_plot(
        table["group"].to_list(),
        table["stress_rate"].to_list(),
        out / "stress_rates.png",
        f"stress rate by prompted group ({args.source}, {settings.model}); "
        f"max diff {summary.get('max_diff_stress_rate', float('nan')):.3f}",
        "share of 'yes'",
        "group named in the prompt",
    )
    log.info("stress probe: undetected_rate_attempts=%.3f", summary["undetected_rate_attempts"])
    return 0
