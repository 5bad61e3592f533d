"""Shared I/O: atomic Parquet and JSON writes, reading config in stage commands."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import polars as pl

PARQUET_COMPRESSION = "zstd"


def _atomic_target(path: Path) -> tuple[int, str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    return tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)


def write_parquet(
    frame: pl.DataFrame | pl.LazyFrame, path: str | Path, compression_level: int | None = None
) -> Path:
    """Write a frame as zstd Parquet atomically (temp file + rename): a killed job leaves no
    half-written output for Snakemake to mistake for a finished one. ``compression_level``
    (zstd 1-22, None: the library's default) trades file size for write speed."""
    path = Path(path)
    fd, tmp = _atomic_target(path)
    os.close(fd)
    try:
        if isinstance(frame, pl.LazyFrame):
            frame.sink_parquet(
                tmp, compression=PARQUET_COMPRESSION, compression_level=compression_level
            )
        else:
            frame.write_parquet(
                tmp,
                compression=PARQUET_COMPRESSION,
                compression_level=compression_level,
                statistics=True,
            )
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def write_json(data: Any, path: str | Path) -> Path:
    path = Path(path)
    fd, tmp = _atomic_target(path)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=True, default=str)
        fh.write("\n")
    os.replace(tmp, path)
    return path


def write_text(text: str, path: str | Path) -> Path:
    path = Path(path)
    fd, tmp = _atomic_target(path)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)
    return path


def read_json(path: str | Path) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def scan_posts(paths: str | Path | list[str | Path]) -> pl.LazyFrame:
    """Lazy scan of one or more posts Parquet files (or a directory of them)."""
    if isinstance(paths, str | Path):
        p = Path(paths)
        paths = sorted(p.glob("*.parquet")) if p.is_dir() else [p]
    return pl.scan_parquet([str(p) for p in paths])
