"""Theory models a researcher brings (docs/method.md §2.8: any method may implement the TM).

Two registry backends, usable as TMs of any evaluation experiment:

- ``precomputed``: a file of theories written by the researcher's own method,
  ``{backend: precomputed, theories: path}``. Parquet, CSV or JSON lines (by suffix) with the
  columns ``quadruplet_id`` and ``theory`` and, optionally, ``k``: with ``k`` the file holds one
  theory per (row, k) and each k an experiment asks for must be there; without it one theory per
  row serves every k. Every evaluation row must have its theory: missing rows are a one-line
  error naming them (and how many), as are duplicated rows and null theories; rows the
  experiment does not use are ignored (and counted in the log). The file is streamed, keeping
  only the evaluation rows, so memory grows with them, not with the file.
- ``python``: a Python callable, ``{backend: python, function: "package.module:function"}`` (or
  ``"path/to/file.py:function"``, or ``entry_point: name`` in the entry-point group
  ``splits.theory_models``), called once per (row, k) with the inputs an LLM TM gets, as keyword
  arguments: ``group_a``, ``group_b`` (display names), ``topic``, ``category``, ``posts`` (the
  first k calibration posts, each cut to ``evaluation.max_post_chars`` characters and put on one
  line, as an LLM TM's prompt lists them) and ``k``, plus the spec's ``kwargs``; a function that
  does not take ``**kwargs`` gets only the arguments it names. It returns the theory (a string).
  It runs like an LLM: one batch job per model fills its response cache, one answer committed at
  a time, so a job killed half way repeats no finished call. The cache knows the function by its
  path (and, for a ``.py`` file, the file's content; for an entry point, its distribution's
  version), ``kwargs`` and ``version``: bump ``version`` when a change elsewhere changes what it
  returns.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import logging
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from splits.errors import ConfigError
from splits.llm.base import Backend, Completion, LLMError, Request

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "splits.theory_models"
#: what a python TM receives (besides the spec's kwargs)
CALLABLE_INPUTS = ("group_a", "group_b", "topic", "category", "posts", "k")
PRECOMPUTED_SUFFIXES = (".parquet", ".csv", ".jsonl", ".ndjson")
#: evaluation rows named in a missing-rows error
NAMED_ROWS = 5

# --------------------------------------------------------------------------- precomputed


def _scan(path: Path, where: str) -> pl.LazyFrame:
    suffix = path.suffix.lower()
    strings = {"quadruplet_id": pl.String, "theory": pl.String}
    if suffix == ".parquet":
        return pl.scan_parquet(path)
    if suffix == ".csv":
        return pl.scan_csv(path, schema_overrides=strings)
    if suffix in (".jsonl", ".ndjson"):
        return pl.scan_ndjson(path, schema_overrides=strings)
    raise ConfigError(
        f"{where}: {path.name} is not {', '.join(PRECOMPUTED_SUFFIXES)} (by its suffix)"
    )


def _named(ids: list[str]) -> str:
    shown = ", ".join(ids[:NAMED_ROWS])
    return shown + (", ..." if len(ids) > NAMED_ROWS else "")


def precomputed_theories(path: str | Path, rows: pl.DataFrame, k: int, name: str) -> pl.DataFrame:
    """The theories of ``rows`` at calibration size ``k`` from a precomputed file, as
    ``quadruplet_id, theory`` in the order of ``rows``; ConfigError (one line) when the file
    lacks a row, repeats one, or has a null theory."""
    where = f"models.{name}.theories"
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{where}: {path} does not exist")
    try:
        frame = _scan(path, where)
        columns = frame.collect_schema()
    except (pl.exceptions.PolarsError, OSError) as err:
        raise ConfigError(f"{where}: cannot read {path} ({str(err).splitlines()[0]})") from err
    missing_columns = [c for c in ("quadruplet_id", "theory") if c not in columns]
    if missing_columns:
        raise ConfigError(
            f"{where}: {path} lacks the column(s) {', '.join(missing_columns)} "
            "(needs quadruplet_id, theory and optionally k)"
        )
    has_k = "k" in columns
    ids = rows.select(pl.col("quadruplet_id").cast(pl.String))
    selected = frame.select(
        pl.col("quadruplet_id").cast(pl.String),
        pl.col("theory").cast(pl.String),
        *([pl.col("k").cast(pl.Int64, strict=False)] if has_k else []),
    )
    if has_k:
        selected = selected.filter(pl.col("k") == k)
    wanted = ids["quadruplet_id"].implode()
    try:
        # the streaming engine keeps only the wanted rows of each batch it reads
        kept = selected.filter(pl.col("quadruplet_id").is_in(wanted)).collect(engine="streaming")
        total = selected.select(pl.len()).collect(engine="streaming").item()
    except pl.exceptions.PolarsError as err:
        raise ConfigError(f"{where}: cannot read {path} ({str(err).splitlines()[0]})") from err
    at_k = f" at k={k}" if has_k else ""
    duplicated = kept.filter(pl.col("quadruplet_id").is_duplicated())["quadruplet_id"]
    if duplicated.len():
        raise ConfigError(
            f"{where}: {path} has {duplicated.n_unique()} rows more than once{at_k} "
            f"({_named(sorted(duplicated.unique().to_list()))})"
        )
    null = kept.filter(pl.col("theory").is_null())["quadruplet_id"].to_list()
    if null:
        raise ConfigError(
            f"{where}: {path} has a null theory for {len(null)} rows ({_named(null)})"
        )
    found = set(kept["quadruplet_id"].to_list())
    lacking = [q for q in ids["quadruplet_id"].to_list() if q not in found]
    if lacking:
        raise ConfigError(
            f"{where}: {path} lacks {len(lacking)} of {rows.height} evaluation rows{at_k} "
            f"({_named(lacking)})"
        )
    if total > kept.height:
        log.info(
            "%s: %d theories of rows outside this evaluation ignored", path, total - kept.height
        )
    return ids.join(kept.select("quadruplet_id", "theory"), on="quadruplet_id", how="left")


# --------------------------------------------------------------------------- python callables


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _split_target(target: str, where: str) -> tuple[str, str]:
    module, sep, attribute = str(target).rpartition(":")
    if not sep or not module or not attribute:
        raise ConfigError(f"{where}: {target!r} is not 'module:function' or 'file.py:function'")
    return module, attribute


def _entry_point(name: str, where: str) -> importlib.metadata.EntryPoint:
    found = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=name))
    if not found:
        known = sorted(ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
        raise ConfigError(
            f"{where}: no entry point {name!r} in group {ENTRY_POINT_GROUP} "
            f"(installed: {', '.join(known) or 'none'})"
        )
    return found[0]


def python_identity(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The cache identity of a python TM, known without importing it."""
    identity: dict[str, Any] = {
        "backend": "python",
        "kwargs": dict(spec.get("kwargs") or {}),
        "version": spec.get("version"),
    }
    if spec.get("entry_point"):
        entry = _entry_point(str(spec["entry_point"]), f"models.{name}.entry_point")
        identity["entry_point"] = entry.value
        dist = getattr(entry, "dist", None)
        if dist is not None:
            identity["distribution"] = f"{dist.metadata['Name']}=={dist.version}"
        return identity
    module, attribute = _split_target(spec["function"], f"models.{name}.function")
    identity["function"] = f"{module}:{attribute}"
    if module.endswith(".py"):
        path = Path(module)
        if not path.is_file():
            raise ConfigError(f"models.{name}.function: file {module} does not exist")
        identity["source_sha256"] = _file_sha256(path)
    return identity


