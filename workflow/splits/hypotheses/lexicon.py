"""The hypothesis table: lexicon entries, reading hypothesis files, cleaning and deduplication.

A hypothesis is one row: ``hypothesis_id, topic, demographic_A, demographic_B, target, lexicon,
source, note``. ``demographic_A`` < ``demographic_B`` alphabetically (the order of the dataset's
pairs); ``target`` is one of the two keys (the group claimed to use the lexicon more); ``lexicon``
is a list of words and phrases; ``source`` says where it came from (``user``, ``llm``, ``theory``,
``known``, ``fighting-words`` for the counting baseline, and on the sample corpus ``planted``,
``null``, ``trivial``); ``note`` carries a
citation, a rationale or the theory line it came from.

Lexicon entries are matched on the retrieval tokens: lowercase runs of letters and digits (the
tokeniser of the BM25 topic splits, ``splits.text.words``) with stop words KEPT, because
lexical features often are function words ("finna", "he be", "y'all" -> "y", "all"). An entry of
one token is a term, an entry of several tokens a phrase (its tokens must occur consecutively).

Cleaning (every record is kept or counted under a reason): entries with no letter or digit and
entries longer than ``max_phrase_tokens`` tokens are dropped (counted per entry); repeated entries
(same tokens) are merged; a hypothesis is skipped when a field is missing, its topic or a group is
unknown, both groups are the same, the target is neither group, no entry is left, it has more than
``max_entries`` entries, or it repeats an earlier hypothesis (same topic, pair, target and entry
set).
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from splits.config.yamlfile import parse_yaml
from splits.errors import ConfigError
from splits.text import words

SOURCES = ("user", "llm", "theory", "known", "planted", "null", "trivial", "fighting-words")
SET_COLUMNS = [
    "hypothesis_id",
    "topic",
    "demographic_A",
    "demographic_B",
    "target",
    "lexicon",
    "source",
    "note",
]
#: the posts a hypothesis's source saw (a TM's calibration posts, the posts an LLM generator
#: read): its held-out lift leaves them out; optional when reading a set
SEEN_COLUMN = "seen_post_ids"
SET_SCHEMA = {
    "hypothesis_id": pl.String,
    "topic": pl.String,
    "demographic_A": pl.String,
    "demographic_B": pl.String,
    "target": pl.String,
    "lexicon": pl.List(pl.String),
    "source": pl.String,
    "note": pl.String,
    SEEN_COLUMN: pl.List(pl.String),
}
#: a record's ``demographic_B`` of "*" stands for every other demographic of the run
ALL_OTHERS = "*"


def entry_tokens(entry: str) -> tuple[str, ...]:
    """The retrieval tokens of one lexicon entry (lowercase letter/digit runs, stop words kept)."""
    return tuple(words(str(entry)))


def canonical_lexicon(lexicon: Iterable[str]) -> tuple[tuple[str, ...], ...]:
    """The lexicon as a sorted tuple of distinct token tuples (what the retrieval sees)."""
    # entry_tokens reads each entry as its text: the cache is keyed by the texts, so an entry
    # that is not hashable (a list from a hand-written query) needs no path of its own
    return _canonical(tuple(map(str, lexicon)))


@functools.lru_cache(maxsize=4096)
def _canonical(lexicon: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    # cached: the lift asks for a lexicon's form four times (its scores on the pool and on the
    # held-out half, and each ranking's seed), the word cutting of every entry each time
    return tuple(sorted({t for t in (entry_tokens(e) for e in lexicon) if t}))


def query_text(lexicon: Iterable[str]) -> str:
    """A canonical string of the query: entries' tokens, sorted, phrases quoted, joined by OR."""
    return " OR ".join('"' + " ".join(t) + '"' for t in canonical_lexicon(lexicon))


@dataclass(frozen=True)
class Limits:
    """Bounds on a lexicon (hypotheses.max_entries, hypotheses.max_phrase_tokens)."""

    max_entries: int
    max_phrase_tokens: int


@dataclass(frozen=True)
class Hypothesis:
    hypothesis_id: str
    topic: str
    demographic_a: str
    demographic_b: str
    target: str
    lexicon: tuple[str, ...]
    source: str
    note: str = ""
    seen: tuple[str, ...] = ()

    def key(self) -> tuple:
        """What makes two hypotheses the same claim."""
        return (
            self.topic,
            self.demographic_a,
            self.demographic_b,
            self.target,
            canonical_lexicon(self.lexicon),
        )


