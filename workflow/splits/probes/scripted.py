"""Builtin scripted models for the probes: deterministic, with behaviour set in the registry
spec, so tests can compute the expected metrics by hand and the default pipeline runs offline.

    models:
      probe-scripted: {backend: builtin, kind: probe-scripted, ingroup_bonus: 8}

They answer from ``Request.payload`` (``probe``: stress | empathy | rewrite | task) and ignore
the prompt text. Spec keys (all optional):
- ``yes_groups`` / ``no_groups``: stress answer always "yes" / "no" for these prompted groups;
- ``unparsable_groups``: stress answers for these groups are not yes/no;
- ``unparsable_items``: every answer (stress, empathy) for these item ids is unparsable;
- ``refuse_items``: empathy answers for these item ids are refusals;
- ``ingroup_bonus``: empathy intensity added when perceiver and experiencer are names of the
  same group (the same name where the request carries no groups; never the neutral persona);
- ``experiencer_bonus``: {group: intensity added when that group is the experiencer};
- ``interval_bias``: {word: added to interval task answers when the text contains the word};
- ``reply_bias``: {word: sentence appended to free-text task answers when the text has it};
- ``judge_reject_targets``: the rewrite judge answers GROUP: no for rewrites into these groups;
- ``judge_min_similarity``: the judge answers CONTENT: yes when the rewrite's word overlap with
  the original (cue words removed) reaches this (default 0.5);
- ``noise``: standard deviation of noise added to intensities when temperature > 0 (seeded);
- ``flip_rate``: share of stress answers flipped when temperature > 0 (seeded per attempt).
Without any key: stress "yes" iff the text has a stress word; intensity from the text's
emotional words; rewrites swap the source group's cues for the target's; the judge says GROUP:
yes iff the rewrite contains one of the target group's cues.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from splits.llm.base import Backend, Completion, Request

STRESS_WORDS = (
    "stress", "stressed", "anxious", "anxiety", "worried", "worry", "panic", "afraid", "scared",
    "overwhelmed", "depressed", "exhausted", "terrified", "nervous", "desperate", "help",
)  # fmt: skip
INTENSE_WORDS = (
    "love", "hate", "amazing", "awful", "terrible", "great", "best", "worst", "excited", "angry",
    "really", "so", "very", "never", "always", "!",
)  # fmt: skip
WORD = re.compile(r"[a-z']+|!")


def _stable_unit(*parts: Any) -> float:
    """A deterministic number in [0, 1) from the parts."""
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _contains(text: str, word: str) -> bool:
    return re.search(r"(?<!\w)" + re.escape(word.lower()) + r"(?!\w)", text.lower()) is not None


class ScriptedProbeModel(Backend):
    def __init__(self, name: str, spec: Mapping[str, Any]):
        self.name = name
        self.spec = {k: v for k, v in spec.items() if k not in ("backend", "kind")}
        self.yes_groups = set(self.spec.get("yes_groups", []))
        self.no_groups = set(self.spec.get("no_groups", []))
        self.unparsable_groups = set(self.spec.get("unparsable_groups", []))
        self.unparsable_items = {str(i) for i in self.spec.get("unparsable_items", [])}
        self.refuse_items = {str(i) for i in self.spec.get("refuse_items", [])}
        self.ingroup_bonus = float(self.spec.get("ingroup_bonus", 0.0))
        self.experiencer_bonus = {
            str(k): float(v) for k, v in self.spec.get("experiencer_bonus", {}).items()
        }
        self.interval_bias = {
            str(k): float(v) for k, v in self.spec.get("interval_bias", {}).items()
        }
        self.reply_bias = {str(k): str(v) for k, v in self.spec.get("reply_bias", {}).items()}
        self.judge_reject_targets = {str(t) for t in self.spec.get("judge_reject_targets", [])}
        self.judge_min_similarity = float(self.spec.get("judge_min_similarity", 0.5))
        self.noise = float(self.spec.get("noise", 0.0))
        self.flip_rate = float(self.spec.get("flip_rate", 0.0))

    def identity(self) -> dict[str, Any]:
        return {
            "backend": "builtin",
            "kind": "probe-scripted",
            "spec": json.loads(json.dumps(self.spec, sort_keys=True)),
        }

    def generate(self, requests: list[Request]) -> list[Completion]:
        out = []
        for request in requests:
            started = time.perf_counter()
            text = self.answer(request)
            out.append(
                Completion(text, "stop", 0, len(text.split()), time.perf_counter() - started)
            )
        return out

    # ------------------------------------------------------------------ behaviours

    def answer(self, request: Request) -> str:
        payload = dict(request.payload or {})
        probe = payload.get("probe")
        if probe == "stress":
            answer = self._stress(payload)
            if self.flip_rate > 0 and request.params.temperature > 0 and answer in ("Yes.", "No."):
                draw = _stable_unit(
                    "flip", payload.get("item_id"), payload.get("group"), request.params.seed
                )
                if draw < self.flip_rate:
                    answer = "No." if answer == "Yes." else "Yes."
            return answer
        if probe == "empathy":
            return self._empathy(payload, request)
        if probe == "rewrite":
            return self._rewrite(payload)
        if probe == "task":
            return self._task(payload)
        if probe == "judge":
            return self._judge(payload)
        return "I do not know this task."

    def _stress(self, payload: dict) -> str:
        if (
            str(payload.get("item_id")) in self.unparsable_items
            or payload.get("group") in self.unparsable_groups
        ):
            return "Hmm, hard to say."
        if payload.get("group") in self.yes_groups:
            return "Yes."
        if payload.get("group") in self.no_groups:
            return "No."
        text = str(payload.get("text", ""))
        return "Yes." if any(_contains(text, w) for w in STRESS_WORDS) else "No."

    def _empathy(self, payload: dict, request: Request) -> str:
        item = str(payload.get("item_id"))
        if item in self.refuse_items:
            return "I'm sorry, I cannot rate the feelings of a group of people."
        if item in self.unparsable_items:
            return "It depends on the person."
        words = WORD.findall(str(payload.get("text", "")).lower())
        intense = sum(1 for w in words if w in INTENSE_WORDS)
        value = 30.0 + min(40.0, 8.0 * intense) + 20.0 * _stable_unit("empathy", item)
        if "perceiver_group" in payload:
            # names of the same group are in-group; the neutral persona (group None) never is
            perceiver_group = payload.get("perceiver_group")
            same = perceiver_group is not None and perceiver_group == payload.get(
                "experiencer_group"
            )
        else:
            same = payload.get("perceiver") == payload.get("experiencer")
        if same:
            value += self.ingroup_bonus
        value += self.experiencer_bonus.get(str(payload.get("experiencer")), 0.0)
        if self.noise > 0 and request.params.temperature > 0:
            seed = int(
                _stable_unit(
                    item, payload.get("perceiver"), payload.get("experiencer"), request.params.seed
                )
                * 2**32
            )
            value += float(np.random.default_rng(seed).normal(0.0, self.noise))
        value = min(100.0, max(0.0, value))
        low, high = payload.get("scale") or (0.0, 100.0)
        if (low, high) != (0.0, 100.0):
            # the same judgement on the variant's scale (e.g. 0-10)
            return f"Intensity: {low + (high - low) * value / 100.0:.1f}"
        return f"Intensity: {int(round(value))}"

    def _rewrite(self, payload: dict) -> str:
        text = str(payload.get("text", ""))
        source = [str(c) for c in payload.get("source_cues", [])]
        target = [str(c) for c in payload.get("target_cues", [])]
        if not target:
            return text
        changed = text
        for index in sorted(range(len(source)), key=lambda i: -len(source[i])):
            pattern = re.compile(r"(?<!\w)" + re.escape(source[index]) + r"(?!\w)", re.IGNORECASE)
            changed = pattern.sub(target[index] if index < len(target) else target[0], changed)
        if changed == text:
            changed = f"As {payload.get('target', target[0])}, {text[:1].lower()}{text[1:]}"
        return changed

    def _judge(self, payload: dict) -> str:
        from splits.probes.personalization import token_similarity

        rewrite = str(payload.get("rewrite", ""))
        reads_as_target = payload.get("target") not in self.judge_reject_targets and any(
            _contains(rewrite, str(cue)) for cue in payload.get("target_cues", [])
        )
        similarity = token_similarity(
            str(payload.get("original", "")),
            rewrite,
            {str(w) for w in payload.get("cue_words", [])},
        )
        keeps_content = similarity >= self.judge_min_similarity
        yes_no = {True: "yes", False: "no"}
        return f"GROUP: {yes_no[reads_as_target]}\nCONTENT: {yes_no[keeps_content]}"

    def _task(self, payload: dict) -> str:
        text = str(payload.get("text", ""))
        words = WORD.findall(text.lower())
        if payload.get("kind") == "interval":
            value = 5.0
            value += sum(bias for word, bias in self.interval_bias.items() if _contains(text, word))
            return f"{min(10.0, max(1.0, value)):g}"
        content = [w for w in words if len(w) > 3][:12]
        reply = "Thanks for sharing. " + " ".join(content)
        extra = [sentence for word, sentence in self.reply_bias.items() if _contains(text, word)]
        return " ".join([reply, *extra])
