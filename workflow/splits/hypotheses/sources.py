"""Where hypotheses come from: user files, the sample corpus, the TMs' theories, an LLM generator.

- **files**: YAML / CSV / JSONL (``splits.hypotheses.lexicon``), source ``user`` unless a row says
  otherwise (``known`` for literature lexicons);
- **sample** (the generated corpus only): the generator plants, per (demographic, topic), a set of
  marker phrases its members use on that topic (``synth_meta.json``). For every topic, pair and
  target this gives a ``planted`` hypothesis (the target's markers: a known true difference), two
  ``null`` ones (random words of the topic's posts that are not marker or identity words, and
  random stop words: usage independent of the group, so their p-values are uniform) and a
  ``trivial`` one (the target's identity words);
- **theories**: the theories a TM wrote in the evaluation. The builtin ``oracle-lexical`` TM states
  its words directly ("Group A (...) posts use words like: w1, w2, ..."), which become the
  lexicons; an LLM TM's free-text theory goes through a prompt to a registry model that answers
  with lexicons;
- **llm**: a registry model reads a seeded sample of both groups' posts on a topic and proposes
  lexicons, per (topic, pair).

LLM answers are a JSON list of ``{"target": "A" | "B", "lexicon": [...], "rationale": "..."}``;
anything else is counted under a reason, never guessed at. Every hypothesis then goes through the
same cleaning and deduplication (``Cleaner``).
"""

from __future__ import annotations

import itertools
import json
import logging
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from splits.errors import ConfigError
from splits.evaluation.common import load_template, one_line
from splits.hypotheses.lexicon import Cleaner, Limits, entry_tokens, stable_id
from splits.llm.base import Request, SamplingParams
from splits.text import STOP_WORDS

log = logging.getLogger(__name__)

NULL_WORDS = 10  # entries of a null lexicon
GENERATE_SLOTS = ("group_a", "group_b", "topic", "category", "posts_a", "posts_b", "n")
GENERATE_REQUIRED = ("group_a", "group_b", "topic", "posts_a", "posts_b")
THEORY_SLOTS = ("group_a", "group_b", "topic", "category", "theory")
THEORY_REQUIRED = ("group_a", "group_b", "topic", "theory")
MAX_PROMPT_POST_CHARS = 500
_ORACLE_LINE = re.compile(r"^Group ([AB]) \(.*\) posts use words like: (.*)$")


def pairs_of(demographics: Sequence[str]) -> list[tuple[str, str]]:
    """Unordered pairs of demographics, each alphabetical (as the dataset's pairs)."""
    return list(itertools.combinations(sorted(demographics), 2))


def seeded_rng(seed: int, *parts: str) -> np.random.Generator:
    """A generator of its own per (seed, parts): adding a topic or pair leaves others unchanged."""
    return np.random.default_rng([int(seed), int(stable_id(*parts), 16)])


# --------------------------------------------------------------------------- sample corpus


def sample_records(
    meta: Mapping[str, Any],
    topic_posts: pl.DataFrame,
    identity_words: Mapping[str, Sequence[str]],
    topics: Sequence[str],
    demographics: Sequence[str],
    seed: int,
) -> list[dict[str, Any]]:
    """Planted, null and trivial hypotheses of the sample corpus (see the module docstring)."""
    from splits.ingest.synth.vocab import MARKER_ADJECTIVES, MARKER_NOUNS

    planted = meta.get("demographics") or {}
    # the generator lists markers for every topic; only these topics carry the difference
    planted_topics = set(meta.get("planted_topics", topics))
    marker_tokens = set(MARKER_ADJECTIVES) | set(MARKER_NOUNS)
    identity_tokens = {
        t for words in identity_words.values() for w in words for t in entry_tokens(w)
    }
    records: list[dict[str, Any]] = []
    for topic in topics:
        texts = topic_posts.filter(pl.col("topic") == topic).get_column("text").fill_null("")
        vocabulary = sorted({t for text in texts.to_list() for t in entry_tokens(text)})
        content = [
            t
            for t in vocabulary
            if t not in marker_tokens
            and t not in identity_tokens
            and t not in STOP_WORDS
            and not t.isdigit()
        ]
        stop = [t for t in vocabulary if t in STOP_WORDS]
        for a, b in pairs_of(demographics):
            for target in (a, b):
                common = {"topic": topic, "demographic_A": a, "demographic_B": b, "target": target}
                stem = f"{topic}:{a}:{b}:{target}"
                markers = (planted.get(target) or {}).get("markers", {}).get(topic)
                if topic not in planted_topics:
                    markers = None
                if markers:
                    records.append(
                        {
                            **common,
                            "id": f"planted:{stem}",
                            "lexicon": list(markers),
                            "source": "planted",
                            "note": "marker phrases the generator planted for the target",
                        }
                    )
                rng = seeded_rng(seed, "null", topic, a, b, target)
                for kind, words in (("words", content), ("stop", stop)):
                    if len(words) >= NULL_WORDS:
                        chosen = sorted(rng.choice(words, size=NULL_WORDS, replace=False).tolist())
                        records.append(
                            {
                                **common,
                                "id": f"null-{kind}:{stem}",
                                "lexicon": chosen,
                                "source": "null",
                                "note": f"random {'stop ' if kind == 'stop' else ''}words "
                                "(no planted difference)",
                            }
                        )
                if identity_words.get(target):
                    records.append(
                        {
                            **common,
                            "id": f"trivial:{stem}",
                            "lexicon": list(identity_words[target]),
                            "source": "trivial",
                            "note": "the target's identity words",
                        }
                    )
    return records


