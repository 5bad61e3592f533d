"""What the probes share: the groups a probe varies over, prompt templates, data readers."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from splits.config.definitions import load_demographics
from splits.config.templates import unknown_slot_error, unknown_slots
from splits.errors import ConfigError

#: how a persona or writer of each release demographic is named in prompts
DEFAULT_GROUP_PHRASES = {
    "black": "a Black person",
    "catholic": "a Catholic person",
    "construction": "a construction worker",
    "hindu_jain_sikh": "a Hindu, Jain or Sikh person",
    "jewish": "a Jewish person",
    "teacher": "a teacher",
}


@dataclass(frozen=True)
class Group:
    key: str  # demographic key ("catholic") or an extra group's key
    phrase: str  # how prompts name a member ("a Catholic person")
    cues: tuple[str, ...] = ()  # words that point to the group in a text (personalization)


def load_groups(
    demographics_file: str,
    extra_groups: dict[str, str] | None = None,
    phrases: dict[str, str] | None = None,
) -> list[Group]:
    """The demographics of the definitions file, then the extra groups of the config.

    ``phrases`` overrides the prompt phrase of a demographic; a demographic without one is
    "a person who is <display name>". Cue words are the display name's words and the group's
    self-identification phrases.
    """
    phrases = phrases or {}
    groups = []
    for demographic in load_demographics(demographics_file):
        phrase = phrases.get(
            demographic.key,
            DEFAULT_GROUP_PHRASES.get(
                demographic.key, f"a person who is {demographic.display_name}"
            ),
        )
        cues = (demographic.display_name, *demographic.self_id_phrases)
        groups.append(Group(demographic.key, phrase, tuple(cues)))
    for key, phrase in (extra_groups or {}).items():
        if any(g.key == key for g in groups):
            raise ConfigError(f"probes.extra_groups.{key}: already a demographic")
        groups.append(Group(str(key), str(phrase), ()))
    if len(groups) < 2:
        raise ConfigError(
            "probes: need at least two groups (demographics plus probes.extra_groups)"
        )
    return groups


def read_prompt(path: str | Path, slots: tuple[str, ...], optional: tuple[str, ...] = ()) -> str:
    """A prompt template file; every slot ``{name}`` of ``slots`` must appear in it, and no
    placeholder other than ``slots`` and ``optional``."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: prompt file does not exist")
    template = path.read_text(encoding="utf-8")
    missing = [s for s in slots if "{" + s + "}" not in template]
    if missing:
        raise ConfigError(f"{path}: prompt template lacks the slot(s) {', '.join(missing)}")
    unknown = unknown_slots(template, slots + optional)
    if unknown:
        raise unknown_slot_error(str(path), unknown[0], slots + optional)
    return template


def fill(template: str, **slots: str) -> str:
    """Replace ``{name}`` slots by plain substitution (texts may contain braces)."""
    out = template
    for name, value in slots.items():
        out = out.replace("{" + name + "}", str(value))
    return out


def chat(system: str | None, user: str) -> tuple[dict[str, str], ...]:
    messages = [] if not system else [{"role": "system", "content": system.strip()}]
    messages.append({"role": "user", "content": user.strip()})
    return tuple(messages)


def one_line(text: str, max_chars: int) -> str:
    """Whitespace collapsed to single spaces, cut to ``max_chars`` characters."""
    return re.sub(r"\s+", " ", text or "").strip()[:max_chars]


# --------------------------------------------------------------------------- data sources


def topic_post_items(path: str, max_items: int, seed: int) -> pl.DataFrame:
    """Splits topic posts as probe items: ``item_id, text, demographic, topic`` (a seeded
    sample of at most ``max_items`` posts, stratified round-robin over demographics)."""
    if not Path(path).exists():
        raise ConfigError(f"{path}: topic posts file does not exist")
    posts = (
        pl.scan_parquet(path)
        .select("post_id", "text", "demographic", "topic")
        .filter(pl.col("text").is_not_null() & (pl.col("text").str.strip_chars() != ""))
        .unique(subset="post_id", keep="first")
        .collect()
        .sort("post_id")
    )
    if posts.height == 0:
        return pl.DataFrame(
            schema={
                "item_id": pl.String,
                "text": pl.String,
                "demographic": pl.String,
                "topic": pl.String,
            }
        )
    shuffled = posts.sample(fraction=1.0, shuffle=True, seed=seed)
    ranked = shuffled.with_columns(pl.int_range(pl.len()).over("demographic").alias("_within"))
    chosen = ranked.sort("_within", "demographic").head(max_items).drop("_within")
    return chosen.rename({"post_id": "item_id"}).sort("item_id")


def dreaddit_items(folder: str, split: str, max_items: int | None, seed: int) -> pl.DataFrame:
    """Dreaddit segments: ``item_id, text, label`` (1 stressed, 0 not); CSV columns by name."""
    files = {"train": ["dreaddit-train.csv"], "test": ["dreaddit-test.csv"]}
    names = files.get(split, ["dreaddit-train.csv", "dreaddit-test.csv"])
    frames = []
    for name in names:
        path = Path(folder) / name
        if not path.exists():
            raise ConfigError(f"{path}: Dreaddit file does not exist")
        table = pl.read_csv(path, infer_schema_length=0)
        for column in ("id", "text", "label"):
            if column not in table.columns:
                raise ConfigError(f"{path}: column {column!r} is missing")
        frames.append(
            table.select(
                pl.concat_str([pl.lit(Path(name).stem.split("-")[-1] + ":"), pl.col("id")]).alias(
                    "item_id"
                ),
                pl.col("text"),
                pl.col("label").cast(pl.Int64),
            )
        )
    items = pl.concat(frames).filter(pl.col("text").is_not_null()).sort("item_id")
    if max_items is not None and items.height > max_items:
        items = items.sample(n=max_items, seed=seed).sort("item_id")
    return items


ENVENT_TEXTS = ("generated", "first_person", "third_person")


def envent_items(folder: str, max_items: int | None, seed: int, text: str) -> pl.DataFrame:
    """crowd-enVent events: ``item_id, text, emotion``; ``text`` picks the narrative:
    ``generated`` (the annotator's own text), ``first_person`` ("I felt X when ...") or
    ``third_person`` ("The person felt X when ...")."""
    if text not in ENVENT_TEXTS:
        raise ConfigError(f"probes.empathy.variants: text {text!r} is not one of {ENVENT_TEXTS}")
    column = f"{text}_text"
    paths = sorted(Path(folder).glob("crowd-enVent_*.tsv"))
    if not paths:
        raise ConfigError(f"{folder}: no crowd-enVent_*.tsv files")
    frames = []
    for path in paths:
        table = pl.read_csv(path, separator="\t", infer_schema_length=0)
        for name in ("emotion", "text_id", column):
            if name not in table.columns:
                raise ConfigError(f"{path}: column {name!r} is missing")
        frames.append(
            table.select(
                pl.concat_str([pl.col("emotion"), pl.lit(":"), pl.col("text_id")]).alias("item_id"),
                pl.col(column).alias("text"),
                pl.col("emotion"),
            )
        )
    # the sample is drawn over the events, whichever narrative is asked for, so that prompt
    # variants with different texts rate the same events
    items = pl.concat(frames).unique(subset="item_id", keep="first").sort("item_id")
    if max_items is not None and items.height > max_items:
        items = items.sample(n=max_items, seed=seed).sort("item_id")
    return items.filter(pl.col("text").is_not_null() & (pl.col("text").str.strip_chars() != ""))
