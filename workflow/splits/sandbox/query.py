"""What the sandbox page asks, without any web library (so it is tested without a browser).

A query is a typed lexicon, a topic, the target group and the group it is compared with. The
answer comes from the hypotheses stage's engine (``splits.hypotheses.engine``): the same pool,
ranking, seed and statistics as the lift job, so a query that is a hypothesis of the run gives
the numbers of ``results/hypotheses/lift.parquet``. Each pool's index is built on its first query
and kept.

A session is the queries one page has asked; its q-values are Benjamini-Hochberg over every
(query, k) of the session, recomputed after each query, as the run's table does over every
(hypothesis, k) of the run. Asking the same query again (same topic, groups, target and entry
tokens) replaces it instead of adding a test.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import polars as pl

from splits.config.schema import load_config
from splits.config.settings import settings_from_config
from splits.errors import ConfigError, InputError
from splits.filecheck import check_file, damage_of, damaged, is_data_error
from splits.hypotheses.engine import (
    TOP_POSTS,
    HypothesisEngine,
    QueryError,
    QueryResult,
    q_values,
)
from splits.hypotheses.lexicon import Limits, canonical_lexicon
from splits.hypotheses.settings import FileSettings, LiftSettings, ReportSettings
from splits.sandbox.typed import clean_text, format_lexicon, parse_lexicon, shown

NO_VALUE = "—"
#: the most queries one session keeps: its q-values count every query, so a full session takes
#: no more (a new page starts a new session); bounds the server's memory and the page's table
MAX_SESSION_QUERIES = 200
#: seconds a page's session is kept on the server after its last query (then it is dropped)
SESSION_TTL_S = 4 * 3600
#: sessions the server keeps at most (the oldest go first)
MAX_SESSIONS = 1000


def query_key(topic: str, group_a: str, group_b: str, target: str, lexicon) -> tuple:
    """What makes two queries the same test (the entry tokens, not their spelling)."""
    a, b = sorted((group_a, group_b))
    return (topic, a, b, target, canonical_lexicon(lexicon))


# --------------------------------------------------------------------------- settings and run


@dataclass(frozen=True)
class RunSettings:
    """The hypotheses settings of the run the sandbox serves (its config's ``hypotheses:`` and
    ``seed``, read as the lift and report jobs read them)."""

    lift: LiftSettings
    thresholds: tuple[float, ...]
    report_k: float
    limits: Limits

    @classmethod
    def from_config(cls, config: dict) -> RunSettings:
        report = settings_from_config(ReportSettings, config)
        return cls(
            settings_from_config(LiftSettings, config),
            report.triviality_thresholds,
            report.report_k,
            settings_from_config(FileSettings, config).limits,
        )


@dataclass
class Session:
    """The queries one page asked, in order (a repeated query moves to the end)."""

    results: dict[tuple, QueryResult] = field(default_factory=dict)

    def add(self, result: QueryResult) -> tuple:
        """Add a query (kept without its posts: the session needs its rows only)."""
        key = query_key(result.topic, result.group_a, result.group_b, result.target, result.lexicon)
        self.results.pop(key, None)
        self.results[key] = replace(result, posts=result.posts.clear())
        return key

    def q(self) -> dict[tuple, np.ndarray]:
        """BH q of every row of every query, per query."""
        keys = list(self.results)
        return dict(zip(keys, q_values([self.results[k] for k in keys]), strict=True))

    @property
    def tests(self) -> int:
        return sum(r.rows.height for r in self.results.values())


@dataclass
class Answer:
    """One query's answer: the engine's result, its rows' session q, the run's table rows of the
    same hypothesis (if the run has it) and notes to show beside the numbers."""

    result: QueryResult
    q: np.ndarray
    session_queries: int
    session_tests: int
    run_rows: pl.DataFrame | None = None
    notes: list[str] = field(default_factory=list)


STAGE_ALL = "all"
STAGE_SIGNIFICANT = "significant"
SORTS = {
    "q, smallest first": ("q_value", False),
    "lift, largest first": ("lift", True),
    "triviality, smallest first": ("triviality", False),
    "matching posts, most first": ("matching_posts", True),
}
LEXICON_CHARS = 120  # of a lexicon in the table view (the query view shows it whole)
TABLE_HEADERS = [
    "hypothesis",
    "source",
    "topic",
    "target",
    "compared with",
    "lexicon",
    "lift",
    "interval",
    "p",
    "q",
    "triviality",
    "matching posts",
]


def nontrivial_stage(threshold: float) -> str:
    return f"nontrivial_below_{threshold:g}"


class Sandbox:
    """The run the page serves: an engine over its topic posts, its hypotheses table (or None
    when the run has none), its settings and display names."""

    def __init__(
        self,
        engine: HypothesisEngine,
        settings: RunSettings,
        table: pl.DataFrame | None = None,
        names: dict[str, str] | None = None,
        notes: Sequence[str] = (),
        top_posts: int = TOP_POSTS,
    ):
        self.engine = engine
        self.settings = settings
        self.names = {d: d for d in engine.demographics} | dict(names or {})
        self.notes = list(notes)
        self.top_posts = top_posts
        self._lock = threading.Lock()  # the engine's pool cache is not thread-safe
        self.table = table
        #: the run's files the sandbox reads (checked again when a query fails reading them)
        self.run_files: list[Path] = []
        self._by_key: dict[tuple, list[str]] = {}
        self._by_id: dict[str, dict] = {}
        if table is not None and table.height:
            firsts = table.unique("hypothesis_id", keep="first", maintain_order=True)
            for row in firsts.iter_rows(named=True):
                key = query_key(
                    row["topic"],
                    row["demographic_A"],
                    row["demographic_B"],
                    row["target"],
                    row["lexicon"],
                )
                self._by_key.setdefault(key, []).append(row["hypothesis_id"])
                self._by_id[row["hypothesis_id"]] = row
            fractions = set(table["k_fraction"].to_list())
            if fractions != set(settings.lift.k_fractions):
                self.notes.append(
                    f"The run's table has k = {', '.join(f'{f:g}' for f in sorted(fractions))} "
                    f"but the config has {', '.join(f'{f:g}' for f in settings.lift.k_fractions)}: "
                    "the config changed after the run (re-run snakemake to compare)."
                )

    # ----------------------------------------------------------------- loading a run

    @classmethod
    def from_run(
        cls,
        results: str | Path,
        configfile: str | Path,
        encoder: str | None = None,
        top_posts: int = TOP_POSTS,
    ) -> Sandbox:
        """The run of ``configfile`` whose outputs are under ``results``. Relative paths of the
        config (the demographics file, identity words) are read from the current directory, as
        Snakemake does. ``encoder``: the triviality encoder (default: the config's
        ``hypotheses.encoder``; ``"none"``: no triviality)."""
        from splits.evaluation.common import display_names
        from splits.hypotheses.triviality import load_encoder, load_identity_words

        config = load_config(configfile)
        settings = RunSettings.from_config(config)
        results = Path(results)
        release_data = (config.get("release_data") or {}).get("path")
        topic_posts = (
            results / ("release_data" if release_data else "topics") / "topic_posts.parquet"
        )
        if not topic_posts.is_file():
            raise ConfigError(
                f"{topic_posts} does not exist: the sandbox serves a finished run "
                "(run snakemake first, or give --results)"
            )
        missing = {"post_id", "text", "demographic", "topic"} - set(
            read_run_file(topic_posts, pl.read_parquet_schema)
        )
        if missing:
            raise ConfigError(f"{topic_posts}: missing column(s) {', '.join(sorted(missing))}")
        notes = []
        table_path = results / "hypotheses" / "lift.parquet"
        table = read_run_file(table_path, pl.read_parquet) if table_path.is_file() else None
        if table is None:
            notes.append(
                f"No hypotheses table ({table_path} does not exist: hypotheses.enabled is false "
                "or the stage has not run); queries still work."
            )
        demographics_file = config["demographics"]["file"]
        words = load_identity_words(config["hypotheses"]["identity_words"], demographics_file)
        name = encoder or config["hypotheses"]["encoder"]
        loaded = None
        if name != "none":
            try:
                loaded = load_encoder(name, config.get("models", {}))
            except ConfigError as err:
                notes.append(f"Triviality is not computed: {err}")
        engine = read_run_file(
            topic_posts, lambda path: HypothesisEngine(path, settings.lift, words, loaded)
        )
        sandbox = cls(engine, settings, table, display_names(demographics_file), notes, top_posts)
        sandbox.run_files = [topic_posts] + ([table_path] if table is not None else [])
        return sandbox

    def damaged_file(self) -> InputError | None:
        """After a query failed with a data or OS error: the one-line error of the first of the
        run's files that is missing or does not read whole (naming it and the command that
        re-creates it), None when they all read (the failure is then not a file's)."""
        for path in self.run_files:
            if not path.exists():
                return damaged(path, "missing (removed after the sandbox started)")
            found = damage_of(path)
            if found is not None:
                return found
        return None

    # ----------------------------------------------------------------- the query view

    def ask(
        self,
        lexicon_text: str | None,
        topic: str | None,
        target: str | None,
        other: str | None,
        session: Session,
    ) -> Answer:
        """Answer one query and add it to ``session``. Raises ``QueryError`` (one line) for bad
        input: an empty or unreadable lexicon, a missing or unknown topic or group."""
        lexicon = parse_lexicon(lexicon_text, self.settings.limits)
        topic, target, other = (clean_text(v).strip() or None for v in (topic, target, other))
        if not topic:
            raise QueryError("choose a topic")
        if not target or not other:
            raise QueryError("choose the target group and the group it is compared with")
        if target == other:
            raise QueryError("the target group and the group it is compared with must differ")
        for name, value, known in (
            ("topic", topic, self.engine.topics),
            ("group", target, self.engine.demographics),
            ("group", other, self.engine.demographics),
        ):
            if value not in known:  # quoted back short (the engine would quote it whole)
                raise QueryError(f"unknown {name} {shown(value)!r}")
        key = query_key(topic, target, other, target, lexicon)
        if key not in session.results and len(session.results) >= MAX_SESSION_QUERIES:
            raise QueryError(
                f"this session has asked {len(session.results)} queries, the most one session "
                "keeps (its q-values count every query); reload the page to start a new session"
            )
        a, b = sorted((target, other))
        with self._lock:
            result = self.engine.query(lexicon, topic, a, b, target, self.top_posts)
        key = session.add(result)
        answer = Answer(result, session.q()[key], len(session.results), session.tests)
        if not result.rows.height:
            answer.notes.append(
                "No lift: the ranked list holds no post of the target group at any k "
                "(hypotheses.list_size cuts it before them)."
            )
        if self.engine.encoder is not None and not self.engine.identity_words.get(target):
            answer.notes.append(
                f"No triviality: no identity words for {target} "
                "(identity_words in the demographics file, or hypotheses.identity_words)."
            )
        ids = self._by_key.get(key, [])
        if ids and self.table is not None:
            answer.run_rows = self.table.filter(pl.col("hypothesis_id") == ids[0]).sort(
                "k_fraction"
            )
            if len(ids) > 1:
                answer.notes.append(
                    f"The run has this hypothesis {len(ids)} times: {', '.join(ids)}."
                )
            held_out_only = answer.run_rows["lift"].is_null().all()
            differs = "" if held_out_only else _differs(result.rows, answer.run_rows)
            if held_out_only:
                answer.notes.append(
                    f"The run scores this hypothesis ({ids[0]}, the counting baseline) on its "
                    "pool's held-out half only (heldout_* columns): its lexicon was read from the "
                    "other half, which the numbers here count."
                )
            if differs:
                answer.notes.append(
                    f"The run's table gives other numbers for this hypothesis ({ids[0]}: "
                    f"{differs}): the config (seed, k_fractions, list_size, alpha) or the topic "
                    "posts changed after the run; re-run snakemake."
                )
        return answer

    # ----------------------------------------------------------------- the table view

    def choices(self) -> dict[str, list]:
        """Filter choices of the table view: topics, pairs and sources of the table."""
        if self.table is None or not self.table.height:
            return {"topics": [], "pairs": [], "sources": []}
        pairs = self.table.select("demographic_A", "demographic_B").unique().sort(pl.all())
        return {
            "topics": sorted(self.table["topic"].unique().to_list()),
            "pairs": [f"{a} / {b}" for a, b in pairs.rows()],
            "sources": sorted(self.table["source"].unique().to_list()),
        }

    def stages(self) -> list[tuple[str, str]]:
        """(label, value) of the stage filter."""
        alpha = self.settings.lift.alpha
        out = [
            ("all hypotheses", STAGE_ALL),
            (f"significant (q < {alpha:g})", STAGE_SIGNIFICANT),
        ]
        for t in self.settings.thresholds:
            out.append((f"significant and non-trivial (triviality < {t:g})", nontrivial_stage(t)))
        return out

    def table_view(
        self,
        k: float,
        stage: str = STAGE_ALL,
        topic: str | None = None,
        pair: str | None = None,
        source: str | None = None,
        sort: str = next(iter(SORTS)),
        limit: int = 500,
    ) -> tuple[pl.DataFrame, int]:
        """The table's rows at k fraction ``k`` passing the filters (None or "" for any topic,
        pair, source), sorted, the first ``limit`` of them; and how many passed."""
        if self.table is None:
            return pl.DataFrame(schema=dict.fromkeys(TABLE_HEADERS, pl.String)), 0
        alpha = self.settings.lift.alpha
        rows = self.table.filter((pl.col("k_fraction") - k).abs() < 1e-12)
        if stage == STAGE_SIGNIFICANT:
            rows = rows.filter(pl.col("q_value") < alpha)
        elif stage != STAGE_ALL:
            threshold = next(
                (t for t in self.settings.thresholds if nontrivial_stage(t) == stage), None
            )
            if threshold is None:
                raise QueryError(f"unknown stage {stage!r}")
            rows = rows.filter((pl.col("q_value") < alpha) & (pl.col("triviality") < threshold))
        if topic:
            rows = rows.filter(pl.col("topic") == topic)
        if pair:
            a, _, b = pair.partition(" / ")
            rows = rows.filter((pl.col("demographic_A") == a) & (pl.col("demographic_B") == b))
        if source:
            rows = rows.filter(pl.col("source") == source)
        column, descending = SORTS.get(sort, next(iter(SORTS.values())))
        rows = rows.sort([column, "hypothesis_id"], descending=[descending, False], nulls_last=True)
        total = rows.height
        shown = rows.head(limit).select(
            pl.col("hypothesis_id").alias("hypothesis"),
            "source",
            "topic",
            "target",
            pl.when(pl.col("target") == pl.col("demographic_A"))
            .then(pl.col("demographic_B"))
            .otherwise(pl.col("demographic_A"))
            .alias("compared with"),
            pl.col("lexicon").list.join("; ").str.slice(0, LEXICON_CHARS).alias("lexicon"),
            pl.col("lift").round_sig_figs(4),
            pl.format(
                "[{}, {}]",
                pl.col("lift_low").round_sig_figs(3),
                pl.col("lift_high").round_sig_figs(3),
            ).alias("interval"),
            pl.col("p_value").round_sig_figs(3).alias("p"),
            pl.col("q_value").round_sig_figs(3).alias("q"),
            pl.col("triviality").round_sig_figs(3),
            pl.col("matching_posts").alias("matching posts"),
        )
        return shown, total

    def hypothesis(self, hypothesis_id: str) -> tuple[str, str, str, str]:
        """(lexicon text, topic, target, compared-with group) of a table row, for the query
        view."""
        row = self._by_id.get(hypothesis_id)
        if row is None:
            raise QueryError(f"unknown hypothesis {shown(clean_text(hypothesis_id))!r}")
        other = (
            row["demographic_B"] if row["target"] == row["demographic_A"] else row["demographic_A"]
        )
        return format_lexicon(row["lexicon"]), row["topic"], row["target"], other


def read_run_file(path: Path, read):
    """``read(path)`` of one of the run's files after the footer check of
    ``splits.filecheck.check_file``; a file that fails while it is read (damaged past its footer)
    raises ``InputError`` with one line naming it and the command that re-creates it."""
    check_file(path)
    try:
        return read(path)
    except Exception as err:
        if not is_data_error(err):
            raise
        found = damage_of(path)
        raise found or damaged(path, f"damaged file ({' '.join(str(err).split())[:200]})") from None


def _differs(mine: pl.DataFrame, run: pl.DataFrame) -> str:
    """'' when the query's rows equal the run's (same k, n, hits, lift, p); else a short
    description of the first difference."""
    run_k = dict(zip(run["k_fraction"].to_list(), run.iter_rows(named=True), strict=True))
    if sorted(run_k) != mine["k_fraction"].to_list():
        return "other k fractions"
    for row in mine.iter_rows(named=True):
        theirs = run_k[row["k_fraction"]]
        same = (row["n"], row["hits_at_n"], row["target_in_list"], row["list_size"]) == (
            theirs["n"],
            theirs["hits_at_n"],
            theirs["target_in_list"],
            theirs["list_size"],
        ) and np.allclose(
            [row["lift"], row["p_value"]], [theirs["lift"], theirs["p_value"]], rtol=1e-9
        )
        if not same:
            return (
                f"lift@{row['k_fraction']:g} {theirs['lift']:.3f} in the run, "
                f"{row['lift']:.3f} here"
            )
    return ""
