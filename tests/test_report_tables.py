"""`splits report-tables`: the HTML pages the report shows for table outputs, read back with
Python's own HTML parser and compared with the source read by the csv / json modules."""

from __future__ import annotations

import csv
import json
import math

import polars as pl
import pytest
from helpers import TableCells
from splits.cli import main
from splits.errors import ConfigError
from splits.report.tables import MAX_ROWS, render, report_pages


def parse(page: str) -> TableCells:
    parser = TableCells()
    parser.feed(page)
    return parser


def same(shown: str, raw: str) -> bool:
    """A shown cell against the CSV's own text of it."""
    if raw == "":
        return shown == ""
    try:
        value = float(raw)
    except ValueError:
        return shown == raw
    return math.isclose(float(shown.replace(",", "")), value, rel_tol=1e-3)


def test_csv_page_holds_every_cell(tmp_path):
    source = tmp_path / "t.csv"
    pl.DataFrame(
        {
            "tm": ["no-theory", "oracle <b>", "x,y"],
            "k": [4, 16, 1200],
            "accuracy": [0.475, 0.93751234, None],
            "p": [1e-9, 0.5, 1.0],
        }
    ).write_csv(source)
    with open(source, newline="") as fh:
        expected = list(csv.reader(fh))
    rows = parse(render(source)).rows
    assert rows[0] == expected[0]
    assert len(rows) == len(expected)
    for shown, raw in zip(rows[1:], expected[1:], strict=True):
        assert all(same(s, r) for s, r in zip(shown, raw, strict=True)), (shown, raw)


def test_long_table_is_cut_and_says_so(tmp_path):
    source = tmp_path / "long.parquet"
    pl.DataFrame({"i": range(MAX_ROWS + 7)}).write_parquet(source)
    page = render(source)
    assert len(parse(page).rows) == MAX_ROWS + 1
    assert f"{MAX_ROWS:,} of {MAX_ROWS + 7:,} rows" in page


def test_header_only_csv_says_it_has_no_rows(tmp_path):
    source = tmp_path / "groups.csv"
    source.write_text("group,tms,accuracy\n")
    page = render(source)
    assert parse(page).rows == [["group", "tms", "accuracy"]]
    assert "no rows" in page


def test_json_page_has_one_row_per_leaf(tmp_path):
    data = {"posts": 52000, "dropped": {"bot": 719, "spam": 0}, "notes": ["a", "b"], "ok": True}
    source = tmp_path / "r.json"
    source.write_text(json.dumps(data))
    rows = {row[0]: row[1] for row in parse(render(source)).rows}
    assert rows == {
        "posts": "52,000",
        "dropped.bot": "719",
        "dropped.spam": "0",
        "notes": "a\nb",
        "ok": "true",
    }


def test_markdown_tables_and_front_matter(tmp_path):
    source = tmp_path / "README.md"
    source.write_text("---\nlicense: cc-by-4.0\n---\n# Title\n\n| a | b |\n|---|---|\n| 1 | x |\n")
    parsed = parse(render(source))
    assert "h1" in parsed.tags and "pre" in parsed.tags
    assert parsed.rows == [["a", "b"], ["1", "x"]]


def test_unknown_suffix_and_mismatched_lists_are_one_line_errors(tmp_path, capsys):
    source = tmp_path / "x.tsv"
    source.write_text("a\tb\n")
    with pytest.raises(ConfigError, match="no HTML view"):
        render(source)
    code = main(["report-tables", "--sources", str(source), "--pages", "a.html", "b.html"])
    assert code == 2
    assert "--sources names 1 files but --pages 2" in capsys.readouterr().err


def test_report_pages_follow_the_targets():
    targets = [
        "out/posts/ingest_report.json",
        "out/evaluation/experiments/main/metrics.json",
        "out/evaluation/experiments/main/plots/by_pair.png",
        "out/probes/personalization/topics/tests.parquet",
        "elsewhere/posts/ingest_report.json",
    ]
    assert report_pages(targets, "out") == [
        "out/evaluation/experiments/main/comparisons.html",
        "out/evaluation/experiments/main/splits.html",
        "out/evaluation/experiments/main/summary.html",
        "out/posts/ingest_report.html",
        "out/probes/personalization/topics/tests.html",
    ]