# --------------------------------------------------------------------------- LLM answers


def parse_lexicon_reply(text: str) -> tuple[list[dict[str, Any]], Counter]:
    """The lexicon items of an LLM answer (a JSON list of objects, possibly inside a code fence
    or after some prose) and counts of what could not be read."""
    problems: Counter = Counter()
    start, end = text.find("["), text.rfind("]")
    if start < 0 or end <= start:
        problems["reply_without_json_list"] += 1
        return [], problems
    try:
        items = json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        problems["reply_not_json"] += 1
        return [], problems
    if not isinstance(items, list):
        problems["reply_not_json"] += 1
        return [], problems
    out = []
    for item in items:
        if not isinstance(item, Mapping):
            problems["item_not_an_object"] += 1
            continue
        target = str(item.get("target", "")).strip().upper().removeprefix("GROUP").strip()
        if target not in ("A", "B"):
            problems["item_target_not_a_or_b"] += 1
            continue
        lexicon = item.get("lexicon")
        if not isinstance(lexicon, list) or not all(isinstance(e, str) for e in lexicon):
            problems["item_lexicon_not_a_list_of_strings"] += 1
            continue
        out.append({"target": target, "lexicon": lexicon, "note": str(item.get("rationale") or "")})
    return out, problems


def _chat(prompt: str, params: SamplingParams) -> Request:
    return Request(messages=({"role": "user", "content": prompt},), params=params)


def sample_indices(count: int, size: int, rng: np.random.Generator) -> list[int]:
    if count <= size:
        return list(range(count))
    return sorted(rng.choice(count, size=size, replace=False).tolist())


def sample_posts(texts: Sequence[str], size: int, rng: np.random.Generator) -> list[str]:
    return [texts[i] for i in sample_indices(len(texts), size, rng)]


def generation_requests(
    topic_posts: pl.DataFrame,
    topics: Sequence[tuple[str, str]],
    demographics: Sequence[str],
    names: Mapping[str, str],
    template_path: str,
    posts_per_group: int,
    per_pool: int,
    params: SamplingParams,
    seed: int,
) -> tuple[list[Request], list[dict[str, str]]]:
    """One request per (topic, pair) whose pool has posts of both groups, and its context (with
    ``seen``: the ids of the posts the prompt shows)."""
    template = load_template(template_path, GENERATE_SLOTS, GENERATE_REQUIRED)
    requests, contexts = [], []
    for category, topic in topics:
        rows = topic_posts.filter(pl.col("topic") == topic)
        for a, b in pairs_of(demographics):
            posts, seen = {}, []
            for key in (a, b):
                group = rows.filter(pl.col("demographic") == key).sort("post_id")
                rng = seeded_rng(seed, "generate", topic, a, b, key)
                chosen = sample_indices(group.height, posts_per_group, rng)
                texts = group["text"].fill_null("").to_list()
                ids = group["post_id"].cast(pl.String).to_list()
                posts[key] = [texts[i] for i in chosen]
                seen += [ids[i] for i in chosen]
            if not posts[a] or not posts[b]:
                continue
            values = {
                "group_a": names.get(a, a),
                "group_b": names.get(b, b),
                "topic": topic,
                "category": category,
                "posts_a": _listed(posts[a]),
                "posts_b": _listed(posts[b]),
                "n": str(per_pool),
            }
            requests.append(_chat(template.render(values), params))
            contexts.append(
                {"topic": topic, "demographic_A": a, "demographic_B": b, "seen": sorted(seen)}
            )
    return requests, contexts


def _listed(posts: Sequence[str]) -> str:
    return "\n".join(f"{i + 1}. {one_line(p, MAX_PROMPT_POST_CHARS)}" for i, p in enumerate(posts))


