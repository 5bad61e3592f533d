"""The default run's outputs stay byte-identical across refactorings of the code.

The manifest (tests/data/default_outputs.json) was recorded from the default run before the
package was reorganised; tests/default_outputs.py says how to record it again after an intended
change. Parquet files may differ in their bytes only where a different Polars version wrote them
(its version stands in the file); their decoded rows must still be equal.
"""

from __future__ import annotations

from default_outputs import differences_from_manifest


def test_default_run_outputs_are_byte_identical_to_the_recorded_manifest(default_run):
    missing_or_extra, changed = differences_from_manifest(default_run / "results")
    assert not missing_or_extra, (
        f"the default run's set of output files changed: {missing_or_extra}"
    )
    assert not changed, f"{len(changed)} outputs changed, first: {changed[:5]}"
