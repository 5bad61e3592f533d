"""What the API opens (a finished run, a local copy of the authors' data, any posts table) and
the pools it hands out. See ``splits.api`` for the calls."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from splits.api.settings import Settings
from splits.errors import ConfigError
from splits.hypotheses.engine import HypothesisEngine, QueryError
from splits.hypotheses.settings import (
    FightingWordsSection,
    FileSettings,
    LiftSettings,
    TrivialitySettings,
)

log = logging.getLogger(__name__)

POST_COLUMNS = ("post_id", "text", "demographic", "topic")
#: the topic of a posts table without a topic column: all its posts are one topic
ALL_POSTS = "all"


class Source:
    """Posts by topic and group, with the settings every call starts from. ``topics`` and
    ``groups`` list what a pool may name; ``hypotheses`` is the run's hypotheses table (None
    outside a finished run or before its hypotheses stage), read when first asked for."""

    def __init__(
        self,
        topic_posts: str | Path | pl.DataFrame | pl.LazyFrame,
        settings: Settings,
        hypotheses: Path | None = None,
        keep: Any = None,
    ):
        self.settings = settings
        self.engine = HypothesisEngine(topic_posts, settings.read(LiftSettings))
        self._hypotheses_path = hypotheses
        self._hypotheses: pl.DataFrame | None = None
        self._keep = keep  # a temporary folder the posts live in, removed with the source
        self._encoders: dict[str, Any] = {}
        self._identity: dict[tuple, dict] = {}

    @property
    def hypotheses(self) -> pl.DataFrame | None:
        if self._hypotheses is None and self._hypotheses_path is not None:
            self._hypotheses = pl.read_parquet(self._hypotheses_path)
        return self._hypotheses

    @property
    def topics(self) -> list[str]:
        return list(self.engine.topics)

    @property
    def groups(self) -> list[str]:
        return list(self.engine.demographics)

    def pool(self, topic: str, group_a: str, group_b: str) -> Pool:
        """The posts of two groups on a topic (posts listed under both groups left out, as in
        the lift job). A wrong name raises one line listing the valid ones."""
        try:
            self.engine.check(topic, (group_a, group_b))
        except QueryError as err:
            raise ConfigError(str(err)) from None
        return Pool(self, topic, *sorted((group_a, group_b)))

    def config(self, **overrides: Any) -> dict:
        """The validated config every call reads (schema defaults filled), with overrides."""
        return self.settings.config(**overrides)

    # ----------------------------------------------------------------- shared pieces

    def encoder(self, name: str, registry: Mapping[str, Any]):
        """The triviality encoder ``name`` (a registry entry or a Hugging Face id), loaded once."""
        from splits.hypotheses.triviality import load_encoder

        if name not in self._encoders:
            self._encoders[name] = load_encoder(name, registry)
        return self._encoders[name]

    def identity_words(self, path: str | None, demographics_file: str) -> dict:
        from splits.hypotheses.triviality import load_identity_words

        key = (path, demographics_file)
        if key not in self._identity:
            self._identity[key] = load_identity_words(path, demographics_file)
        return self._identity[key]


class Pool:
    """One (topic, pair) of a source: ``lift``, ``ranked``, ``triviality`` and
    ``fighting_words``, each a polars DataFrame. Keywords override any setting (names in
    ``splits.api.KEYWORDS``); what is not given comes from the source's config, and what that
    does not set from the schema."""

    def __init__(self, source: Source, topic: str, group_a: str, group_b: str):
        self.source = source
        self.topic = topic
        self.group_a = group_a
        self.group_b = group_b

    def __repr__(self) -> str:
        return f"Pool({self.topic!r}, {self.group_a!r}, {self.group_b!r})"

    def entries(self, lexicon: str | Sequence[str], **overrides: Any) -> list[str]:
        """Entries of a lexicon: a list as given (order and repeats kept, as the release's
        query keeps them), or a typed text (words, and phrases in double quotes) read as the
        sandbox reads it."""
        if isinstance(lexicon, str):
            from splits.sandbox.typed import parse_lexicon

            limits = self.source.settings.read(FileSettings, **overrides).limits
            try:
                return parse_lexicon(lexicon, limits)
            except QueryError as err:
                raise ConfigError(f"lexicon: {err}") from None
        return [str(entry) for entry in lexicon]

    def _target(self, target: str) -> str:
        if target not in (self.group_a, self.group_b):
            raise ConfigError(f"target {target!r} is neither {self.group_a!r} nor {self.group_b!r}")
        return target

    def posts(self) -> pl.DataFrame:
        """The pool's posts (post_id, group, text) in index order."""
        pool = self.source.engine.pool(self.topic, self.group_a, self.group_b).pool
        return pl.DataFrame(
            {
                "post_id": [str(p) for p in pool.post_ids],
                "group": np.where(pool.is_a, pool.group_a, pool.group_b).tolist(),
                "text": list(pool.texts),
            },
            schema={"post_id": pl.String, "group": pl.String, "text": pl.String},
        )

    def lift(
        self,
        lexicon: str | Sequence[str],
        target: str,
        ks: Sequence[float] | None = None,
        **settings: Any,
    ) -> pl.DataFrame:
        """lift@k of the lexicon for ``target`` at each k fraction of ``ks`` (default: the
        config's ``k_fractions``): the lift job's rows and columns (counts, lift, its interval,
        p, the null band, matching posts)."""
        if ks is not None:
            if "k_fractions" in settings:
                raise ConfigError("give ks or k_fractions, not both")
            settings["k_fractions"] = list(ks)
        entries = self.entries(lexicon, **settings)
        lift_settings = self.source.settings.read(LiftSettings, **settings)
        return _answer(
            self.source.engine.lift,
            entries,
            self.topic,
            self.group_a,
            self.group_b,
            self._target(target),
            lift_settings,
        )

    def ranked(
        self,
        lexicon: str | Sequence[str],
        top: int | None = None,
        padded: bool = True,
        **settings: Any,
    ) -> pl.DataFrame:
        """The lexicon's ranked list, as the lift reads it: rank, post_id, group, score (as
        shown; null for padding), padding, spans (matched character spans) and text; the first
        ``top`` posts (default: the whole list), without padding when ``padded`` is false."""
        entries = self.entries(lexicon, **settings)
        lift_settings = self.source.settings.read(LiftSettings, **settings)
        frame, _ = _answer(
            self.source.engine.ranked,
            entries,
            self.topic,
            self.group_a,
            self.group_b,
            top,
            padded,
            lift_settings,
        )
        return frame

    def triviality(self, lexicon: str | Sequence[str], target: str, **settings: Any):
        """Triviality of the lexicon for ``target`` (SubspaceBERTScore recall of the target's
        identity words; the config's ``encoder`` and identity words): one row with the score,
        the identity words the lexicon's entries hold, and the encoder."""
        from splits.hypotheses.triviality import require_identity_words

        entries = self.entries(lexicon, **settings)
        target = self._target(target)
        config = self.source.config(**settings)
        chosen = self.source.settings.read(TrivialitySettings, **settings)
        words = self.source.identity_words(
            config["hypotheses"]["identity_words"], config["demographics"]["file"]
        )
        require_identity_words(words, [target])
        encoder = self.source.encoder(chosen.encoder, config.get("models", {}))
        score, covered = _answer(
            self.source.engine.triviality, entries, target, words[target], encoder
        )
        return pl.DataFrame(
            {
                "target": [target],
                "lexicon": [entries],
                "triviality": [score],
                "identity_words_covered": [covered],
                "encoder": [chosen.encoder],
            },
            schema={
                "target": pl.String,
                "lexicon": pl.List(pl.String),
                "triviality": pl.Float64,
                "identity_words_covered": pl.List(pl.String),
                "encoder": pl.String,
            },
        )

    def fighting_words(self, **settings: Any) -> pl.DataFrame:
        """Fighting Words z-scores of the pool's n-grams (``hypotheses.fighting_words``
        settings): ngram, count_a, count_b (a is ``group_a``), prior (the pseudo-count) and z
        (positive: group A's), largest z first. The informative prior's background is what the
        two groups wrote on every topic of the source."""
        from splits.hypotheses.fighting_words import fighting_words_scores, fighting_words_table

        fw = self.source.settings.read(FightingWordsSection, **settings)
        posts = self.posts()
        texts_a = posts.filter(pl.col("group") == self.group_a)["text"].to_list()
        texts_b = posts.filter(pl.col("group") == self.group_b)["text"].to_list()
        background = (
            self.source.engine.texts((self.group_a, self.group_b))
            if fw.prior == "informative"
            else ()
        )
        # the section's every setting (cleaning, token pattern, tie rule included), as
        # `splits fighting-words` and the counting baseline read it
        result = fighting_words_scores(texts_a, texts_b, fw, background=background)
        return fighting_words_table(result)


