"""The API's settings: a config (a file, or none) with keyword overrides, validated against the
schema with its defaults filled, then read into the stages' own settings classes.

Each keyword is the name of a field of the settings the API's calls read (``LiftSettings`` with
its ``retrieval`` section, ``TrivialitySettings``, the lexicon bounds of ``FileSettings``,
``FightingWordsSection``), plus ``identity_words``; ``KEYWORDS`` maps each to its config key, so
``mode="release"`` sets ``hypotheses.retrieval.mode`` and ``seed=1`` the top-level ``seed``. No
default is written here: what is not set comes from the schema.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from splits.config.schema import read_config_file, validate_config
from splits.config.settings import setting_keys, settings_from_config
from splits.errors import ConfigError
from splits.hypotheses.settings import (
    FightingWordsSection,
    FileSettings,
    LiftSettings,
    TrivialitySettings,
)

S = TypeVar("S")

#: the settings classes whose fields are keywords of the API's calls
SETTINGS_CLASSES = (LiftSettings, TrivialitySettings, FileSettings, FightingWordsSection)


def _keywords() -> dict[str, str]:
    keys: dict[str, str] = {}
    for cls in SETTINGS_CLASSES:
        for name, key in setting_keys(cls).items():
            if keys.setdefault(name, key) != key:
                raise ValueError(f"keyword {name} names both {keys[name]} and {key}")
    keys["identity_words"] = "hypotheses.identity_words"
    return keys


#: keyword -> dotted config key
KEYWORDS: dict[str, str] = _keywords()
#: validated configs kept (one per distinct set of overrides)
CACHED_CONFIGS = 64
#: config keys holding a path, read relative to the run's folder (as Snakemake reads them)
PATH_KEYS = ("demographics.file", "hypotheses.identity_words", "hypotheses.retrieval.vocab")


def _plain(value: Any) -> Any:
    """A value as the schema reads it (tuples as lists, numpy scalars as Python numbers)."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # a numpy scalar
        return value.item()
    return value


class Settings:
    """A config with keyword overrides: ``config()`` validates it (the schema's defaults fill
    what is unset), ``read(cls)`` builds a stage's settings class from it."""

    def __init__(
        self,
        config: str | Path | Mapping | None = None,
        base: str | Path | None = None,
        overrides: Mapping[str, Any] | None = None,
    ):
        if config is None:
            raw: dict = {}
        elif isinstance(config, Mapping):
            raw = copy.deepcopy(dict(config))
        else:
            raw = read_config_file(config)
        self._raw = raw
        self.base = Path(base) if base is not None else None
        self.overrides = dict(overrides or {})
        self._cache: dict[str, dict] = {}
        self.config()  # a wrong key or value fails here, on opening

    def config(self, **overrides: Any) -> dict:
        """The validated config with the opener's and these overrides (relative paths made
        relative to the run's folder)."""
        merged = {**self.overrides, **overrides}
        cache_key = json.dumps(_plain(merged), sort_keys=True, default=str)
        if cache_key not in self._cache:
            config = copy.deepcopy(self._raw)
            for name, value in merged.items():
                key = KEYWORDS.get(name)
                if key is None:
                    raise ConfigError(
                        f"unknown setting {name!r} (settings: {', '.join(sorted(KEYWORDS))})"
                    )
                _set(config, key, _plain(value))
            config = validate_config(config)
            if self.base is not None:
                for key in PATH_KEYS:
                    value = _get(config, key)
                    if value is not None and not Path(value).is_absolute():
                        _set(config, key, str(self.base / value))
            if len(self._cache) >= CACHED_CONFIGS:  # bounded over a long session
                self._cache.clear()
            self._cache[cache_key] = config
        return self._cache[cache_key]

    def read(self, cls: type[S], **overrides: Any) -> S:
        return settings_from_config(cls, self.config(**overrides))


def _get(config: dict, key: str) -> Any:
    value: Any = config
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _set(config: dict, key: str, value: Any) -> None:
    *parents, last = key.split(".")
    node = config
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[last] = value
