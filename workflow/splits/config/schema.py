"""Config files: loading, schema validation with defaults.

Every error a user can make in a config file surfaces as one ``ConfigError`` whose message names
the offending key (``graph.k: 'x' is not of type 'integer'``); the Snakefile and the CLI print it
on one line and stop.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from splits.config.yamlfile import expanded_size, read_yaml
from splits.errors import ConfigError

if TYPE_CHECKING:
    import jsonschema

# the files the package reads itself (package data, so that a non-editable install has them)
PACKAGE_DATA = Path(str(importlib.resources.files("splits") / "data"))
SCHEMA_PATH = PACKAGE_DATA / "config.schema.yaml"


# --------------------------------------------------------------------------- config files


@functools.cache
def _defaulting_validator():
    """Draft 7 that fills each property's default, built at the first validation: jsonschema is
    imported only where a config is validated (~0.1 CPU s a process), not by every stage job
    that reads a demographics or topics file through this module."""
    import jsonschema

    validate_properties = jsonschema.Draft7Validator.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if isinstance(subschema, dict) and "default" in subschema:
                    instance.setdefault(name, json.loads(json.dumps(subschema["default"])))
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(jsonschema.Draft7Validator, {"properties": set_defaults})


def load_schema(path: Path = SCHEMA_PATH) -> dict:
    """The config schema, parsed once per process (the Snakefile's start checks and the model
    registry both read it while Snakemake parses the workflow); each caller gets its own copy."""
    return copy.deepcopy(_parsed_schema(Path(path)))


@functools.cache
def _parsed_schema(path: Path) -> dict:
    return read_yaml(path)


def _key_path(error: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    if error.validator == "additionalProperties":
        # the message is "Additional properties are not allowed ('foo' was unexpected)"
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        pattern = error.schema.get("patternProperties")
        if pattern:
            import re

            extra = [k for k in extra if not any(re.search(p, k) for p in pattern)]
        return ".".join(parts + [extra[0] if extra else "?"])
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else "?"
        return ".".join(parts + [missing])
    return ".".join(parts) or "<top level>"


# keys of an earlier version -> their spelling now, named in the unknown-key error
MOVED_KEYS = {"graph.buckets": "ingest.buckets"}


def validate_config(config: dict, schema: dict | None = None) -> dict:
    """Validate ``config`` in place against the schema, filling defaults; return it.

    Raises ConfigError naming the first offending key (unknown key, wrong type, bad value).
    """
    schema = load_schema() if schema is None else schema
    validator = _defaulting_validator()(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), e.path))
    if errors:
        err = errors[0]
        key = _key_path(err)
        if err.validator == "additionalProperties":
            moved = MOVED_KEYS.get(key)
            raise ConfigError(f"{key}: unknown key" + (f" (now {moved})" if moved else ""))
        if err.validator == "required":
            raise ConfigError(f"{key}: required key is missing")
        message = err.message.splitlines()[0]
        if len(message) > 200:
            message = message[:200] + "..."
        raise ConfigError(f"{key}: {message}")
    return config


_SCHEMA_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}
_NULL_WORDS = ("null", "Null", "NULL", "~")


def _fits(value: Any, types: list[str]) -> bool:
    for name in types:
        if name in ("integer", "number") and isinstance(value, bool):
            continue
        if isinstance(value, _SCHEMA_TYPES.get(name, ())):
            return True
    return False


def _typed(value: str, types: list[str]) -> Any:
    """``value`` read as YAML when the schema wants another type than a string (``--config``
    hands nested values over as strings); unchanged when it does not read as one of them."""
    if "string" in types:
        return None if "null" in types and value in _NULL_WORDS else value
    try:
        parsed = yaml.load(value, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return value
    expanded_size(parsed, f"--config value {value[:40]!r}")  # an alias bomb on the command line
    return parsed if _fits(parsed, types) else value


def coerce_to_schema(config: Any, schema: dict) -> Any:
    """Give strings the schema's type where it is not a string, recursively, in place; return
    the (possibly replaced) value. Snakemake's ``--config key='{k: 16}'`` reads nested values
    as strings (``{'k': '16'}``); values that do not read as the wanted type are left for
    validation to name."""
    if not isinstance(schema, dict):
        return config
    types = schema.get("type")
    types = [types] if isinstance(types, str) else list(types or [])
    if isinstance(config, str) and types:
        config = _typed(config, types)
    if isinstance(config, dict):
        properties = schema.get("properties", {})
        patterns = schema.get("patternProperties", {})
        extra = schema.get("additionalProperties")
        for key in list(config):
            sub = properties.get(key)
            if sub is None:
                sub = next((s for p, s in patterns.items() if re.search(p, str(key))), extra)
            config[key] = coerce_to_schema(config[key], sub)
    elif isinstance(config, list) and isinstance(schema.get("items"), dict):
        config[:] = [coerce_to_schema(item, schema["items"]) for item in config]
    return config


def read_config_file(path: str | Path) -> dict:
    """A config file as a mapping (not yet validated); ConfigError naming the file when it is
    missing, not YAML, or not a mapping."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    config = read_yaml(path)
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys")
    return config


def load_config(path: str | Path) -> dict:
    return validate_config(read_config_file(path))


def require_file(key: str, value: str | Path) -> Path:
    """Check that a path named by config key ``key`` exists; ConfigError otherwise."""
    path = Path(value)
    if not path.exists():
        raise ConfigError(f"{key}: input {value} does not exist")
    return path


def section(config: dict, name: str) -> dict[str, Any]:
    """The config slice of one stage (after validation, defaults are filled)."""
    return config.get(name, {})
