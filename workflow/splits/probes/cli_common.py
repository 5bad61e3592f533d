"""What the probes' CLI modules share: the model and group arguments, registry entries handed
over as JSON (or read from ``--config`` by hand), JSON-safe summaries and bar plots."""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path

import numpy as np

from splits.errors import ConfigError
from splits.plots import message_figure, save_figure


def json_arg(value: str):
    try:
        return json.loads(value)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not valid JSON: {err}") from err


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The probe model's registry entry (its name is a setting) and the response cache."""
    parser.add_argument(
        "--model-spec",
        type=json_arg,
        default=None,
        help="the registry entry (JSON) of the settings' model; with --config it may be left "
        "out (read from the config's models)",
    )
    parser.add_argument(
        "--cache", default="results/llm_cache.sqlite", help="response cache ('' for none)"
    )


def add_group_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--demographics", default=None, help="demographics definition file")


def model_spec(args: argparse.Namespace, name: str, given: dict | None) -> dict:
    """The registry entry of model ``name``: as given (the rule passes it), else from the
    ``--config`` file's models."""
    if given is not None:
        return given
    if args.config is None:
        raise ConfigError(f"--model-spec: required with --settings (registry entry of {name})")
    from splits.config.schema import load_config

    models = load_config(args.config).get("models", {})
    if name not in models:
        raise ConfigError(f"{args.config}: {name!r} is not a model of the models registry")
    return models[name]


def config_entry(args: argparse.Namespace, key: str, name: str):
    """Entry ``name`` of mapping ``key`` (dotted) of the ``--config`` file, defaults filled."""
    from splits.config.schema import load_config

    value = load_config(args.config)
    for part in key.split("."):
        value = value[part]
    if name not in value:
        raise ConfigError(f"{key}: {name!r} is not an entry of {args.config}")
    return value[name]


def filled_entry(key: str, entry: dict) -> dict:
    """A mapping entry (e.g. of ``probes.empathy.variants``) validated against the schema with
    its defaults filled, as the Snakefile's config has it."""
    from splits.config.schema import validate_config

    if not isinstance(entry, dict):
        raise ConfigError(f"{key}: must be a JSON object")
    parts = key.split(".")
    config: dict = {}
    inner = config
    for part in parts:
        inner[part] = {}
        inner = inner[part]
    inner["entry"] = dict(entry)
    filled = validate_config(config)
    for part in parts:
        filled = filled[part]
    return filled["entry"]


def load(name: str, spec: dict, cache: str):
    """A registry entry's model (the probe's, or e.g. a judge) through the LLM layer."""
    from splits.llm import load_model

    return load_model(name, {name: spec}, cache_path=cache or None)


def probe_groups(demographics: str | None, text, fixed: dict | None = None):
    """The groups a probe varies over: ``fixed`` (probes.stress.groups) or the demographics of
    the definitions file plus the extra groups (``text``: the ProbeTextSettings)."""
    from splits.probes.common import Group, load_groups

    if fixed is not None:
        if not isinstance(fixed, dict) or len(fixed) < 2:
            raise ConfigError("probes.stress.groups: give at least two groups {key: phrase}")
        return [Group(str(k), str(v)) for k, v in fixed.items()]
    if not demographics:
        raise ConfigError("--demographics: required (or probes.stress.groups for the stress probe)")
    return load_groups(demographics, text.extra_groups, text.group_phrases)


def plain(value):
    """JSON-safe: NaN -> None, numpy scalars -> Python."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
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


def bar_plot(
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
