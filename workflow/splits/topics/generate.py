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

import argparse
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from splits.config.definitions import Topic, validate_topics
from splits.config.schema import PACKAGE_DATA, load_config
from splits.errors import ConfigError
from splits.io import write_text

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


@dataclass(frozen=True)
class GenerationParams:
    n_categories: int = 10
    n_topics: int = 20
    n_keywords: int = 40
    max_tokens: int = 1024
    temperature: float = 0.0
    seed: int = 0


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
    params: GenerationParams,
    categories: Sequence[str] | None = None,
) -> list[Topic]:
    """Categories -> topics -> keywords through ``model.generate`` (a ``splits.llm.Model``)."""
    from splits.llm import Request, SamplingParams

    sampling = SamplingParams(
        temperature=params.temperature, max_tokens=params.max_tokens, seed=params.seed
    )

    def ask(template: str, **slots: object) -> Request:
        content = template.format(**slots)
        return Request(
            messages=({"role": "user", "content": content},), params=sampling, payload=dict(slots)
        )

    if categories is None:
        answer = model.generate([ask(prompts["categories"], n_categories=params.n_categories)])[0]
        categories = dedupe(parse_items(answer.text), params.n_categories)
        if not categories:
            raise TopicGenerationError("categories: the model's answer lists no category")
    categories = dedupe(categories)
    answers = model.generate(
        [ask(prompts["topics"], category=c, n_topics=params.n_topics) for c in categories]
    )
    seen_topics: set[str] = set()
    pairs: list[tuple[str, str]] = []
    dropped = 0
    for category, answer in zip(categories, answers, strict=True):
        topics = dedupe(parse_items(answer.text), params.n_topics)
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
            ask(prompts["keywords"], category=c, topic=t, n_keywords=params.n_keywords)
            for c, t in pairs
        ]
    )
    out = []
    for (category, topic), answer in zip(pairs, answers, strict=True):
        keywords = dedupe(parse_items(answer.text), params.n_keywords)
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


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", default="config/config.yaml", help="config file (for the model registry)"
    )
    parser.add_argument(
        "--model-spec", help="JSON registry {name: spec} used instead of --config's"
    )
    parser.add_argument("--model", required=True, help="registry model name")
    parser.add_argument("--cache", help="LLM response cache (SQLite)")
    parser.add_argument(
        "--categories", nargs="+", help="fixed categories (skip the category stage)"
    )
    parser.add_argument(
        "--n-categories", type=int, default=10, help="categories asked of the model"
    )
    parser.add_argument("--n-topics", type=int, default=20, help="topics per category")
    parser.add_argument("--n-keywords", type=int, default=40, help="keyword phrases per topic")
    parser.add_argument(
        "--max-tokens", type=int, default=1024, help="most tokens generated per answer"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the model's sampling")
    parser.add_argument(
        "--prompt-categories",
        default=str(PROMPT_FILES["categories"]),
        help="prompt template that asks for the categories",
    )
    parser.add_argument(
        "--prompt-topics",
        default=str(PROMPT_FILES["topics"]),
        help="prompt template that asks for the topics of a category",
    )
    parser.add_argument(
        "--prompt-keywords",
        default=str(PROMPT_FILES["keywords"]),
        help="prompt template that asks for a topic's keywords",
    )
    parser.add_argument("--out", required=True, help="output topic list (our YAML)")


def run(args: argparse.Namespace) -> int:
    from splits.llm import load_model

    for key in ("n_categories", "n_topics", "n_keywords"):
        if getattr(args, key) < 1:
            raise ConfigError(f"topics.generate.{key}: must be at least 1")
    if args.model_spec:
        try:
            registry = json.loads(args.model_spec)
        except json.JSONDecodeError as err:
            raise ConfigError(f"--model-spec: not valid JSON ({err})") from err
    else:
        registry = load_config(args.config)["models"]
    model = load_model(args.model, registry, cache_path=args.cache)
    prompts = load_prompts(
        {
            "categories": Path(args.prompt_categories),
            "topics": Path(args.prompt_topics),
            "keywords": Path(args.prompt_keywords),
        }
    )
    params = GenerationParams(
        n_categories=args.n_categories,
        n_topics=args.n_topics,
        n_keywords=args.n_keywords,
        max_tokens=args.max_tokens,
        seed=args.seed,
    )
    try:
        topics = generate_topics(model, prompts, params, args.categories)
    except TopicGenerationError as err:
        log.error("topic generation failed: %s", err)
        return 1
    header = f"Generated by `splits generate-topics` with model {args.model!r}."
    write_text(topics_yaml(topics, header), args.out)
    log.info(
        "%d topics in %d categories written to %s",
        len(topics),
        len({t.category for t in topics}),
        args.out,
    )
    return 0
