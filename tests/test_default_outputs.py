"""The default run's outputs stay byte-identical across refactorings of the code.

The manifest (tests/data/default_outputs.json) was recorded from the default run before the
package was reorganised; tests/default_outputs.py says how to record it again after an intended
change. Parquet files may differ in their bytes only where a different Polars version wrote them
(its version stands in the file); their decoded rows must still be equal.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
from default_outputs import output_digests

MANIFEST = Path(__file__).parent / "data" / "default_outputs.json"


def test_default_run_outputs_are_byte_identical_to_the_recorded_manifest(default_run):
    recorded = json.loads(MANIFEST.read_text())
    produced = output_digests(default_run / "results")
    assert sorted(produced) == sorted(recorded), "the default run's set of output files changed"
    changed = []
    for name, digest in recorded.items():
        now = produced[name]
        if now["sha256"] == digest["sha256"]:
            continue
        if name.endswith(".parquet") and now["rows"] == digest["rows"]:
            writer = pq.ParquetFile(default_run / "results" / name).metadata.created_by
            if writer != RECORDED_WRITER:
                continue  # same rows, another Polars wrote them
        changed.append(name)
    assert not changed, f"{len(changed)} outputs changed, first: {changed[:5]}"


RECORDED_WRITER = "Polars (python) version 2.1.0 (build 7f902bd3ffd27ff82d14278a09a295ff2f7aed92)"
