"""Atomic outputs: a killed writer leaves no half-written output, and its temporaries are
removed by the next run (issue: 10 .tmp files after 10 kills; synth wrote straight into its
output folder)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from splits.config.settings import schema_defaults
from splits.ingest.settings import IngestSettings, SynthSettings
from splits.io import atomic_path, stale_temporaries, write_json, write_parquet

REPO = Path(__file__).resolve().parents[1]


def _hidden(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob(".*") if ".snakemake" not in p.parts)


def test_failed_write_leaves_neither_output_nor_temporary(tmp_path):
    def boom():
        yield pl.DataFrame({"a": [1]})
        raise RuntimeError("killed half way")

    from splits.ingest.read import stream_frames

    with pytest.raises(RuntimeError):
        write_parquet(stream_frames(boom, {"a": pl.Int64}), tmp_path / "out.parquet")
    assert list(tmp_path.iterdir()) == []


def test_stale_temporaries_of_an_output_are_removed_by_its_next_write(tmp_path):
    out = tmp_path / "posts.parquet"
    # what killed writers left: temporaries of this output, and of another one
    for name in (".posts.parquet.a1b2c3.tmp", ".posts.parquet.zz.tmp", ".other.json.x.tmp"):
        (tmp_path / name).write_bytes(b"half")
    assert len(stale_temporaries(out)) == 2
    write_parquet(pl.DataFrame({"a": [1, 2]}), out)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.json.x.tmp", "posts.parquet"]
    write_json({"x": 1}, tmp_path / "other.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.json", "posts.parquet"]
    with atomic_path(tmp_path / "plot.png") as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".plot.png.")
        tmp.write_bytes(b"png")
    assert (tmp_path / "plot.png").read_bytes() == b"png"


def _kill_when(proc: subprocess.Popen, ready, timeout: float = 120) -> bool:
    """SIGKILL ``proc`` as soon as ``ready()``; False when it finished first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if ready():
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            return True
        time.sleep(0.005)
    proc.kill()
    raise AssertionError("the writer neither started writing nor finished")


def _settings(cls: type, **overrides) -> str:
    """A stage's ``--settings`` value: the schema's defaults, some replaced."""
    return json.dumps(dataclasses.asdict(schema_defaults(cls, **overrides)))


def _synth(out: Path, posts: int, fmt: str = "convokit") -> list[str]:
    return [
        sys.executable, "-m", "splits.cli", "synth",
        "--demographics", str(REPO / "config" / "demographics.sample.yaml"),
        "--topics", str(REPO / "config" / "topics.yaml"),
        "--out", str(out / "corpus"), "--truth-dir", str(out),
        "--settings", _settings(SynthSettings, posts=posts, shards=2, format=fmt),
    ]  # fmt: skip


def test_killed_ingest_leaves_nothing_and_the_rerun_cleans_up(tmp_path):
    """Kill the ingest three times while it writes; each time no output exists; the complete
    run then leaves exactly its two outputs, no temporary of the killed runs."""
    subprocess.run(_synth(tmp_path / "gen", 60_000), check=True, capture_output=True)
    corpus = tmp_path / "gen" / "corpus" / "sample-0"
    out = tmp_path / "out"
    out.mkdir()
    cmd = [
        sys.executable, "-m", "splits.cli", "ingest", "--input", str(corpus),
        "--out", str(out / "s.parquet"), "--report", str(out / "s.report.json"),
        "--settings", _settings(IngestSettings, chunk_mb=1),
    ]  # fmt: skip
    kills = 0
    for _ in range(3):
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        kills += _kill_when(proc, lambda: len(_hidden(out)) >= 2)
        assert not (out / "s.parquet").exists() and not (out / "s.report.json").exists()
    assert kills == 3 and len(_hidden(out)) >= 2  # the killed runs left temporaries
    subprocess.run(cmd, check=True, capture_output=True)
    assert sorted(p.name for p in out.iterdir()) == ["s.parquet", "s.report.json"]


def test_killed_synth_publishes_no_corpus_and_the_rerun_cleans_up(tmp_path):
    out = tmp_path / "sample"
    corpus = out / "corpus"
    proc = subprocess.Popen(
        _synth(out, 200_000, "pushshift"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    assert _kill_when(proc, lambda: out.exists() and any(out.rglob("*.ndjson")))
    published = [p for p in corpus.glob("*")] if corpus.exists() else []
    assert published == []  # nothing under the output names, only hidden staging
    subprocess.run(_synth(out, 20_000, "pushshift"), check=True, capture_output=True)
    assert sorted(p.name for p in corpus.iterdir()) == [
        "RC_sample-0.ndjson", "RC_sample-1.ndjson", "RS_sample-0.ndjson", "RS_sample-1.ndjson",
    ]  # fmt: skip
    assert _hidden(out) == []