def _load_attribute(module: Any, attribute: str, where: str) -> Any:
    value = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError as err:
            raise ConfigError(f"{where}: {module.__name__} has no attribute {attribute!r}") from err
    return value


def load_callable(name: str, spec: Mapping[str, Any]) -> tuple[Callable[..., Any], str]:
    """(the function of a python TM spec, how it is named in messages)."""
    if spec.get("entry_point"):
        where = f"models.{name}.entry_point"
        entry = _entry_point(str(spec["entry_point"]), where)
        try:
            function = entry.load()
        except Exception as err:
            raise ConfigError(
                f"{where}: cannot load {entry.value} ({type(err).__name__}: {err})"
            ) from err
        target = entry.value
    else:
        where = f"models.{name}.function"
        module_name, attribute = _split_target(spec["function"], where)
        try:
            if module_name.endswith(".py"):
                path = Path(module_name).resolve()
                if not path.is_file():
                    raise ConfigError(f"{where}: file {module_name} does not exist")
                unique = "splits_tm_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
                module_spec = importlib.util.spec_from_file_location(unique, path)
                module = importlib.util.module_from_spec(module_spec)
                sys.modules[unique] = module
                module_spec.loader.exec_module(module)
            else:
                module = importlib.import_module(module_name)
        except ConfigError:
            raise
        except Exception as err:
            raise ConfigError(
                f"{where}: cannot import {module_name} ({type(err).__name__}: {err})"
            ) from err
        function = _load_attribute(module, attribute, where)
        target = f"{module_name}:{attribute}"
    if not callable(function):
        raise ConfigError(f"{where}: {target} is not callable")
    return function, target