@dataclass
class Cleaned:
    """Hypotheses kept, and counts of what was dropped (by reason)."""

    hypotheses: list[Hypothesis] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    entries_dropped: Counter = field(default_factory=Counter)

    def report(self) -> dict[str, Any]:
        return {
            "kept": len(self.hypotheses),
            "skipped": dict(sorted(self.skipped.items())),
            "entries_dropped": dict(sorted(self.entries_dropped.items())),
        }


def stable_id(*parts: Any) -> str:
    """A short id from the parts (sha256; the same parts give the same id on every machine)."""
    text = json.dumps([str(p) for p in parts], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def _entries(value: Any) -> list[str] | None:
    """A lexicon value as a list of strings: a list, or one string of entries separated by ';'
    (or a JSON list written as a string, as CSV cells hold it); None when it is neither."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                return None
        else:
            return [part for part in text.split(";")]
    if isinstance(value, list | tuple) and all(isinstance(v, str | int | float) for v in value):
        return [str(v) for v in value]
    return None


def _strip_quotes(entry: str) -> str:
    return entry.strip().strip("\"'“”‘’").strip()


class Cleaner:
    """Cleans raw records (mappings) into hypotheses against the run's topics and demographics,
    keeping the first of repeated claims across everything it is given."""

    def __init__(
        self,
        topics: Iterable[str],
        demographics: Iterable[str],
        limits: Limits,
        default_source: str = "user",
    ):
        self.topics = set(topics)
        self.demographics = sorted(set(demographics))
        self.limits = limits
        self.default_source = default_source
        self.result = Cleaned()
        self._seen_keys: set[tuple] = set()
        self._seen_ids: set[str] = set()

    def add_all(self, records: Iterable[Mapping[str, Any]], id_prefix: str = "") -> Cleaned:
        for record in records:
            self.add(record, id_prefix)
        return self.result

    def add(self, record: Mapping[str, Any], id_prefix: str = "") -> Hypothesis | None:
        """Clean one record; returns the hypothesis or None (counted under its reason).
        A record with ``demographic_B: "*"`` expands to one hypothesis per other group."""
        if not isinstance(record, Mapping):
            self.result.skipped["not_a_mapping"] += 1
            return None
        if record.get("demographic_B") == ALL_OTHERS:
            first = None
            a = record.get("demographic_A")
            others = [d for d in self.demographics if d != a]
            if a not in self.demographics:
                self.result.skipped["unknown_demographic"] += 1
                return None
            for other in others:
                rid = record.get("id") or record.get("hypothesis_id")
                expanded = {
                    **record,
                    "demographic_B": other,
                    "id": f"{rid}-{other}" if rid else None,
                }
                out = self.add(expanded, id_prefix)
                first = first or out
            return first
        return self._add_one(record, id_prefix)

    def _skip(self, reason: str) -> None:
        self.result.skipped[reason] += 1

    def _add_one(self, record: Mapping[str, Any], id_prefix: str) -> Hypothesis | None:
        for name in ("topic", "demographic_A", "demographic_B", "target", "lexicon"):
            if record.get(name) in (None, ""):
                self._skip(f"missing_{name}")
                return None
        topic = str(record["topic"])
        a, b = str(record["demographic_A"]), str(record["demographic_B"])
        target = str(record["target"])
        if topic not in self.topics:
            self._skip("unknown_topic")
            return None
        if a not in self.demographics or b not in self.demographics:
            self._skip("unknown_demographic")
            return None
        if a == b:
            self._skip("same_group")
            return None
        if target in ("A", "B"):
            target = a if target == "A" else b
        if target not in (a, b):
            self._skip("target_not_in_pair")
            return None
        a, b = sorted((a, b))
        source = str(record.get("source") or self.default_source)
        if source not in SOURCES:
            self._skip("unknown_source")
            return None
        raw = _entries(record["lexicon"])
        if raw is None:
            self._skip("lexicon_not_a_list")
            return None
        lexicon: list[str] = []
        seen: set[tuple[str, ...]] = set()
        for entry in raw:
            text = _strip_quotes(entry)
            tokens = entry_tokens(text)
            if not tokens:
                self.result.entries_dropped["no_letters"] += 1
                continue
            if len(tokens) > self.limits.max_phrase_tokens:
                self.result.entries_dropped["phrase_too_long"] += 1
                continue
            if tokens in seen:
                self.result.entries_dropped["repeated"] += 1
                continue
            seen.add(tokens)
            lexicon.append(text)
        if not lexicon:
            self._skip("empty_lexicon")
            return None
        if len(lexicon) > self.limits.max_entries:
            self._skip("too_many_entries")
            return None
        note = record.get("note") or record.get("citation") or ""
        rid = record.get("id") or record.get("hypothesis_id")
        rid = str(rid) if rid not in (None, "") else stable_id(topic, a, b, target, lexicon)
        hypothesis_id = f"{id_prefix}{rid}"
        seen = tuple(str(p) for p in (record.get("seen") or ()))
        hypothesis = Hypothesis(
            hypothesis_id, topic, a, b, target, tuple(lexicon), source, str(note), seen
        )
        key = hypothesis.key()
        if key in self._seen_keys:
            self._skip("duplicate")
            return None
        if hypothesis_id in self._seen_ids:
            self._skip("duplicate_id")
            return None
        self._seen_keys.add(key)
        self._seen_ids.add(hypothesis_id)
        self.result.hypotheses.append(hypothesis)
        return hypothesis


# --------------------------------------------------------------------------- files


def read_records(path: str | Path) -> tuple[list[Any], Counter]:
    """Raw records of a hypothesis file (YAML list or ``{hypotheses: [...]}``, CSV with a header,
    or JSONL), and counts of unreadable lines (JSONL lines that are not JSON)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"hypotheses.files: {path} does not exist")
    suffix = path.suffix.lower()
    text = path.read_text(encoding="utf-8")
    unreadable: Counter = Counter()
    if suffix in (".yaml", ".yml"):
        data = parse_yaml(text, str(path))
        if isinstance(data, Mapping) and "hypotheses" in data:
            data = data["hypotheses"]
        if not isinstance(data, list):
            raise ConfigError(f"{path}: expected a list of hypotheses (or 'hypotheses: [...]')")
        return data, unreadable
    if suffix in (".jsonl", ".ndjson"):
        records = []
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                unreadable["not_json"] += 1
        return records, unreadable
    if suffix == ".csv":
        reader = csv.DictReader(io.StringIO(text))
        needed = {"topic", "demographic_A", "demographic_B", "target", "lexicon"}
        missing = needed - set(reader.fieldnames or [])
        if missing:
            raise ConfigError(f"{path}: missing CSV column(s) {', '.join(sorted(missing))}")
        return list(reader), unreadable
    raise ConfigError(f"{path}: unknown hypothesis file type {suffix!r} (.yaml, .csv, .jsonl)")


