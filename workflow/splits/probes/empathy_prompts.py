"""The empathy probe's prompting side (docs/method.md §3.1): the personas of a group set, one
request per (item, perceiver, experiencer), and the intensity read from an answer. The
statistics of the empathy gap are in ``splits.probes.empathy``."""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

from splits.errors import ConfigError
from splits.llm.base import Request, SamplingParams
from splits.probes.common import Group, chat, fill, one_line
from splits.probes.settings import EmpathyEnventSettings, EmpathySettings

REFUSAL = re.compile(
    r"\b(i can(?:no|')t|i cannot|i won't|i am unable|i'm unable|as an ai|i'm sorry|i am sorry|"
    r"not comfortable|cannot (?:provide|determine|answer))\b",
    re.IGNORECASE,
)
NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?!\w)")


@dataclass(frozen=True)
class Persona:
    """One name of a group set, used as perceiver and as experiencer."""

    key: str  # output key: a demographic key ("catholic") or the phrase itself ("a Latina")
    phrase: str  # how prompts name it
    group: str | None  # the group the name belongs to; None for the neutral reference persona


def _with_neutral(named: list[Persona], neutral: str | None) -> list[Persona]:
    """The neutral persona first (as in the paper's heatmaps), then the group names."""
    if not neutral:
        return named
    if any(p.key == neutral or p.phrase == neutral for p in named):
        raise ConfigError(
            f"probes.empathy.neutral: {neutral!r} is also a group name of the set; the neutral "
            "persona must differ from every name"
        )
    return [Persona(neutral, neutral, None), *named]


def personas_from_groups(
    groups: list[Group], neutral: str | None
) -> tuple[list[Persona], list[str]]:
    """The demographics group set: one name per group (the group's prompt phrase). An extra
    group whose phrase is the neutral persona's is that persona, not a group (it would otherwise
    be counted as an in-group cell); the returned notes say so."""
    notes = []
    named = []
    for group in groups:
        if neutral and group.phrase == neutral:
            notes.append(
                f"extra group {group.key!r} ({group.phrase!r}) is the neutral persona: shown, "
                "not part of delta"
            )
            continue
        named.append(Persona(group.key, group.phrase, group.key))
    if len({p.group for p in named}) < 2:
        raise ConfigError("probes.empathy: need at least two groups besides the neutral persona")
    return _with_neutral(named, neutral), notes


def personas_from_set(group_set: dict[str, list[str]], neutral: str | None) -> list[Persona]:
    """A group set of the group sets file: each name its own persona (key = the name), grouped
    by the set's groups in the file's order."""
    named = [Persona(name, name, group) for group, names in group_set.items() for name in names]
    return _with_neutral(named, neutral)


@dataclass(frozen=True)
class EmpathyPrompt:
    """A prompt variant (an entry of ``probes.empathy.variants``, templates read)."""

    system_template: str  # slot {perceiver}
    user_template: str  # slots {experiencer}, {text}, {emotion}
    scale: tuple[float, float]


def empathy_requests(
    items: pl.DataFrame,
    personas: list[Persona],
    prompt: EmpathyPrompt,
    settings: EmpathySettings | EmpathyEnventSettings,
) -> tuple[pl.DataFrame, list[Request]]:
    """One request per (item, perceiver, experiencer); an item without an emotion (a Splits
    post) is asked about ``settings.emotion``."""
    keys: dict[str, list] = {"item_id": [], "perceiver": [], "experiencer": []}
    requests = []
    has_emotion = "emotion" in items.columns
    params = SamplingParams(
        temperature=float(settings.temperature),
        max_tokens=settings.max_tokens,
        seed=settings.seed,
    )
    for row in items.iter_rows(named=True):
        emotion = row["emotion"] if has_emotion and row["emotion"] else settings.emotion
        body = one_line(row["text"], settings.probes.max_chars)
        for perceiver in personas:
            system = fill(prompt.system_template, perceiver=perceiver.phrase)
            for experiencer in personas:
                user = fill(
                    prompt.user_template,
                    experiencer=experiencer.phrase,
                    text=body,
                    emotion=emotion,
                )
                keys["item_id"].append(row["item_id"])
                keys["perceiver"].append(perceiver.key)
                keys["experiencer"].append(experiencer.key)
                requests.append(
                    Request(
                        messages=chat(system, user),
                        params=params,
                        payload={
                            "probe": "empathy",
                            "item_id": row["item_id"],
                            "perceiver": perceiver.key,
                            "experiencer": experiencer.key,
                            "perceiver_group": perceiver.group,
                            "experiencer_group": experiencer.group,
                            "emotion": emotion,
                            "text": body,
                            "scale": list(prompt.scale),
                        },
                    )
                )
    schema = {"item_id": pl.String, "perceiver": pl.String, "experiencer": pl.String}
    return pl.DataFrame(keys, schema=schema), requests


def parse_intensity(text: str | None, scale: tuple[float, float]) -> tuple[float | None, str]:
    """(intensity, status): status "ok", "refusal" (refusal wording and no number first) or
    "unparsable" (no number, or the first number outside the scale)."""
    if not text or not text.strip():
        return None, "unparsable"
    match = NUMBER.search(text)
    refusal = REFUSAL.search(text)
    if refusal and (match is None or refusal.start() < match.start()):
        return None, "refusal"
    if match is None:
        return None, "unparsable"
    value = float(match.group(1))
    if not scale[0] <= value <= scale[1]:
        return None, "unparsable"
    return value, "ok"
