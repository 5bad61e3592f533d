"""YAML files read with bounds: the one way the package parses a config, demographics, topics,
group sets or hypotheses file.

YAML aliases make a few lines stand for an astronomically large value (a "billion laughs" alias
bomb): PyYAML builds it cheaply with shared references, and the first consumer that walks it
(``json.dumps`` of a config section, a deep copy, a schema check) runs for minutes and takes
gigabytes. So every parsed value is measured as it would be once expanded, without expanding it
(each shared list or mapping is sized once), and refused in one line past ``MAX_VALUES``; a file
is refused past ``MAX_FILE_BYTES`` before it is parsed, and nesting past ``MAX_DEPTH``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from splits.errors import ConfigError

#: bytes of one YAML file (a config is a few kB; a hypotheses file of large lexicons a few MB)
MAX_FILE_BYTES = 64 * 2**20
#: values (scalars, lists, mappings and keys) of one file once every alias is expanded
MAX_VALUES = 2_000_000
#: levels of nested lists and mappings
MAX_DEPTH = 64

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def bomb_error(where: str, reason: str) -> ConfigError:
    return ConfigError(
        f"{where}: {reason}; refused before use (a YAML alias bomb or a runaway file?): write the "
        "values out or split the file"
    )


def expanded_size(data: Any, where: str, limit: int = MAX_VALUES) -> int:
    """How many values ``data`` holds with every shared list or mapping counted at each place
    it appears (as ``json.dumps`` would write it), computed once per shared object; ConfigError
    naming ``where`` past ``limit`` values, ``MAX_DEPTH`` levels or on a value that holds
    itself."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()

    def size(value: Any, depth: int) -> int:
        if isinstance(value, dict):
            children = [*value.keys(), *value.values()]
        elif isinstance(value, list | tuple):
            children = list(value)
        else:
            return 1
        key = id(value)
        if key in sizes:
            return sizes[key]
        if key in open_:
            raise bomb_error(where, "a value holds itself (a recursive YAML alias)")
        if depth > MAX_DEPTH:
            raise bomb_error(where, f"values nested deeper than {MAX_DEPTH} levels")
        open_.add(key)
        total = 1
        for child in children:
            total += size(child, depth + 1)
            if total > limit:
                raise bomb_error(where, f"expands to more than {limit:,} values")
        open_.discard(key)
        sizes[key] = total
        return total

    return size(data, 0)


def parse_yaml(text: str, where: str) -> Any:
    """``text`` parsed as YAML (safe types only) and bounded (module doc); ConfigError naming
    ``where`` for text that is not YAML or past a bound."""
    if len(text) > MAX_FILE_BYTES:
        raise bomb_error(where, f"larger than {MAX_FILE_BYTES // 2**20} MiB")
    limit = sys.getrecursionlimit()
    try:
        # the parser recurses once per nesting level: deep nesting is an error, not a crash
        data = yaml.load(text, Loader=_LOADER)
    except RecursionError as err:
        raise bomb_error(where, f"values nested deeper than {limit} levels") from err
    except yaml.YAMLError as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(f"{where}: not valid YAML ({first})") from err
    expanded_size(data, where)
    return data


def read_yaml(path: str | Path, where: str | None = None) -> Any:
    """The YAML file ``path`` parsed with bounds; ConfigError starting with ``where`` (the
    config key that names the file; the file itself by default) when it is missing,
    unreadable, too large (refused by its size, before it is read), not YAML or past a bound."""
    path = Path(path)
    label = f"{where}: {path}" if where else str(path)
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise bomb_error(label, f"larger than {MAX_FILE_BYTES // 2**20} MiB")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise ConfigError(f"{label}: does not exist") from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"{label}: not UTF-8 text ({err.reason} at byte {err.start})") from err
    except OSError as err:
        raise ConfigError(f"{label}: cannot read ({err.strerror or err})") from err
    return parse_yaml(text, label)
