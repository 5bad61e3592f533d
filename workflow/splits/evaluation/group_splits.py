"""Groups of TMs compared per split (the paper's strong vs weak TMs, its Tables 6-8 and 12-15).

For an experiment with ``groups`` (name -> TMs), for every CM and k and every pair of groups
(in the order the config lists them; the difference is the first group minus the second):

- per split (pair, demographic, category, category x demographic, topic) and key, on the rows
  every TM of both groups answered: each group's accuracy (its TMs' answers pooled, with a 95%
  Wilson interval that treats a row's TMs as independent, so descriptive), the difference, a
  paired sign-flip test of the per-row difference of the groups' mean correctness, and the
  Benjamini-Hochberg q across the keys of that split (``group_splits.csv``, ``.md``);
- the keys of each split ranked by their gap, largest first, each with three example rows and,
  for each, a theory from each side with whether the CM was right with it
  (``group_gaps.md``), for reading what the stronger theories say that the weaker do not;
- a plot of the gaps per split (``plots/group_gaps.png``).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
from pathlib import Path
from typing import Any

import polars as pl

from splits.errors import ConfigError
from splits.evaluation.metrics import SPLITS, markdown_table, split_frame
from splits.stats import benjamini_hochberg, sign_flip_test, wilson_interval

log = logging.getLogger(__name__)

#: example rows shown for each ranked key
EXAMPLES = 3
META_COLUMNS = ("demographic_A", "demographic_B", "category", "topic")
TABLE_SCHEMA = {
    "cm": pl.String,
    "k": pl.Int64,
    "group_1": pl.String,
    "group_2": pl.String,
    "split": pl.String,
    "key": pl.String,
    "rows": pl.Int64,
    "n_1": pl.Int64,
    "correct_1": pl.Int64,
    "accuracy_1": pl.Float64,
    "ci_low_1": pl.Float64,
    "ci_high_1": pl.Float64,
    "n_2": pl.Int64,
    "correct_2": pl.Int64,
    "accuracy_2": pl.Float64,
    "ci_low_2": pl.Float64,
    "ci_high_2": pl.Float64,
    "difference": pl.Float64,
    "p_value": pl.Float64,
    "q_bh": pl.Float64,
    "rank": pl.Int64,
}


def parse_ordered_groups(text: str, tms: set[str]) -> list[tuple[str, list[str]]]:
    """Groups as ``[[name, [tm, ...]], ...]`` JSON (config order), checked against the TMs."""
    try:
        groups = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"--groups: not JSON ({err.msg})") from err
    if not isinstance(groups, list) or not all(
        isinstance(g, list) and len(g) == 2 and isinstance(g[1], list) and g[1] for g in groups
    ):
        raise ConfigError("--groups: must be a JSON list of [name, [TM, ...]]")
    if len(groups) < 2:
        raise ConfigError("--groups: needs at least two groups to compare")
    for name, members in groups:
        unknown = sorted(set(members) - tms)
        if unknown:
            raise ConfigError(
                f"groups.{name}: {unknown[0]!r} has no predictions in this experiment"
            )
    return [(str(name), [str(m) for m in members]) for name, members in groups]


def per_row_scores(
    part: pl.DataFrame, first: tuple[str, list[str]], second: tuple[str, list[str]]
) -> pl.DataFrame:
    """One row per evaluation row answered by every TM of both groups: each group's mean
    correctness (``score_1``, ``score_2``) and correct counts, with the row's split columns."""
    sides = []
    for side, (_, members) in enumerate((first, second), start=1):
        members_part = part.filter(pl.col("tm").is_in(members))
        sides.append(
            members_part.group_by("quadruplet_id")
            .agg(
                pl.col("tm").n_unique().alias(f"tms_{side}"),
                pl.col("correct").cast(pl.Int64).sum().alias(f"correct_{side}"),
                pl.col("correct").cast(pl.Float64).mean().alias(f"score_{side}"),
                *([pl.col(c).first() for c in ("eval_row", *META_COLUMNS)] if side == 1 else []),
            )
            .filter(pl.col(f"tms_{side}") == len(set(members)))
        )
    return sides[0].join(sides[1], on="quadruplet_id", how="inner").sort("eval_row")


