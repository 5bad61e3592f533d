"""Prompt templates: the slots each config key's template may use."""

from __future__ import annotations

import re
from collections.abc import Iterable

from splits.errors import ConfigError

# --------------------------------------------------------------------------- prompt templates

TM_SLOTS = ("group_a", "group_b", "topic", "category", "k", "posts")
CM_SLOTS = ("demo_a", "demo_b", "post_set1", "post_set2", "theories")
#: the slots a prompt template named by each config key may use (``<key>.<name>`` entries of
#: the per-model maps and the personalization tasks take the slots of their key)
PROMPT_SLOTS: dict[str, tuple[str, ...]] = {
    "demographics.verifier_prompt": ("demographic", "phrase", "context"),
    "evaluation.tm_prompt": TM_SLOTS,
    "evaluation.tm_prompts": TM_SLOTS,
    "evaluation.cm_prompt": CM_SLOTS,
    "evaluation.cm_prompts": CM_SLOTS,
    "probes.stress.prompt": ("group", "text"),
    "probes.empathy.variants.*.system_prompt": ("perceiver",),
    "probes.empathy.variants.*.prompt": ("experiencer", "text", "emotion"),
    "probes.personalization.rewrite_prompt": ("source", "target", "text"),
    "probes.personalization.judge_prompt": ("source", "target", "original", "rewrite"),
    "probes.personalization.tasks": ("text", "topic"),
    "hypotheses.theory_prompt": ("group_a", "group_b", "topic", "category", "theory"),
    "hypotheses.generate.prompt": (
        "group_a",
        "group_b",
        "topic",
        "category",
        "posts_a",
        "posts_b",
        "n",
    ),
}
# a template file holding one Python f-string literal (the paper's CM prompt is one)
FSTRING_START = re.compile(r"^\s*[fF][rR]?(\"\"\"|''')|^\s*[rR][fF](\"\"\"|''')")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def unknown_slots(text: str, allowed: Iterable[str]) -> list[str]:
    """The ``{name}`` placeholders of a plain template that are none of ``allowed`` (each once,
    in order): a misspelt slot would otherwise reach the model as literal text. Braces around
    anything but a bare name (``{ "key": 1 }``) are text."""
    allowed = set(allowed)
    found = [m.group(1) for m in _PLACEHOLDER.finditer(text) if m.group(1) not in allowed]
    return list(dict.fromkeys(found))


def unknown_slot_error(where: str, name: str, allowed: Iterable[str]) -> ConfigError:
    slots = " ".join("{" + s + "}" for s in allowed)
    return ConfigError(f"{where}: unknown slot {{{name}}} (the template's slots: {slots})")