def hypotheses_frame(hypotheses: Sequence[Hypothesis]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "hypothesis_id": [h.hypothesis_id for h in hypotheses],
            "topic": [h.topic for h in hypotheses],
            "demographic_A": [h.demographic_a for h in hypotheses],
            "demographic_B": [h.demographic_b for h in hypotheses],
            "target": [h.target for h in hypotheses],
            "lexicon": [list(h.lexicon) for h in hypotheses],
            "source": [h.source for h in hypotheses],
            "note": [h.note for h in hypotheses],
            SEEN_COLUMN: [list(h.seen) for h in hypotheses],
        },
        schema=SET_SCHEMA,
    )


def frame_hypotheses(frame: pl.DataFrame) -> list[Hypothesis]:
    missing = [c for c in SET_COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(f"hypothesis set: missing column(s) {', '.join(missing)}")
    return [
        Hypothesis(
            r["hypothesis_id"],
            r["topic"],
            r["demographic_A"],
            r["demographic_B"],
            r["target"],
            tuple(r["lexicon"]),
            r["source"],
            r["note"] or "",
            tuple(r.get(SEEN_COLUMN) or ()),
        )
        for r in frame.select(
            SET_COLUMNS + ([SEEN_COLUMN] if SEEN_COLUMN in frame.columns else [])
        ).iter_rows(named=True)
    ]