def _answer(call, *args):
    """``call(*args)``, its QueryError (a wrong lexicon, topic or group) as a ConfigError: one
    line, as every user error of the package."""
    try:
        return call(*args)
    except QueryError as err:
        raise ConfigError(str(err)) from None


# --------------------------------------------------------------------------- opening


def _topic_posts_of(results: Path, config: dict) -> Path:
    release = (config.get("release_data") or {}).get("path")
    candidates = [results / "release_data" / "topic_posts.parquet"] if release else []
    candidates.append(results / "topics" / "topic_posts.parquet")
    for path in candidates:
        if path.is_file():
            return path
    raise ConfigError(
        f"{candidates[0]} does not exist: not a finished run's results folder (run snakemake "
        "first, or give the folder that holds topics/topic_posts.parquet)"
    )


def open_run(
    path: str | Path = "results", config: str | Path | Mapping | None = None, **settings: Any
) -> Source:
    """A finished run: ``path`` is its results folder (or the folder it ran in, holding
    ``results/``); ``config`` its config file (default: ``config/config.yaml`` beside the results
    folder, else the schema's defaults). Relative paths of the config are read from the folder
    the run ran in, as Snakemake read them."""
    path = Path(path)
    if not path.is_dir():
        raise ConfigError(f"{path} is not a folder (a run's results folder)")
    holds_posts = any(
        (path / part / "topic_posts.parquet").is_file() for part in ("topics", "release_data")
    )
    workdir = path.parent if holds_posts else path
    if config is None and (workdir / "config" / "config.yaml").is_file():
        config = workdir / "config" / "config.yaml"
    if config is None:
        log.warning("%s: no config/config.yaml beside the results: the schema's defaults", path)
    chosen = Settings(config, workdir, settings)
    validated = chosen.config()
    results = path if holds_posts else workdir / validated["outdir"]
    topic_posts = _topic_posts_of(results, validated)
    table = results / "hypotheses" / "lift.parquet"
    return Source(topic_posts, chosen, table if table.is_file() else None)


