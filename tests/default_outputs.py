"""Digests of the default run's outputs, for the test that keeps them byte-identical across
refactorings (tests/test_default_outputs.py).

Every file under ``results/`` is digested except the LLM response cache (an SQLite file whose
pages record when they were written) and Snakemake's benchmark tables (timings). A Parquet file
names the Polars version that wrote it, so beside its bytes the manifest keeps a digest of its
decoded rows: a newer Polars on a fresh machine changes the bytes, not the dataset.

Record the manifest again after an intended change of the outputs, and say so in the commit:

    snakemake --cores 2 && python tests/default_outputs.py results > tests/data/default_outputs.json
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

MANIFEST = Path(__file__).parent / "data" / "default_outputs.json"
# the Polars that wrote the manifest's Parquet files (another one may write other bytes)
RECORDED_WRITER = "Polars (python) version 2.1.0 (build 7f902bd3ffd27ff82d14278a09a295ff2f7aed92)"
NOT_OUTPUTS = ("llm_cache.sqlite",)
NOT_OUTPUT_FOLDERS = ("benchmarks",)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parquet_rows_digest(path: Path) -> str:
    """The decoded table (schema and rows, in file order) as a digest, independent of the writer."""
    import polars as pl

    frame = pl.read_parquet(path)
    schema = json.dumps([[name, str(dtype)] for name, dtype in frame.schema.items()])
    return _sha256(schema.encode() + frame.write_ndjson().encode())


def output_digests(results: Path) -> dict[str, dict[str, str]]:
    """``{relative path: {"sha256": ..., ["rows": ...]}}`` of every output under ``results``."""
    digests: dict[str, dict[str, str]] = {}
    for path in sorted(p for p in results.rglob("*") if p.is_file()):
        relative = path.relative_to(results)
        if path.name in NOT_OUTPUTS or relative.parts[0] in NOT_OUTPUT_FOLDERS:
            continue
        entry = {"sha256": _sha256(path.read_bytes())}
        if path.suffix == ".parquet":
            entry["rows"] = parquet_rows_digest(path)
        digests[relative.as_posix()] = entry
    return digests


def differences_from_manifest(results: Path) -> tuple[list[str], list[str]]:
    """The output files the run under ``results`` lacks or adds against the recorded manifest,
    and those whose bytes differ from it (a Parquet file counts as equal where its rows are and
    a Polars other than the manifest's wrote it)."""
    import pyarrow.parquet as pq

    recorded = json.loads(MANIFEST.read_text())
    produced = output_digests(results)
    missing_or_extra = sorted(set(recorded) ^ set(produced))
    changed = []
    for name, digest in recorded.items():
        now = produced.get(name)
        if now is None or now["sha256"] == digest["sha256"]:
            continue
        if name.endswith(".parquet") and now["rows"] == digest["rows"]:
            if pq.ParquetFile(results / name).metadata.created_by != RECORDED_WRITER:
                continue  # same rows, another Polars wrote them
        changed.append(name)
    return missing_or_extra, changed


if __name__ == "__main__":
    json.dump(output_digests(Path(sys.argv[1])), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