def records_from_replies(
    replies: Sequence[str], contexts: Sequence[Mapping[str, str]], source: str, note: str = ""
) -> tuple[list[dict[str, Any]], Counter]:
    records, problems = [], Counter()
    for reply, context in zip(replies, contexts, strict=True):
        items, found = parse_lexicon_reply(reply)
        problems.update(found)
        for item in items:
            records.append(
                {
                    **context,
                    "target": item["target"],
                    "lexicon": item["lexicon"],
                    "source": source,
                    "note": item["note"] or note or context.get("note", ""),
                }
            )
    return records, problems


# --------------------------------------------------------------------------- theories


def oracle_records(theories: pl.DataFrame, rows: pl.DataFrame) -> tuple[list[dict], Counter]:
    """Lexicons stated by the builtin oracle-lexical TM, one per group line of each theory."""
    problems: Counter = Counter()
    records = []
    for row in _theory_rows(theories, rows).iter_rows(named=True):
        lines = [line for line in str(row["theory"] or "").splitlines() if line.strip()]
        if not lines:
            problems["empty_theory"] += 1
        for line in lines:
            match = _ORACLE_LINE.match(line.strip())
            if not match:
                problems["theory_line_not_in_oracle_format"] += 1
                continue
            records.append(
                {
                    "topic": row["description"],
                    "demographic_A": row["demographic_A"],
                    "demographic_B": row["demographic_B"],
                    "target": match.group(1),
                    "lexicon": [w.strip() for w in match.group(2).split(",")],
                    "source": "theory",
                    "note": f"{row['tm']} k={row['k']} row {row['eval_row']}",
                    "seen": _calibration_ids(row),
                }
            )
    return records, problems


def theory_requests(
    theories: pl.DataFrame,
    rows: pl.DataFrame,
    names: Mapping[str, str],
    template_path: str,
    params: SamplingParams,
) -> tuple[list[Request], list[dict[str, str]], Counter]:
    """One request per non-empty theory asking a model to restate it as lexicons."""
    template = load_template(template_path, THEORY_SLOTS, THEORY_REQUIRED)
    requests, contexts, problems = [], [], Counter()
    for row in _theory_rows(theories, rows).iter_rows(named=True):
        theory = "\n".join(
            line.strip() for line in str(row["theory"] or "").splitlines() if line.strip()
        )
        if not theory:
            problems["empty_theory"] += 1
            continue
        values = {
            "group_a": names.get(row["demographic_A"], row["demographic_A"]),
            "group_b": names.get(row["demographic_B"], row["demographic_B"]),
            "topic": row["description"],
            "category": row.get("category") or "",
            "theory": theory,
        }
        requests.append(_chat(template.render(values), params))
        contexts.append(
            {
                "topic": row["description"],
                "demographic_A": row["demographic_A"],
                "demographic_B": row["demographic_B"],
                "note": f"{row['tm']} k={row['k']} row {row['eval_row']}",
                "seen": _calibration_ids(row),
            }
        )
    return requests, contexts, problems


def _calibration_ids(row: Mapping[str, Any]) -> list[str]:
    """The posts the TM saw: the first k calibration posts of the row (``example_post_ids``;
    none where the rows lack the column)."""
    ids = row.get("example_post_ids") or []
    return [str(p) for p in ids[: int(row["k"])]]


def _theory_rows(theories: pl.DataFrame, rows: pl.DataFrame) -> pl.DataFrame:
    """Theories joined with their evaluation rows' topic and pair."""
    for name, frame, columns in (
        ("theories", theories, ("eval_row", "tm", "k", "theory")),
        ("rows", rows, ("eval_row", "description", "demographic_A", "demographic_B")),
    ):
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise ConfigError(f"hypotheses theories: {name} lack column(s) {', '.join(missing)}")
    keep = ["eval_row", "description", "demographic_A", "demographic_B"]
    keep += [c for c in ("category", "example_post_ids") if c in rows.columns]
    return theories.select("eval_row", "tm", "k", "theory").join(
        rows.select(keep), on="eval_row", how="inner"
    )


def clean_records(
    records: Sequence[Mapping[str, Any]],
    topics: Sequence[str],
    demographics: Sequence[str],
    limits: Limits,
    id_prefix: str,
    where: str,
    default_source: str = "user",
):
    """Cleaned hypotheses of ``records``; a ConfigError naming ``where`` when none is left."""
    cleaner = Cleaner(topics, demographics, limits, default_source=default_source)
    result = cleaner.add_all(records, id_prefix)
    if not result.hypotheses:
        raise ConfigError(
            f"{where}: no valid hypothesis among {len(records)} records "
            f"(skipped: {json.dumps(result.report()['skipped'], sort_keys=True)})"
        )
    return result
