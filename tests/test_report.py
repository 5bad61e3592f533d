"""`snakemake --report results/report.html` after the default run: the self-contained HTML holds
the ingest report, one self-ID plot per demographic, the topic split counts and the evaluation
plots, each with its caption (read from the report's embedded `results` and `categories`)."""

from __future__ import annotations

import base64
import html
import json
import math
import os
import re
import shutil
import struct
from pathlib import Path

import polars as pl
import pytest
import snakemake_fork
import yaml
from helpers import TableCells

REPO = Path(__file__).resolve().parents[1]
REPORT_DIR = REPO / "workflow" / "report"


def _embedded(page: str, name: str):
    key = f"var {name} = "
    starts = [m.end() for m in re.finditer(re.escape(key) + r"(?=[{\[\"])", page)]
    assert starts, f"no `{key}` in the report"
    value, _ = json.JSONDecoder().raw_decode(page, starts[-1])
    return value


def _plain(caption_html: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", caption_html)).split())


def _caption_words(rst_name: str) -> str:
    """The first few plain words of a caption file (before any template or markup)."""
    text = (REPORT_DIR / rst_name).read_text()
    words = []
    for word in text.split():
        if any(ch in word for ch in "{}`*:|<>"):
            break
        words.append(word)
        if len(words) == 4:
            break
    assert words, f"{rst_name} starts with markup"
    return " ".join(words)


@pytest.fixture(scope="module")
def report(default_run, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("report") / "repo"
    shutil.copytree(default_run, workdir, symlinks=True)
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = snakemake_fork.run(["--report", "results/report.html"], workdir, env, 600)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    page = (workdir / "results" / "report.html").read_text()
    return {
        "workdir": workdir,
        "page": page,
        "results": _embedded(page, "results"),
        "categories": _embedded(page, "categories"),
    }


def _category_of(categories: dict, path: str) -> tuple[str, str]:
    for category, subcategories in categories.items():
        for subcategory, paths in subcategories.items():
            if path in paths:
                return category, subcategory
    raise AssertionError(f"{path} is in no report category")


def _assert_entry(report: dict, path: str, caption_file: str) -> dict:
    results = report["results"]
    assert path in results, f"{path} missing from the report; it has {sorted(results)[:50]}"
    entry = results[path]
    caption = _plain(entry["caption"])
    assert caption, f"{path} has an empty caption"
    assert _caption_words(caption_file) in caption, (path, caption[:200])
    _category_of(report["categories"], path)
    return entry


def _data(entry: dict) -> bytes:
    header, _, payload = entry["data_uri"].partition(",")
    assert header.endswith(";base64"), header
    return base64.b64decode(payload)


def _cells(page: bytes) -> list[list[str]]:
    parser = TableCells()
    parser.feed(page.decode("utf-8"))
    return parser.rows


def _same_number(shown: str, value) -> bool:
    return math.isclose(float(shown.replace(",", "")), float(value), rel_tol=1e-3, abs_tol=1e-9)


def test_report_holds_the_ingest_report(report):
    path = "results/posts/ingest_report.html"
    entry = _assert_entry(report, path, "ingest_report.rst")
    assert _category_of(report["categories"], path)[0] == "Ingest"
    # every count of the JSON report is on its row of the page, under its dotted key
    source = json.loads((report["workdir"] / "results/posts/ingest_report.json").read_text())
    shown = {row[0]: row[1] for row in _cells(_data(entry)) if len(row) == 2}
    assert _same_number(shown["posts"], source["posts"])
    for reason, count in source["dropped"].items():
        assert _same_number(shown[f"dropped.{reason}"], count), reason


def test_report_holds_one_selfid_plot_per_demographic(report):
    config = yaml.safe_load((report["workdir"] / "config" / "config.yaml").read_text())
    demographics = yaml.safe_load((report["workdir"] / config["demographics"]["file"]).read_text())
    keys = [d["key"] for d in demographics["demographics"]]
    assert len(keys) == 6
    for key in keys:
        path = f"results/demographics/{key}/selfid_curve.png"
        entry = _assert_entry(report, path, "selfid_curve.rst")
        assert entry["labels"] == {"demographic": key}
        assert _data(entry)[:8] == b"\x89PNG\r\n\x1a\n"
        assert _category_of(report["categories"], path)[0] == "Demographics"


def test_report_holds_topic_split_counts(report):
    path = "results/topics/topic_counts.html"
    entry = _assert_entry(report, path, "topics_counts.rst")
    assert _category_of(report["categories"], path)[0] == "Topics"
    table = pl.read_csv(report["workdir"] / "results/topics/topic_counts.csv")
    header, *rows = _cells(_data(entry))
    assert header == table.columns and len(rows) == table.height
    for shown, record in zip(rows, table.iter_rows(), strict=True):
        for cell, value in zip(shown, record, strict=True):
            if isinstance(value, int | float):
                assert _same_number(cell, value)
            else:
                assert cell == str(value)


def test_report_shows_the_evaluation_tables(report):
    base = "results/evaluation/experiments/sample"
    captions = {
        "summary": "evaluation_summary.rst",
        "splits": "evaluation_splits.rst",
        "comparisons": "evaluation_comparisons.rst",
    }
    for name, caption in captions.items():
        entry = _assert_entry(report, f"{base}/{name}.html", caption)
        table = pl.read_csv(report["workdir"] / f"{base}/{name}.csv")
        header, *rows = _cells(_data(entry))
        assert header == table.columns and len(rows) == table.height, name
    # the sample experiment defines no TM groups: no empty groups table in the report
    assert f"{base}/groups.html" not in report["results"]


BROWSER_TYPES = {"image/png", "image/svg+xml", "image/jpeg", "text/html", "application/pdf"}


def test_every_report_artefact_is_shown_by_a_browser(report):
    shown_as = {path: entry["mime_type"] for path, entry in report["results"].items()}
    assert {p: m for p, m in shown_as.items() if m not in BROWSER_TYPES} == {}


def test_every_plot_is_sized_for_reading(report):
    """At least 600 x 350 pixels: the report shows a PNG at its own size."""
    small = {}
    for path, entry in report["results"].items():
        if entry["mime_type"] == "image/png":
            width, height = struct.unpack(">II", _data(entry)[16:24])  # the PNG's IHDR chunk
            if width < 600 or height < 350:
                small[path] = (width, height)
    assert small == {}


def test_captions_stand_on_their_own():
    """No caption points to a document outside the repository (e.g. "SPEC 2.1")."""
    outside = {
        rst.name: line
        for rst in sorted(REPORT_DIR.glob("*.rst"))
        for line in rst.read_text().splitlines()
        if re.search(r"\bSPEC\b|\.\./shared", line)
    }
    assert outside == {}


def test_report_holds_every_evaluation_plot(report):
    plots = sorted((report["workdir"] / "results" / "evaluation").rglob("plots/*.png"))
    assert len(plots) >= 5, plots
    captions = {
        "accuracy_vs_k.png": "evaluation_accuracy_vs_k.rst",
        "tm_cm_heatmap.png": "evaluation_heatmap.rst",
        "by_pair.png": "evaluation_by_split.rst",
        "by_demographic.png": "evaluation_by_split.rst",
        "by_category.png": "evaluation_by_split.rst",
    }
    for plot in plots:
        path = str(plot.relative_to(report["workdir"]))
        entry = _assert_entry(report, path, captions.get(plot.name, "evaluation_by_split.rst"))
        assert _data(entry) == plot.read_bytes()
        assert _category_of(report["categories"], path)[0] == "Evaluation"


def test_report_workflow_description(report):
    snakefile = (REPO / "Snakefile").read_text()
    if "workflow/report/workflow.rst" not in snakefile:
        pytest.skip('the Snakefile has no `report: "workflow/report/workflow.rst"` yet')
    description = _plain(_embedded(report["page"], "workflow_desc"))
    assert _caption_words("workflow.rst") in description
