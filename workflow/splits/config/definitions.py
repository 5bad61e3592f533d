"""The definition files the config names: demographics, topics and group sets."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from splits.config.schema import require_file
from splits.config.yamlfile import MAX_FILE_BYTES, bomb_error, read_yaml
from splits.errors import ConfigError


def _read_definitions(path: Path) -> Any:
    """A definitions file (release JSON, or YAML read with bounds: splits.config.yamlfile)."""
    if path.suffix != ".json":
        return read_yaml(path)
    if path.stat().st_size > MAX_FILE_BYTES:
        raise bomb_error(str(path), f"larger than {MAX_FILE_BYTES // 2**20} MiB")
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot parse ({str(err).splitlines()[0]})") from err


# --------------------------------------------------------------------------- demographics

RELEASE_DISPLAY_NAMES = {
    "black": "Black (African American)",
    "catholic": "Catholic",
    "construction": "construction worker",
    "hindu_jain_sikh": "Hindu/Jain/Sikh",
    "jewish": "Jewish",
    "teacher": "teacher",
}


#: the key of thresholds.json that holds how each threshold was chosen (never a demographic)
THRESHOLDS_SUPPORT_KEY = "breakpoint_support"


@dataclass(frozen=True)
class Demographic:
    key: str
    display_name: str
    seed_subreddits: tuple[str, ...]
    self_id_phrases: tuple[str, ...]
    anti_self_id_phrases: tuple[str, ...]
    threshold: int | str = "auto"  # percentile 0-100, or "auto"
    identity_words: tuple[str, ...] = ()  # words naming the group (hypothesis triviality)


def _demographic_from_mapping(key: str, entry: dict, where: str) -> Demographic:
    if not isinstance(key, str) or not re.fullmatch(SAFE_NAME, key):
        # the key names the demographic's folders and files and its wildcard value
        raise ConfigError(
            f"{where}: demographic key {key!r} goes into file paths and may hold only "
            f"{SAFE_NAME_CHARACTERS}"
        )
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}.{key}: expected a mapping of the demographic's fields")
    seeds = entry.get("seed_subreddits", entry.get("seed_set"))
    if not seeds:
        raise ConfigError(f"{where}.{key}.seed_subreddits: empty or missing")
    threshold = entry.get("threshold", "auto")
    if threshold != "auto" and not (isinstance(threshold, int | float) and 0 <= threshold < 100):
        raise ConfigError(f"{where}.{key}.threshold: must be a percentile in [0, 100) or 'auto'")
    return Demographic(
        key=key,
        display_name=entry.get("display_name", RELEASE_DISPLAY_NAMES.get(key, key)),
        seed_subreddits=tuple(str(s) for s in seeds),
        self_id_phrases=tuple(entry.get("self_id_phrases") or ()),
        anti_self_id_phrases=tuple(entry.get("anti_self_id_phrases") or ()),
        threshold=threshold,
        identity_words=_string_tuple(entry.get("identity_words"), f"{where}.{key}.identity_words"),
    )


def _string_tuple(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(f"{key}: must be a list of non-empty strings")
    return tuple(value)


def load_demographics(path: str | Path) -> list[Demographic]:
    """Read demographics from our YAML (``demographics: [{key: ...}]``) or the release JSON
    (``{key: {seed_set, self_id_phrases, anti_self_id_phrases}}``)."""
    path = require_file("demographics.file", path)
    data = _read_definitions(path)
    if isinstance(data, dict) and "demographics" in data:
        entries = data["demographics"]
        if not isinstance(entries, list):
            raise ConfigError(f"{path}: 'demographics' must be a list")
        out = []
        for i, entry in enumerate(entries):
            if "key" not in entry:
                raise ConfigError(f"{path}: demographics[{i}].key is missing")
            out.append(_demographic_from_mapping(entry["key"], entry, str(path)))
    elif isinstance(data, dict):
        out = [_demographic_from_mapping(k, v, str(path)) for k, v in data.items()]
    else:
        raise ConfigError(f"{path}: expected a mapping of demographics")
    keys = [d.key for d in out]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"{path}: duplicate demographic keys")
    if THRESHOLDS_SUPPORT_KEY in keys:
        raise ConfigError(f"{path}: {THRESHOLDS_SUPPORT_KEY!r} is reserved, not a demographic key")
    return out


# --------------------------------------------------------------------------- topics


@dataclass(frozen=True)
class Topic:
    category: str
    topic: str
    keywords: tuple[str, ...]


def validate_topics(topics: list[Topic], where: str = "topics") -> list[Topic]:
    seen: set[str] = set()
    for t in topics:
        if not t.topic or not str(t.topic).strip():
            raise ConfigError(f"{where}: a topic in category {t.category!r} has an empty name")
        if t.topic.lower() in seen:
            raise ConfigError(f"{where}: topic {t.topic!r} appears twice")
        seen.add(t.topic.lower())
        if not t.keywords or not all(isinstance(k, str) and k.strip() for k in t.keywords):
            raise ConfigError(f"{where}: topic {t.topic!r} has an empty keyword list or keyword")
    from splits.text import query_tokens  # the retrieval's own words and stop words

    for t in topics:
        if not query_tokens(t.keywords):
            raise ConfigError(
                f"{where}: topic {t.topic!r}: every keyword is a stop word or has no letter or "
                f"digit ({', '.join(repr(k) for k in t.keywords[:5])}), so it would retrieve no "
                "posts; give it content words"
            )
    return topics


def load_topics(path: str | Path) -> list[Topic]:
    """Read topics from our YAML (``topics: [{category, topic, keywords}]``) or the release JSON
    (``{category: {topic: [keywords]}}``)."""
    path = require_file("topics.file", path)
    data = _read_definitions(path)
    topics: list[Topic] = []
    if isinstance(data, dict) and "topics" in data:
        for i, entry in enumerate(data["topics"] or []):
            if not isinstance(entry, dict):
                raise ConfigError(f"{path}: topics[{i}] is not a mapping")
            name = entry.get("topic")
            for field in ("category", "topic", "keywords"):
                if field not in entry:
                    raise ConfigError(f"{path}: topic {name or i!r} is missing {field!r}")
            keywords = entry["keywords"]
            if not isinstance(keywords, list):
                raise ConfigError(f"{path}: topic {name!r}: keywords must be a list")
            topics.append(Topic(str(entry["category"]), str(name), tuple(keywords)))
    elif isinstance(data, dict):
        for category, by_topic in data.items():
            if not isinstance(by_topic, dict):
                raise ConfigError(f"{path}: category {category!r} must map topics to keyword lists")
            for name, keywords in by_topic.items():
                if not isinstance(keywords, list):
                    raise ConfigError(f"{path}: topic {name!r}: keywords must be a list")
                topics.append(Topic(str(category), str(name), tuple(keywords)))
    else:
        raise ConfigError(f"{path}: expected a mapping")
    return validate_topics(topics, str(path))


# --------------------------------------------------------------------------- probes

#: the group set built from the demographics file (plus probes.extra_groups)
DEMOGRAPHICS_GROUP_SET = "demographics"


def load_group_sets(path: str | Path, key: str = "probes.empathy.group_sets_file") -> dict:
    """Read the empathy probe's group sets: ``{set: {group: [name, ...]}}``. Every set has at
    least two groups, every group at least one name, and a name appears once per set."""
    path = require_file(key, path)
    data = read_yaml(path) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of group sets")
    sets: dict[str, dict[str, list[str]]] = {}
    for name, groups in data.items():
        where = f"{path}: {name}"
        if name == DEMOGRAPHICS_GROUP_SET:
            raise ConfigError(f"{where}: the name is reserved for the demographics")
        if not re.fullmatch(r"[A-Za-z0-9_-]+", str(name)):
            raise ConfigError(f"{where}: a set name may hold only letters, digits, _ and -")
        if not isinstance(groups, dict) or len(groups) < 2:
            raise ConfigError(f"{where}: needs at least two groups, each with a list of names")
        seen: set[str] = set()
        sets[str(name)] = {}
        for group, names in groups.items():
            if not isinstance(names, list) or not names:
                raise ConfigError(f"{where}.{group}: needs a non-empty list of names")
            for entry in names:
                if not isinstance(entry, str) or not entry.strip():
                    raise ConfigError(f"{where}.{group}: names must be non-empty strings")
                if entry in seen:
                    raise ConfigError(f"{where}: name {entry!r} appears twice")
                seen.add(entry)
            sets[str(name)][str(group)] = [str(n) for n in names]
    return sets


#: registry names that appear in the hypotheses stage's file paths
PATH_NAME = r"[A-Za-z0-9_.\-]+"
#: a name the config gives that goes into file paths (PATH_NAME, not starting with . or -: no
#: ".." and nothing read as a command-line option)
SAFE_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.\-]*"
SAFE_NAME_CHARACTERS = "letters, digits, _ . and - (not first: . -)"

#: posts of each group in an evaluation row's sample set (sample_A or sample_B), besides the
#: k/2 calibration posts
SAMPLE_SIZE = 3
