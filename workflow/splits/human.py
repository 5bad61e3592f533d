"""Human validation of theories (SPEC 2.11, paper Appendix C). Command line only.

``splits human export``: blinded annotation sheets. One sheet = one post set (the 3 sample posts
of one group of one evaluation row) and 6 statements from one TM's theory of that row: 3 about
the post set's group and 3 about the other group, shuffled, with their "Group A:"-style labels
removed. Sheets of several TMs are interleaved under random ids; which model wrote a statement
and which group it was meant for is only in the key file (``key.csv``), never on the sheets.
Rows whose theory has fewer than 3 statements about either group are skipped and counted.

``splits human score``: read the key and filled sheets (CSV, one file per annotator; ratings
0-4, blank = not rated) and score each (annotator, sheet):

- relevance and centrality: only ratings of 4 count; a statement meant for this post set adds
  +4, one meant for the other group -4; normalised score = sum / (4 x number of counted
  statements), 0 when none counts; the sheet is won when the score is positive;
- a model's score is the mean normalised score over its sheets, with the share of sheets won;
- unexpectedness and specificity: plain means of the 0-4 ratings.
"""

from __future__ import annotations

import argparse
import html
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from splits.classify import display_names, group_names, read_rows, statements_by_group
from splits.config import ConfigError
from splits.io import write_json, write_text

log = logging.getLogger(__name__)

MEASURES = ("relevance", "centrality", "unexpectedness", "specificity")
SIGNED_MEASURES = ("relevance", "centrality")
STATEMENTS_PER_GROUP = 3
HUMAN_STREAM = 0x4A11

_LABEL = re.compile(
    r"^\s*(?:[-*•]\s*|\d+[.)]\s*)?(?:group|demographic)?\s*<?[AB]>?\s*(?:\([^)]*\))?\s*[:\-–]\s*",
    re.IGNORECASE,
)


def blind(statement: str) -> str:
    """A statement without its leading group label ("Group A:", "B (teacher) -", "1. A:")."""
    return _LABEL.sub("", statement, count=1).strip()


# --------------------------------------------------------------------------- export


def build_sheets(
    rows: pl.DataFrame,
    theories: Mapping[str, pl.DataFrame],
    names: Mapping[str, str],
    sheets_per_model: int,
    seed: int,
) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]]:
    """(sheets, key, counts) for every model of ``theories`` (model name -> theories frame)."""
    rng = np.random.default_rng([seed, HUMAN_STREAM])
    row_of = {r["quadruplet_id"]: r for r in rows.iter_rows(named=True)}
    drafts = []
    counts: dict[str, Any] = {"skipped_too_few_statements": {}, "sheets": {}}
    for model in sorted(theories):
        frame = theories[model].sort("eval_row")
        made = skipped = 0
        for theory_row in frame.iter_rows(named=True):
            if made >= sheets_per_model:
                break
            row = row_of.get(theory_row["quadruplet_id"])
            if row is None:
                continue
            by_group = statements_by_group(
                theory_row["theory"],
                group_names(row["demographic_A"], names),
                group_names(row["demographic_B"], names),
            )
            if any(len(by_group[g]) < STATEMENTS_PER_GROUP for g in "AB"):
                skipped += 1
                continue
            target = "A" if rng.random() < 0.5 else "B"
            items = [(g, s) for g in "AB" for s in by_group[g][:STATEMENTS_PER_GROUP]]
            order = rng.permutation(len(items))
            drafts.append((model, row, target, [items[i] for i in order]))
            made += 1
        counts["sheets"][model] = made
        counts["skipped_too_few_statements"][model] = skipped
    sheet_order = rng.permutation(len(drafts))
    sheet_records, key_records = [], []
    for number, index in enumerate(sheet_order, start=1):
        model, row, target, items = drafts[index]
        sheet_id = f"S{number:03d}"
        posts = row["sample_A"] if target == "A" else row["sample_B"]
        post_text = "\n\n".join(f"Post {i + 1}: {p}" for i, p in enumerate(posts))
        for item, (group, statement) in enumerate(items, start=1):
            sheet_records.append(
                {
                    "sheet_id": sheet_id,
                    "item": item,
                    "topic": row["description"],
                    "posts": post_text,
                    "statement": blind(statement),
                    **dict.fromkeys(MEASURES, None),
                }
            )
            key_records.append(
                {
                    "sheet_id": sheet_id,
                    "item": item,
                    "model": model,
                    "quadruplet_id": row["quadruplet_id"],
                    "post_set_group": row["demographic_A"]
                    if target == "A"
                    else row["demographic_B"],
                    "statement_group": row["demographic_A"]
                    if group == "A"
                    else row["demographic_B"],
                    "meant_for_post_set": group == target,
                }
            )
    sheet_schema = {
        "sheet_id": pl.String,
        "item": pl.Int64,
        "topic": pl.String,
        "posts": pl.String,
        "statement": pl.String,
        **dict.fromkeys(MEASURES, pl.Int64),
    }
    key_schema = {
        "sheet_id": pl.String,
        "item": pl.Int64,
        "model": pl.String,
        "quadruplet_id": pl.String,
        "post_set_group": pl.String,
        "statement_group": pl.String,
        "meant_for_post_set": pl.Boolean,
    }
    return (
        pl.DataFrame(sheet_records, schema=sheet_schema),
        pl.DataFrame(key_records, schema=key_schema),
        counts,
    )


