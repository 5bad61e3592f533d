"""HTML pages of the run's tables for the Snakemake report.

A browser shows images, HTML and PDF in the report; a CSV, Parquet, JSON or Markdown output would
be a download only (Parquet as binary text). Each table output the report lists gets an HTML page
beside it, rendered from the output itself: CSV and Parquet as a table (numbers rounded for
reading, long tables cut with the count of rows left out), JSON as key/value rows (nested keys
joined with dots; a list of records as a table), Markdown as HTML (its tables included).
"""

from __future__ import annotations

import argparse
import html
import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

from splits.errors import ConfigError

if TYPE_CHECKING:  # polars loads where a table is drawn: the Snakefile imports this module
    import polars as pl

MAX_ROWS = 500  # rows shown per table; the output file holds them all
SIGNIFICANT = 4  # significant digits of floats shown

STYLE = """
body { font-family: system-ui, sans-serif; font-size: 14px; margin: 12px; color: #222; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th, td { white-space: nowrap; }
td.text { white-space: pre-line; min-width: 30em; }
pre { background: #f6f6f6; padding: 6px; }
th { background: #f2f2f2; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
p.note { color: #666; }
"""


# a target of the workflow (relative to the results folder; regex) -> the report pages of the
# tables that the job writing it writes (workflow/rules/report.smk makes them)
REPORT_PAGES = [
    (r"posts/ingest_report\.json", ["posts/ingest_report.html"]),
    (r"graph/summary\.json", ["graph/summary.html"]),
    (
        r"demographics/thresholds\.json",
        ["demographics/thresholds.html", "demographics/formula_comparison.html"],
    ),
    (
        r"topics/topic_counts\.csv",
        ["topics/topic_counts.html", "topics/topic_retrieval.html", "topics/seed_share.html"],
    ),
    (r"dataset/quadruplets\.parquet", ["dataset/sampling_summary.html"]),
    (
        r"dataset/export/README\.md",
        [
            "dataset/export/dataset_card.html",
            "dataset/export/counts_by_topic.html",
            "dataset/export/counts_by_category.html",
        ],
    ),
    (
        r"(evaluation/experiments/[^/]+)/metrics\.json",
        [r"\1/summary.html", r"\1/splits.html", r"\1/comparisons.html"],
    ),
    (
        r"(evaluation/experiments/[^/]+)/group_splits\.md",
        [r"\1/groups.html", r"\1/group_splits.html", r"\1/group_gaps.html"],
    ),
    (r"evaluation/throughput\.md", ["evaluation/throughput.html"]),
    (
        r"hypotheses/filtered\.csv",
        ["hypotheses/filtered.html", "hypotheses/stages.html", "hypotheses/comparison.html"],
    ),
    (r"(probes/empathy/[^/]+/[^/]+)/variants\.csv", [r"\1/variants.html"]),
    (r"(probes/personalization/[^/]+)/tests\.parquet", [r"\1/tests.html"]),
]


def report_pages(targets: list[str], results: str = "results") -> list[str]:
    """The report pages of the tables written by the jobs of ``targets``."""
    prefix = results.rstrip("/") + "/"
    pages = set()
    for target in targets:
        if not target.startswith(prefix):
            continue
        for pattern, templates in REPORT_PAGES:
            match = re.fullmatch(pattern, target[len(prefix) :])
            if match:
                pages.update(prefix + match.expand(t) for t in templates)
    return sorted(pages)


def format_value(value) -> tuple[str, bool]:
    """(text, is_number) of one cell."""
    if value is None:
        return "", False
    if isinstance(value, bool):
        return str(value).lower(), False
    if isinstance(value, int):
        return f"{value:,}", True
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value), True
        return f"{value:.{SIGNIFICANT}g}", True
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value), False  # one line each (CSS pre-line)
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False), False
    return str(value), False


