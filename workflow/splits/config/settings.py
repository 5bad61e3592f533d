"""A stage's typed settings, built from its validated config section: every setting spelled once.

The schema (``workflow/schemas/config.schema.yaml``) is the one place of every setting and its
default. A stage declares the keys it reads as a frozen dataclass whose fields are named after
them, with no defaults of its own::

    @dataclass(frozen=True)
    class GraphSettings:
        SECTION: ClassVar[str] = "graph"
        top_n: int
        min_posts: int
        k: int = field(metadata={"key": "graph.k"})  # any other dotted config key

A field reads ``<SECTION>.<field name>`` unless its metadata names another dotted key; a field
typed as a settings dataclass reads that nested section.

- The rule passes them as one JSON value (``settings_json(config, GraphSettings)`` in
  ``common.smk``, handed over as ``--settings {params.settings:q}``): only the keys the job
  reads, so that editing another key of the section re-runs nothing.
- The job's command rebuilds them (``settings_from_args``); by hand, ``--config FILE`` reads a
  config file instead, validated against the schema with its defaults filled, exactly as the
  Snakefile reads it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import typing
from pathlib import Path
from typing import Any, TypeVar

from splits.errors import ConfigError

S = TypeVar("S")


def _key(cls: type, field: dataclasses.Field) -> str:
    return field.metadata.get("key") or f"{cls.SECTION}.{field.name}"


def _lookup(config: dict, key: str) -> Any:
    value: Any = config
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise ConfigError(f"{key}: missing from the config (is it in the schema?)")
        value = value[part]
    return value


def _nested(cls: type, field: dataclasses.Field) -> type | None:
    hint = typing.get_type_hints(cls).get(field.name)
    return hint if dataclasses.is_dataclass(hint) else None


def settings_values(config: dict, cls: type) -> dict[str, Any]:
    """The values of ``cls``'s keys in a validated config, by field name."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        nested = _nested(cls, field)
        values[field.name] = (
            settings_values(config, nested) if nested else _lookup(config, _key(cls, field))
        )
    return values


def setting_keys(cls: type) -> dict[str, str]:
    """The dotted config key of each field ``cls`` reads, by field name (a nested section's
    fields by their own names): what a caller may override by keyword."""
    keys: dict[str, str] = {}
    for field in dataclasses.fields(cls):
        nested = _nested(cls, field)
        for name, key in (
            setting_keys(nested) if nested else {field.name: _key(cls, field)}
        ).items():
            if keys.setdefault(name, key) != key:
                raise ValueError(f"{cls.__name__}: {name} names both {keys[name]} and {key}")
    return keys


def settings_json(config: dict, cls: type) -> str:
    """The keys ``cls`` reads, as canonical JSON: the value a rule passes (and Snakemake compares
    between runs to decide what to re-run)."""
    return json.dumps(settings_values(config, cls), sort_keys=True, separators=(",", ":"))


def settings_from_values(cls: type[S], values: dict[str, Any]) -> S:
    names = {f.name for f in dataclasses.fields(cls)}
    missing = sorted(names - set(values))
    unknown = sorted(set(values) - names)
    if missing or unknown:
        raise ConfigError(
            f"{cls.SECTION}: settings {'missing ' + ', '.join(missing) if missing else ''}"
            f"{' and ' if missing and unknown else ''}"
            f"{'unknown ' + ', '.join(unknown) if unknown else ''}"
        )
    built = {}
    for field in dataclasses.fields(cls):
        nested = _nested(cls, field)
        value = values[field.name]
        built[field.name] = settings_from_values(nested, value) if nested else value
    return cls(**built)


def settings_from_config(cls: type[S], config: dict) -> S:
    return settings_from_values(cls, settings_values(config, cls))


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """``--settings JSON`` (what the rule passes) or ``--config FILE`` (by hand: a config file,
    validated against the schema, defaults filled)."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--settings", help="the stage's settings as JSON (what the workflow's rule passes)"
    )
    source.add_argument(
        "--config",
        type=Path,
        help="a config file (e.g. config/config.yaml); unset keys take the schema's defaults",
    )


def settings_from_args(args: argparse.Namespace, cls: type[S]) -> S:
    if args.config is not None:
        # imported here: the schema's validator (jsonschema, ~0.1 s) is needed for a config
        # file only, not for the --settings JSON every workflow job passes
        from splits.config.schema import load_config

        return settings_from_config(cls, load_config(args.config))
    try:
        values = json.loads(args.settings)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--settings: not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(values, dict):
        raise ConfigError("--settings: not a JSON object")
    return settings_from_values(cls, values)


def schema_defaults(cls: type[S], **overrides: Any) -> S:
    """``cls`` with the schema's defaults (an empty config, validated), some fields replaced: for
    tests and library callers, so that no default is written a second time."""
    from splits.config.schema import validate_config

    return dataclasses.replace(settings_from_config(cls, validate_config({})), **overrides)
