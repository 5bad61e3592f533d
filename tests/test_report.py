"""`snakemake --report results/report.html` after the default run: the self-contained HTML holds
the ingest report, one self-ID plot per demographic, the topic split counts and the evaluation
plots, each with its caption (read from the report's embedded `results` and `categories`)."""

from __future__ import annotations

import base64
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

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
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--report", "results/report.html"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
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


def test_report_holds_the_ingest_report(report):
    path = "results/posts/ingest_report.json"
    entry = _assert_entry(report, path, "ingest_report.rst")
    assert _category_of(report["categories"], path)[0] == "Ingest"
    embedded = json.loads(_data(entry))
    assert embedded == json.loads((report["workdir"] / path).read_text())


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
    path = "results/topics/topic_counts.csv"
    entry = _assert_entry(report, path, "topics_counts.rst")
    assert _category_of(report["categories"], path)[0] == "Topics"
    assert _data(entry) == (report["workdir"] / path).read_bytes()


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