def sheets_html(sheets: pl.DataFrame) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html><head><meta charset="utf-8"><title>Theory annotation sheets</title>',
        "<style>body{font-family:sans-serif;max-width:60em;margin:auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #999;padding:4px}"
        ".posts{white-space:pre-wrap;background:#f4f4f4;padding:8px}"
        "section{page-break-after:always;margin-bottom:3em}</style></head><body>",
        "<h1>Theory annotation sheets</h1>",
        "<p>For each sheet, read the posts, then rate every statement from 0 (not at all) to 4 "
        "(completely): <b>relevance</b> (does the statement describe these posts?), "
        "<b>centrality</b> (is it about what matters most in them?), <b>unexpectedness</b> (is it "
        "surprising?), <b>specificity</b> (is it concrete rather than generic?). Enter the "
        "ratings in the CSV file with the same sheet and item numbers.</p>",
    ]
    for sheet_id, part in sheets.group_by("sheet_id", maintain_order=True):
        first = part.row(0, named=True)
        parts.append(f"<section><h2>Sheet {html.escape(str(sheet_id[0]))}</h2>")
        parts.append(f"<p>Topic: {html.escape(first['topic'])}</p>")
        parts.append(f'<div class="posts">{html.escape(first["posts"])}</div>')
        parts.append("<table><tr><th>item</th><th>statement</th>")
        parts.extend(f"<th>{m}</th>" for m in MEASURES)
        parts.append("</tr>")
        for row in part.iter_rows(named=True):
            parts.append(
                f"<tr><td>{row['item']}</td><td>{html.escape(row['statement'])}</td>"
                + "<td></td>" * len(MEASURES)
                + "</tr>"
            )
        parts.append("</table></section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def run_export(args: argparse.Namespace) -> int:
    rows = read_rows(args.rows)
    theories = {}
    for spec in args.theories:
        path = Path(spec)
        if not path.is_file():
            raise ConfigError(f"theories {path} do not exist")
        frame = pl.read_parquet(path)
        if not frame.height:
            continue
        model = str(frame["tm"][0])
        if model in theories:
            raise ConfigError(f"theories of TM {model!r} given twice")
        theories[model] = frame
    names = display_names(args.demographics)
    sheets, key, counts = build_sheets(rows, theories, names, args.sheets_per_model, args.seed)
    out = Path(args.out_dir)
    write_text(sheets.write_csv(), out / "sheets.csv")
    write_text(sheets_html(sheets), out / "sheets.html")
    write_text(key.write_csv(), out / "key.csv")
    write_json(counts, out / "export_report.json")
    log.info("human export: %s", counts)
    return 0


# --------------------------------------------------------------------------- score


def sheet_score(ratings: Sequence[int | None], meant: Sequence[bool]) -> tuple[float, int]:
    """(normalised score, number of counted statements) of one sheet for one signed measure."""
    contributions = [
        4 if is_meant else -4
        for rating, is_meant in zip(ratings, meant, strict=True)
        if rating is not None and rating == 4
    ]
    if not contributions:
        return 0.0, 0
    return sum(contributions) / (4 * len(contributions)), len(contributions)


def read_filled(path: str | Path) -> pl.DataFrame:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"filled sheet {path} does not exist")
    frame = pl.read_csv(path, infer_schema=False)
    missing = [c for c in ("sheet_id", "item", *MEASURES) if c not in frame.columns]
    if missing:
        raise ConfigError(f"{path}: missing column(s) {', '.join(missing)}")
    records = []
    for line, row in enumerate(frame.iter_rows(named=True), start=2):
        record = {"sheet_id": row["sheet_id"], "item": _int(row["item"], path, line, "item")}
        for measure in MEASURES:
            value = _int(row[measure], path, line, measure)
            if value is not None and not 0 <= value <= 4:
                raise ConfigError(f"{path}: line {line}: {measure} must be 0-4, not {value}")
            record[measure] = value
        records.append(record)
    schema = {"sheet_id": pl.String, "item": pl.Int64, **dict.fromkeys(MEASURES, pl.Int64)}
    return pl.DataFrame(records, schema=schema)