def _accepted_arguments(
    function: Callable[..., Any], kwargs: Mapping[str, Any], name: str, target: str
) -> set[str] | None:
    """The inputs the function takes (None: all, it has **kwargs); ConfigError when it requires
    an argument nobody gives or the spec's kwargs name one it does not take."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    named = {
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    for key in kwargs:
        if key not in named:
            raise ConfigError(f"models.{name}.kwargs.{key}: {target} takes no argument {key!r}")
    given = set(CALLABLE_INPUTS) | set(kwargs)
    for p in parameters:
        if p.default is inspect.Parameter.empty and p.kind is not inspect.Parameter.VAR_POSITIONAL:
            if p.name not in given:
                raise ConfigError(
                    f"models.{name}: {target} requires the argument {p.name!r}, which a TM "
                    f"does not get (it gets {', '.join(CALLABLE_INPUTS)} and the spec's kwargs)"
                )
    return named


def callable_inputs(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of one theory call, from a TM request's payload."""
    return {
        "group_a": payload["group_a"],
        "group_b": payload["group_b"],
        "topic": payload["topic"],
        "category": payload.get("category") or "",
        # on one line; the request cut them to evaluation.max_post_chars already
        "posts": [" ".join(str(p).split()) for p in payload["posts"]],
        "k": payload["k"],
    }


class PythonTM(Backend):
    """A TM implemented by a Python callable (``backend: python``)."""

    classifies = False  # it writes theories
    payload_in_key = True  # the row's payload is what it answers

    @classmethod
    def gpus(cls, spec: Mapping[str, Any]) -> int:
        return int(spec["gpus"])

    #: one call per generate: each theory reaches the response cache as soon as it is returned
    stream_chunk_size = 1

    def __init__(self, name: str, spec: Mapping[str, Any]):
        self.name = name
        self.spec = dict(spec)
        self._identity = python_identity(name, spec)
        self.function, self.target = load_callable(name, spec)
        self.kwargs = dict(spec.get("kwargs") or {})
        self.accepted = _accepted_arguments(self.function, self.kwargs, name, self.target)

    @classmethod
    def spec_identity(cls, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        return python_identity(name, spec)

    def identity(self) -> dict[str, Any]:
        return dict(self._identity)

    def generate(self, requests: list[Request]) -> list[Completion]:
        out = []
        for request in requests:
            payload = request.payload or {}
            if "posts" not in payload or "group_a" not in payload:
                raise LLMError(f"model {self.name}: a python TM only answers theory requests")
            arguments = {**callable_inputs(payload), **self.kwargs}
            if self.accepted is not None:
                arguments = {k: v for k, v in arguments.items() if k in self.accepted}
            started = time.perf_counter()
            try:
                theory = self.function(**arguments)
            except Exception as err:
                message = str(err).splitlines()[0] if str(err) else ""
                raise LLMError(
                    f"model {self.name}: {self.target} raised {type(err).__name__}: {message} "
                    f"(topic {payload['topic']!r}, {payload['group_a']} vs {payload['group_b']}, "
                    f"k={payload['k']})"
                ) from err
            if not isinstance(theory, str):
                raise LLMError(
                    f"model {self.name}: {self.target} returned a {type(theory).__name__}, "
                    "not the theory as a string"
                )
            elapsed = time.perf_counter() - started
            out.append(Completion(theory, "stop", 0, len(theory.split()), elapsed))
        return out
