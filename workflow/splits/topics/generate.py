"""Neutral topic lists: generation through the LLM layer (``splits generate-topics``).

As in the paper, three prompt stages: broad categories, then topics per category, then keyword
phrases per topic. Every answer is read as one item per line (bullets, numbering and surrounding
quotes stripped). Validation: items are deduplicated case-insensitively (a topic already listed
under an earlier category is dropped, and counted), a category or topic whose answer yields no item
is an error naming it, and the final list goes through ``splits.config.definitions.validate_topics`` (no
duplicate topics, no empty keyword lists). The output is our YAML format
(``topics: [{category, topic, keywords}]``), readable by ``splits.config.definitions.load_topics``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path

import yaml

from splits.config.definitions import Topic, validate_topics
from splits.config.schema import PACKAGE_DATA
from splits.errors import ConfigError
from splits.topics.settings import GenerateTopicsSettings

log = logging.getLogger(__name__)

PROMPT_DIR = PACKAGE_DATA / "resources" / "prompts"
PROMPT_FILES = {
    "categories": PROMPT_DIR / "generate_topics_categories.txt",
    "topics": PROMPT_DIR / "generate_topics_topics.txt",
    "keywords": PROMPT_DIR / "generate_topics_keywords.txt",
}
_BULLET = re.compile(r"^\s*(?:[-*\u2022]+|\(?\d+[.):]|[a-zA-Z][.)])\s*")


class TopicGenerationError(ValueError):
    """The model's answers cannot make a valid topic list; the message names the stage and item."""


#: topic lists are generated greedily (the same answers on every run of a deterministic engine)
TEMPERATURE = 0.0


def parse_items(text: str) -> list[str]:
    """One item per non-empty line; bullets, numbering, quotes and trailing commas stripped."""
    items = []
    for line in text.splitlines():
        item = _BULLET.sub("", line).strip()
        previous = None
        while item != previous:  # quotes and trailing punctuation, in any nesting
            previous = item
            item = item.strip().strip("\"'`").rstrip(",;.")
        if item and not item.endswith(":"):
            items.append(item)
    return items


def dedupe(items: Sequence[str], limit: int | None = None) -> list[str]:
    seen: set[str] = set()
    out = []
    for item in items:
        key = item.casefold()
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out[:limit] if limit else out


def load_prompts(paths: dict[str, Path] | None = None) -> dict[str, str]:
    paths = paths or PROMPT_FILES
    prompts = {}
    for stage, path in paths.items():
        if not Path(path).exists():
            raise ConfigError(f"topics prompt {path} does not exist")
        prompts[stage] = Path(path).read_text(encoding="utf-8")
    return prompts


def generate_topics(
    model,
    prompts: dict[str, str],
    settings: GenerateTopicsSettings,
) -> list[Topic]:
    """Categories -> topics -> keywords through ``model.generate`` (a ``splits.llm.Model``);
    ``settings.categories`` (if set) skips the category prompt."""
    from splits.llm import Request, SamplingParams

    sampling = SamplingParams(
        temperature=TEMPERATURE, max_tokens=settings.max_tokens, seed=settings.seed
    )
    categories = settings.categories

    def ask(template: str, **slots: object) -> Request:
        content = template.format(**slots)
        return Request(
            messages=({"role": "user", "content": content},), params=sampling, payload=dict(slots)
        )

    if categories is None:
        answer = model.generate([ask(prompts["categories"], n_categories=settings.n_categories)])[0]
        categories = dedupe(parse_items(answer.text), settings.n_categories)
        if not categories:
            raise TopicGenerationError("categories: the model's answer lists no category")
    categories = dedupe(categories)
    answers = model.generate(
        [ask(prompts["topics"], category=c, n_topics=settings.n_topics) for c in categories]
    )
    seen_topics: set[str] = set()
    pairs: list[tuple[str, str]] = []
    dropped = 0
    for category, answer in zip(categories, answers, strict=True):
        topics = dedupe(parse_items(answer.text), settings.n_topics)
        if not topics:
            raise TopicGenerationError(f"category {category!r}: the model's answer lists no topic")
        for topic in topics:
            if topic.casefold() in seen_topics:
                dropped += 1
                continue
            seen_topics.add(topic.casefold())
            pairs.append((category, topic))
    if dropped:
        log.warning("dropped %d topics already listed under an earlier category", dropped)
    answers = model.generate(
        [
            ask(prompts["keywords"], category=c, topic=t, n_keywords=settings.n_keywords)
            for c, t in pairs
        ]
    )
    out = []
    for (category, topic), answer in zip(pairs, answers, strict=True):
        keywords = dedupe(parse_items(answer.text), settings.n_keywords)
        if not keywords:
            raise TopicGenerationError(f"topic {topic!r}: the model's answer lists no keyword")
        out.append(Topic(category, topic, tuple(keywords)))
    try:
        return validate_topics(out, "generated topics")
    except ConfigError as err:
        raise TopicGenerationError(str(err)) from err


def topics_yaml(topics: Sequence[Topic], header: str = "") -> str:
    body = yaml.safe_dump(
        {
            "topics": [
                {"category": t.category, "topic": t.topic, "keywords": list(t.keywords)}
                for t in topics
            ]
        },
        sort_keys=False,
        allow_unicode=True,
        width=100,
    )
    return "".join(f"# {line}\n" for line in header.splitlines()) + body