def split_table(
    scores: pl.DataFrame, split: str, sizes: tuple[int, int], seed: int
) -> list[dict[str, Any]]:
    """The rows of one split's table (without the config columns), BH across its keys."""
    frame = split_frame(scores, split)
    records = []
    for (key,), part in frame.group_by("key", maintain_order=False):
        differences = (part["score_1"] - part["score_2"]).to_numpy()
        record: dict[str, Any] = {"split": split, "key": str(key), "rows": part.height}
        for side, size in enumerate(sizes, start=1):
            n = part.height * size
            correct = int(part[f"correct_{side}"].sum())
            low, high = wilson_interval(correct, n)
            record.update(
                {
                    f"n_{side}": n,
                    f"correct_{side}": correct,
                    f"accuracy_{side}": correct / n if n else math.nan,
                    f"ci_low_{side}": low,
                    f"ci_high_{side}": high,
                }
            )
        record["difference"] = record["accuracy_1"] - record["accuracy_2"]
        record["p_value"] = sign_flip_test(differences, seed=seed)[1]
        records.append(record)
    records.sort(key=lambda r: (-r["difference"], r["p_value"], r["key"]))
    for q, record in zip(benjamini_hochberg([r["p_value"] for r in records]), records, strict=True):
        record["q_bh"] = q
    for rank, record in enumerate(records, start=1):
        record["rank"] = rank
    return records


def group_splits_table(
    predictions: pl.DataFrame, groups: list[tuple[str, list[str]]], seed: int
) -> tuple[pl.DataFrame, dict[tuple, pl.DataFrame]]:
    """(the table over every CM, k, pair of groups, split and key; the per-row scores of each
    (cm, k, group_1, group_2), for picking examples)."""
    records = []
    scores_of = {}
    for cm, k in sorted(set(predictions.select("cm", "k").iter_rows())):
        part = predictions.filter((pl.col("cm") == cm) & (pl.col("k") == k))
        for first, second in itertools.combinations(groups, 2):
            scores = per_row_scores(part, first, second)
            if not scores.height:
                log.warning(
                    "CM %s k=%d: no row answered by every TM of %s and %s",
                    cm,
                    k,
                    first[0],
                    second[0],
                )
                continue
            scores_of[(cm, k, first[0], second[0])] = scores
            sizes = (len(set(first[1])), len(set(second[1])))
            for split in SPLITS:
                base = {"cm": cm, "k": k, "group_1": first[0], "group_2": second[0]}
                records += [{**base, **r} for r in split_table(scores, split, sizes, seed)]
    return pl.DataFrame(records, schema=TABLE_SCHEMA), scores_of


# --------------------------------------------------------------------------- examples


def theory_lookup(paths: list[str]) -> dict[tuple[str, int, str], str]:
    """(tm, k, quadruplet_id) -> theory of the given theories files."""
    out = {}
    for path in paths:
        if not Path(path).is_file():
            raise ConfigError(f"theories {path} do not exist")
        frame = pl.read_parquet(path, columns=["quadruplet_id", "tm", "k", "theory"])
        for qid, tm, k, theory in frame.iter_rows():
            out[(tm, int(k), qid)] = theory
    return out


def example_rows(scores: pl.DataFrame, split: str, key: str, n: int = EXAMPLES) -> pl.DataFrame:
    """Up to ``n`` rows of one key, those where the first group does best against the second
    first (then by evaluation row)."""
    frame = split_frame(scores, split).filter(pl.col("key") == key)
    return (
        frame.with_columns((pl.col("score_1") - pl.col("score_2")).alias("_gap"))
        .sort("_gap", "eval_row", descending=[True, False])
        .head(n)
    )


def _quoted(theory: str | None) -> str:
    lines = [line.strip() for line in str(theory or "").splitlines() if line.strip()]
    if not lines:
        return "  > (empty theory)"
    return "\n".join(f"  > {line}" for line in lines)