def _int(value: Any, path: Path, line: int, column: str) -> int | None:
    if value is None or str(value).strip() == "":
        return None
    try:
        number = float(str(value).strip())
    except ValueError as err:
        raise ConfigError(f"{path}: line {line}: {column} {value!r} is not a number") from err
    if not number.is_integer():
        raise ConfigError(f"{path}: line {line}: {column} {value!r} is not a whole number")
    return int(number)


def score_sheets(
    key: pl.DataFrame, filled: Mapping[str, pl.DataFrame]
) -> tuple[pl.DataFrame, dict]:
    """Per (annotator, sheet) scores and per-model summaries."""
    per_sheet = []
    unknown_items = 0
    for annotator, ratings in filled.items():
        joined = key.join(ratings, on=["sheet_id", "item"], how="inner")
        unknown_items += ratings.height - joined.height
        for (sheet_id,), part in joined.sort("sheet_id", "item").group_by(
            "sheet_id", maintain_order=True
        ):
            record: dict[str, Any] = {
                "annotator": annotator,
                "sheet_id": sheet_id,
                "model": part["model"][0],
            }
            meant = part["meant_for_post_set"].to_list()
            for measure in SIGNED_MEASURES:
                score, counted = sheet_score(part[measure].to_list(), meant)
                record[f"{measure}_score"] = score
                record[f"{measure}_counted"] = counted
                record[f"{measure}_won"] = score > 0
            for measure in ("unexpectedness", "specificity"):
                values = [v for v in part[measure].to_list() if v is not None]
                record[f"{measure}_sum"] = sum(values)
                record[f"{measure}_n"] = len(values)
            record["rated_items"] = int(
                part.select(pl.any_horizontal(pl.col(MEASURES).is_not_null())).sum().item()
            )
            per_sheet.append(record)
    table = pl.DataFrame(per_sheet)
    summary: dict[str, Any] = {"unknown_items_ignored": unknown_items, "models": {}}
    if table.height:
        for (model,), part in table.group_by("model", maintain_order=True):
            entry: dict[str, Any] = {"sheets": part.height}
            for measure in SIGNED_MEASURES:
                entry[measure] = float(part[f"{measure}_score"].mean())
                entry[f"{measure}_sheets_won"] = int(part[f"{measure}_won"].sum())
            for measure in ("unexpectedness", "specificity"):
                n = int(part[f"{measure}_n"].sum())
                entry[measure] = float(part[f"{measure}_sum"].sum()) / n if n else None
                entry[f"{measure}_ratings"] = n
            summary["models"][model] = entry
        table = table.drop("unexpectedness_sum", "specificity_sum").sort(
            "model", "annotator", "sheet_id"
        )
    return table, summary


def run_score(args: argparse.Namespace) -> int:
    key_path = Path(args.key)
    if not key_path.is_file():
        raise ConfigError(f"key {key_path} does not exist")
    key = pl.read_csv(
        key_path, schema_overrides={"item": pl.Int64, "meant_for_post_set": pl.Boolean}
    )
    filled = {}
    for path in args.sheets:
        name = Path(path).stem
        if name in filled:
            name = str(path)
        filled[name] = read_filled(path)
    table, summary = score_sheets(key, filled)
    write_json(summary, args.out)
    if args.out_csv:
        write_text(table.write_csv(float_precision=4), args.out_csv)
    for model, entry in summary["models"].items():
        log.info("human scores of %s: %s", model, entry)
    return 0


def configure_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    export = sub.add_parser("export", help="blinded annotation sheets (HTML and CSV) and their key")
    export.add_argument("--rows", required=True, help="evaluation rows Parquet")
    export.add_argument("--theories", nargs="+", required=True, help="theories Parquet, one per TM")
    export.add_argument("--demographics", help="demographics file (display names)")
    export.add_argument("--sheets-per-model", type=int, default=38, help="paper: 38")
    export.add_argument("--seed", type=int, default=0)
    export.add_argument("--out-dir", required=True)
    score = sub.add_parser("score", help="score filled sheets")
    score.add_argument("--key", required=True, help="key.csv written by export")
    score.add_argument(
        "--sheets", nargs="+", required=True, help="filled sheets CSV, one per annotator"
    )
    score.add_argument("--out", required=True, help="JSON summary per model")
    score.add_argument("--out-csv", help="per (annotator, sheet) scores CSV")


def run(args: argparse.Namespace) -> int:
    if args.action == "export":
        return run_export(args)
    return run_score(args)