def open_posts(
    posts: str | Path | pl.DataFrame | pl.LazyFrame,
    config: str | Path | Mapping | None = None,
    **settings: Any,
) -> Source:
    """Any posts table (a Parquet, CSV or JSON Lines file, or a polars frame) with columns
    post_id, text, demographic and topic (without topic: one topic, ``all``). ``config``: a
    config file or mapping for the settings (default: the schema's defaults)."""
    if isinstance(posts, pl.DataFrame | pl.LazyFrame):
        frame = posts.lazy()
    else:
        path = Path(posts)
        if not path.is_file():
            raise ConfigError(f"posts table {path} does not exist")
        readers = {".parquet": pl.scan_parquet, ".csv": pl.scan_csv, ".jsonl": pl.scan_ndjson}
        reader = readers.get(path.suffix.lower())
        if reader is None:
            raise ConfigError(f"{path}: a posts table is .parquet, .csv or .jsonl")
        frame = reader(path)
    columns = frame.collect_schema().names()
    if "topic" not in columns:
        frame = frame.with_columns(pl.lit(ALL_POSTS).alias("topic"))
    missing = [c for c in POST_COLUMNS if c not in frame.collect_schema().names()]
    if missing:
        raise ConfigError(f"posts table: missing column(s) {', '.join(missing)}")
    return Source(frame, Settings(config, None, settings))


def open_release(
    dataset: str | Path,
    config: str | Path | Mapping | None = None,
    topics: Sequence[str] | None = None,
    groups: Sequence[str] | None = None,
    **settings: Any,
) -> Source:
    """A local copy of the authors' released data (``ecaplan/splits``: a ``save_to_disk``
    folder, a folder of Parquet or JSON Lines files, or the hub cache), its
    ``high_groupness_by_topic`` posts read as the release_data stage reads them (usernames
    hashed, never kept), into a temporary table removed with the source. ``topics`` and
    ``groups`` keep only those (default: the config's ``release_data`` choice, else all)."""
    from splits.privacy import resolve_salt
    from splits.release_data.load import topic_posts
    from splits.release_data.settings import ReleaseDataSettings

    chosen = Settings(config, None, settings)
    release = chosen.read(ReleaseDataSettings)
    salt, _ = resolve_salt(release.salt_env)
    folder = tempfile.TemporaryDirectory(prefix="splits-release-")
    out = Path(folder.name) / "topic_posts.parquet"
    topic_posts(
        dataset,
        out,
        salt,
        list(groups) if groups else release.demographics,
        list(topics) if topics else release.topics,
    )
    return Source(out, chosen, keep=folder)  # read a topic at a time, as a run's table