def gaps_markdown(
    table: pl.DataFrame,
    scores_of: dict[tuple, pl.DataFrame],
    groups: list[tuple[str, list[str]]],
    predictions: pl.DataFrame,
    theories: dict[tuple[str, int, str], str],
    experiment: str,
    top: int,
) -> str:
    members = dict(groups)
    correct = {
        (tm, int(k), cm, qid): bool(c)
        for tm, k, cm, qid, c in predictions.select(
            "tm", "k", "cm", "quadruplet_id", "correct"
        ).iter_rows()
    }
    lines = [
        f"# Experiment {experiment}: splits with the largest gaps between groups of TMs",
        "",
        f"Per split, its {top} keys with the largest gap (first group's accuracy minus the "
        "second's, on the rows every TM of both answered), with the paired sign-flip p and the "
        f"Benjamini-Hochberg q across the split's keys; under each, {EXAMPLES} rows of that key "
        "(those where the first group did best against the second first) with a theory from "
        "each side and whether the CM was right with it.",
        "",
    ]
    for (cm, k, first, second), scores in scores_of.items():
        lines += [f"## {first} vs {second} (CM {cm}, k={k})", ""]
        part = table.filter(
            (pl.col("cm") == cm)
            & (pl.col("k") == k)
            & (pl.col("group_1") == first)
            & (pl.col("group_2") == second)
        )
        for split in SPLITS:
            ranked = part.filter(pl.col("split") == split).sort("rank").head(top)
            lines += [f"### By {split.replace('_', ' / ')}", ""]
            for row in ranked.iter_rows(named=True):
                lines.append(
                    f"{row['rank']}. **{row['key']}**: {first} {row['accuracy_1']:.3f} vs "
                    f"{second} {row['accuracy_2']:.3f}, gap {row['difference']:+.3f} "
                    f"({row['rows']} rows; p = {row['p_value']:.3g}, q = {row['q_bh']:.3g})"
                )
                for i, example in enumerate(
                    example_rows(scores, split, row["key"]).iter_rows(named=True)
                ):
                    qid = example["quadruplet_id"]
                    lines.append(
                        f"   - row {qid} ({example['topic']}; {example['demographic_A']} vs "
                        f"{example['demographic_B']}):"
                    )
                    for name in (first, second):
                        tms = members[name]
                        tm = tms[i % len(tms)]
                        mark = "right" if correct.get((tm, k, cm, qid)) else "wrong"
                        lines.append(f"     - {name} ({tm}, CM {mark}):")
                        lines.append(
                            "\n".join(
                                "   " + line
                                for line in _quoted(theories.get((tm, k, qid))).split("\n")
                            )
                        )
                lines.append("")
            lines.append("")
    return "\n".join(lines) + "\n"


def group_splits_markdown(table: pl.DataFrame, scores_of: dict[tuple, Any], experiment: str) -> str:
    """group_splits.md: per CM, k and pair of groups, one table per split."""
    md = [
        f"# Experiment {experiment}: groups of TMs per split",
        "",
        "difference = accuracy of group_1 minus group_2 on the rows every TM of both answered; "
        "p_value: paired sign-flip test of the per-row difference; q_bh: Benjamini-Hochberg "
        "across the keys of one table; intervals pool a group's TMs (descriptive).",
        "",
    ]
    shown = table.with_columns(pl.col(pl.Float64).round(4))
    for (cm, k, first, second), _ in scores_of.items():
        part = shown.filter(
            (pl.col("cm") == cm)
            & (pl.col("k") == k)
            & (pl.col("group_1") == first)
            & (pl.col("group_2") == second)
        )
        for split in SPLITS:
            body = (
                part.filter(pl.col("split") == split)
                .sort("key")
                .select(
                    "key",
                    "rows",
                    "accuracy_1",
                    "ci_low_1",
                    "ci_high_1",
                    "accuracy_2",
                    "ci_low_2",
                    "ci_high_2",
                    "difference",
                    "p_value",
                    "q_bh",
                )
            )
            title = f"{first} vs {second} by {split.replace('_', ' / ')} (CM {cm}, k={k})"
            md.append(markdown_table(body, title))
    return "\n".join(md)


def read_experiment_predictions(
    path: str | Path, rows: pl.DataFrame, rows_path: str
) -> pl.DataFrame:
    """An experiment's predictions.parquet (written by ``splits metrics``), checked against its
    evaluation rows."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"predictions {path} do not exist")
    predictions = pl.read_parquet(path)
    missing = [
        c
        for c in ("tm", "cm", "k", "quadruplet_id", "correct", *META_COLUMNS)
        if c not in predictions.columns
    ]
    if missing:
        raise ConfigError(
            f"{path}: missing column(s) {', '.join(missing)} (write it with splits metrics)"
        )
    unknown = set(predictions["quadruplet_id"].unique()) - set(rows["quadruplet_id"])
    if unknown:
        raise ConfigError(f"{path}: {len(unknown)} predictions are of rows not in {rows_path}")
    return predictions