def cell_html(value) -> str:
    """One <td>: numbers right-aligned, long text wrapped, the rest on one line."""
    text, number = format_value(value)
    cls = ' class="num"' if number else ' class="text"' if len(text) > 60 else ""
    return f"<td{cls}>{html.escape(text)}</td>"


def table_html(frame: pl.DataFrame, max_rows: int = MAX_ROWS) -> str:
    head = "".join(f"<th>{html.escape(name)}</th>" for name in frame.columns)
    rows = []
    for record in frame.head(max_rows).iter_rows():
        rows.append(f"<tr>{''.join(cell_html(value) for value in record)}</tr>")
    body = "\n".join(rows)
    note = ""
    if frame.height == 0:
        note = '<p class="note">The table has no rows.</p>'
    elif frame.height > max_rows:
        note = (
            f'<p class="note">The first {max_rows:,} of {frame.height:,} rows; '
            "the output file holds them all.</p>"
        )
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>\n{note}"


def flatten(value, prefix: str = "") -> list[tuple[str, object]]:
    """Nested JSON objects as (dotted key, value) rows; lists of scalars stay one value."""
    if isinstance(value, dict):
        rows = []
        for key, item in value.items():
            rows.extend(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return rows
    return [(prefix, value)]


def json_html(data) -> str:
    if isinstance(data, list) and data and all(isinstance(r, dict) for r in data):
        import polars as pl

        return table_html(pl.DataFrame([{k: v for k, v in flatten(r)} for r in data]))
    parts = []
    rows = []
    for key, value in flatten(data):
        if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
            parts.append(f"<h3>{html.escape(key)}</h3>\n{json_html(value)}")
        else:
            rows.append((key, value))
    if rows:
        body = []
        for key, value in rows:
            body.append(f"<tr><th>{html.escape(key)}</th>{cell_html(value)}</tr>")
        parts.insert(0, "<table>\n" + "\n".join(body) + "\n</table>")
    return "\n".join(parts)


def markdown_html(text: str) -> str:
    """Markdown (tables included) as HTML; a YAML front matter block (a dataset card's metadata)
    is shown as it is."""
    front = ""
    if text.startswith("---\n"):
        end = text.find("\n---\n", 4)
        if end > 0:
            front = f"<pre>{html.escape(text[4:end])}</pre>\n"
            text = text[end + 5 :]
    from markdown_it import MarkdownIt  # here: the Snakefile imports this module for its targets

    return front + MarkdownIt("commonmark", {"html": False}).enable("table").render(text)


def render(source: Path) -> str:
    """The HTML body of one output file, by its suffix."""
    import polars as pl

    suffix = source.suffix.lower()
    if suffix == ".csv":
        frame = pl.read_csv(source, infer_schema_length=None) if source.stat().st_size else None
        return table_html(frame if frame is not None else pl.DataFrame())
    if suffix == ".parquet":
        return table_html(pl.read_parquet(source))
    if suffix == ".json":
        return json_html(json.loads(source.read_text(encoding="utf-8")))
    if suffix == ".md":
        return markdown_html(source.read_text(encoding="utf-8"))
    raise ConfigError(f"{source}: no HTML view for {suffix or 'a file without suffix'} files")


def page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n"
        f"<body>\n{body}\n</body></html>\n"
    )


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sources",
        nargs="+",
        required=True,
        help="outputs to show (CSV, Parquet, JSON or Markdown)",
    )
    parser.add_argument(
        "--pages", nargs="+", required=True, help="the HTML page of each source, in the same order"
    )


def run(args: argparse.Namespace) -> int:
    if len(args.sources) != len(args.pages):
        raise ConfigError(
            f"--sources names {len(args.sources)} files but --pages {len(args.pages)}"
        )
    from splits.io import write_text

    for source, out in zip(args.sources, args.pages, strict=True):
        source = Path(source)
        if not source.is_file():
            raise ConfigError(f"{source}: no such file")
        write_text(page(source.name, render(source)), out)
    return 0
