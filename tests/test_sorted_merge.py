"""The bounded k-way merge of sorted Parquet files (splits.io.iter_sorted_merge), the step that
lets the bucketed group-ness reduce write a demographic's users in author order without
holding them: against concatenating and sorting everything (the oracle), with empty files,
keys shared between files, batches far smaller than the files, more files than one merge
takes (rounds through scratch files) and a file out of order."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import splits.io as sio
from splits.errors import InputError
from splits.io import ParquetAppender, iter_sorted_merge

SCHEMA = {"author": pl.String, "value": pl.Int64}


def _files(tmp_path, sizes, seed, shared=0):
    """Sorted files of random names; ``shared`` names occur in two files each."""
    rng = np.random.default_rng(seed)
    frames = []
    for i, n in enumerate(sizes):
        names = [f"u{rng.integers(0, 10**9):09d}_{i}" for _ in range(n)]
        values = rng.integers(0, 1000, n)
        frames.append(pl.DataFrame({"author": names, "value": values}, schema=SCHEMA))
    for k in range(shared):  # the same name in two files
        a, b = rng.choice(len(sizes), 2, replace=False)
        name = pl.DataFrame({"author": [f"shared{k:04d}"], "value": [k]}, schema=SCHEMA)
        frames[a] = pl.concat([frames[a], name])
        frames[b] = pl.concat([frames[b], name])
    paths = []
    for i, frame in enumerate(frames):
        paths.append(tmp_path / f"{i}.parquet")
        frame.sort("author").write_parquet(paths[-1], row_group_size=500)
    return paths, pl.concat(frames)


def _check(chunks, oracle):
    merged = pl.concat(chunks)
    # the oracle's order among equal names is not defined: compare keys, then rows as sets
    assert merged["author"].equals(oracle.sort("author")["author"])
    assert merged.sort("author", "value").equals(oracle.sort("author", "value"))
    for before, after in zip(chunks, chunks[1:], strict=False):
        assert before["author"][-1] < after["author"][0]


@pytest.mark.quick
@pytest.mark.parametrize("max_rows", [1, 3000, 10**6])
def test_merge_equals_concatenate_and_sort(tmp_path, max_rows):
    paths, oracle = _files(tmp_path, [5000, 0, 1, 2500, 7000, 300], seed=max_rows, shared=40)
    chunks = list(iter_sorted_merge(paths, "author", max_rows))
    _check(chunks, oracle)
    if max_rows < 10**6:  # held rows bounded: many frames, none near the whole
        assert len(chunks) > 5 and max(c.height for c in chunks) < oracle.height / 2
    # a name in two files comes out in one frame (the reduce finds repeated authors per frame)
    for chunk in chunks:
        shared = chunk.filter(pl.col("author").str.starts_with("shared"))
        assert shared.group_by("author").len()["len"].to_list() == [2] * shared["author"].n_unique()


@pytest.mark.quick
def test_more_files_than_one_merge_takes_go_through_rounds(tmp_path, monkeypatch):
    monkeypatch.setattr(sio, "MERGE_FAN_IN", 3)
    paths, oracle = _files(tmp_path, [400, 0, 900, 50, 1200, 700, 10, 333], seed=5, shared=12)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    chunks = list(iter_sorted_merge(paths, "author", 700, columns=["value"], scratch=scratch))
    assert all(c.columns == ["author", "value"] for c in chunks)
    _check(chunks, oracle)
    assert list(scratch.iterdir()) == []  # the rounds' files are gone


@pytest.mark.quick
def test_columns_read_and_a_file_out_of_order(tmp_path):
    paths, oracle = _files(tmp_path, [300, 200], seed=1)
    (only,) = {tuple(c.columns) for c in iter_sorted_merge(paths, "author", 100, ["author"])}
    assert only == ("author",)
    out = ParquetAppender(tmp_path / "bad.parquet")
    out.write(pl.DataFrame({"author": ["b", "c"], "value": [1, 2]}))
    out.write(pl.DataFrame({"author": ["a"], "value": [3]}))  # a later row group sorts lower
    out.close()
    with pytest.raises(InputError, match="not sorted by author") as err:
        list(iter_sorted_merge([paths[0], tmp_path / "bad.parquet"], "author", 10**6))
    assert "\n" not in str(err.value)


def test_equal_keys_of_a_file_keep_its_order(tmp_path, monkeypatch):
    """Rows of one key in one file, spread over its batches, come out in that file's order
    (the self-ID matches of a post, all in its author's part in offset order, are merged by
    post id alone)."""
    monkeypatch.setattr(sio, "MERGE_MIN_BATCH_ROWS", 3)
    frames = [
        pl.DataFrame({"post_id": ["a", "b", "b", "b", "b", "e"], "start": [5, 9, 1, 7, 3, 0]}),
        pl.DataFrame({"post_id": ["c", "c", "d", "d", "d"], "start": [2, 0, 4, 8, 6]}),
    ]
    paths = []
    for i, frame in enumerate(frames):
        paths.append(tmp_path / f"{i}.parquet")
        frame.write_parquet(paths[-1], row_group_size=2)
    merged = pl.concat(iter_sorted_merge(paths, "post_id", max_rows=6))
    oracle = pl.concat(frames).sort("post_id", maintain_order=True)  # stable
    assert merged.equals(oracle)
    assert merged["start"].to_list() == [5, 9, 1, 7, 3, 2, 0, 4, 8, 6, 0]
