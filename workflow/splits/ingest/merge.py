"""Merge the ingested shards into the posts table (``splits merge-posts``), or, with
``ingest.buckets`` = P > 1, each bucket by author of the shards into posts bucket b
(``splits merge-bucket``, :func:`merge_bucket`) and the buckets' reports into the ingest report
(``splits ingest-report``, :func:`reduce_reports`); both ways apply the rules below to the same
posts, since all posts of an author, and so all copies of a post id with one author, are in one
bucket (docs/cluster.md).

- drops post ids already seen in an earlier shard (first occurrence kept, in the order the
  shards are given), counted as ``duplicate_id``;
- judges accounts by what they write about themselves, on the de-duplicated posts (a record
  seen twice is one post). An account whose name says bot (``...bot``, ``...Bot``, ``-bot``,
  ``...BOT``, optionally followed by digits or ``_``) is a bot when its posts are templated (at
  least 3 posts and at most half of them distinct once digits are masked), when at least 3 posts
  end in the same signature line (digits masked) in at least half of its posts, or when at least
  half of its posts carry a bot's marks: a signature ("I am a bot" / "I'm a (ro)bot" and their
  kin, "beep boop" with any punctuation between ("Beep. Boop."), "bleep bloop", "this action
  was performed automatically", "downvote to remove"), a link to its own subreddit, inbox or
  user page (``r/<name>``, ``to=<name>``, ``](/u/<name>``, ``](/user/<name>`` or a full
  ``https://www.reddit.com/user/<name>/`` URL), or a footer of three or more ``^superscript``
  words; so a bot seen once is caught too. Any other account is a bot when at least 2 of its
  posts, and at least half of them, carry a signature or a link to its own user page. All
  records of a bot, duplicates included, are counted as ``bot`` (bot comes before duplicate_id
  in the order of reasons); the report lists each detected bot with its posts and the reason
  (``merge.bots``), and the job log says it in one line each;
- writes the posts table and the ingest report: per shard and in total, every dropped record by
  reason, and the invariant ``records = posts + dropped`` checked. No posts at all is an
  InputError naming the inputs.
"""

from __future__ import annotations

import logging
from pathlib import Path

import polars as pl

from splits.errors import ConfigError, InputError
from splits.ingest.bots import bot_verdicts
from splits.ingest.clean import POSTS_SCHEMA, REASONS, drop_duplicate_ids, duplicate_hashes
from splits.io import read_json, write_json, write_parquet

log = logging.getLogger(__name__)


CLEANING_RULES = [
    "Each dropped record is counted once, under the first reason that applies, in this order:",
    "invalid_utf8: the line is not valid UTF-8",
    "malformed_json: the line is not a JSON object (a truncated last line included)",
    "missing_field:<name>: a required field (id, author, conversation_id, timestamp, text, subreddit) is absent or null",
    "invalid_field:timestamp: the timestamp is not a number",
    "deleted_text / removed_text: the text (a submission's body) is [deleted] / [removed]",
    "empty_text: only white space (a submission with an empty body keeps its title as its text)",
    "deleted_author: the author is [deleted]",
    "bot: AutoModerator, the shipped known-bot list, an account whose name ends in bot whose (de-duplicated) posts are templated, end in the same line or carry a bot's marks, or any account whose posts are signed as a bot's (merge.bots gives each with its reason)",
    "duplicate_id: a post id seen before (first occurrence kept, within and across shards)",
    "Subreddit names are lowercased; a submission's text is title + '\\n\\n' + body; ConvoKit reply-to -1 becomes null; blank lines are not records (counted as blank_lines).",
]


def _no_posts_error(shard_reports: list[dict], records: int, dropped: dict) -> InputError:
    inputs = [str(s.get("input", s.get("shard"))) for s in shard_reports]
    shown = ", ".join(inputs[:5]) + (f" and {len(inputs) - 5} more" if len(inputs) > 5 else "")
    reasons = ", ".join(f"{r} {n:,}" for r, n in dropped.items() if n)
    why = f"all dropped ({reasons})" if records else "the inputs hold no records"
    return InputError(
        f"no posts after ingest: {records:,} records in {len(inputs)} input(s) ({shown}); "
        f"{why}; check ingest.inputs"
    )


def _check_inputs(flag: str, paths: list[str]) -> None:
    for p in paths:
        if not Path(p).exists():
            raise ConfigError(f"{flag}: input {p} does not exist")


def _merged(posts: list[str]) -> tuple[pl.LazyFrame, dict[str, dict], int, int]:
    """The posts of ``posts`` (in order) without bots and repeated post ids: the lazy frame,
    the bot verdicts, the bots' records and the duplicates dropped."""
    # the scan's own row index keeps the duplicate check streaming (see drop_duplicate_ids)
    lf = pl.scan_parquet([str(p) for p in posts], row_index_name="_row").select(
        "_row", *POSTS_SCHEMA
    )
    dup_hashes = duplicate_hashes(lf)
    # bots are judged on the de-duplicated posts: a record seen twice is one post
    verdicts = bot_verdicts(drop_duplicate_ids(lf, dup_hashes)[0])
    for name, verdict in verdicts.items():
        log.info("bot dropped: %s (%d posts): %s", name, verdict["posts"], verdict["reason"])
    n_bot_posts = 0
    if verdicts:
        is_bot = pl.col("author").is_in(sorted(verdicts))
        n_bot_posts = int(lf.filter(is_bot).select(pl.len()).collect().item())
        lf = lf.filter(~is_bot)
    lf, n_dup = drop_duplicate_ids(lf, dup_hashes)
    return lf, verdicts, n_bot_posts, int(n_dup)


def _dropped(shard_reports: list[dict], n_bot_posts: int, n_dup: int) -> tuple[int, dict]:
    records = sum(int(s["records"]) for s in shard_reports)
    dropped = {r: sum(int(s["dropped"].get(r, 0)) for s in shard_reports) for r in REASONS}
    dropped["bot"] += n_bot_posts
    dropped["duplicate_id"] += n_dup
    if records - sum(dropped.values()) <= 0:
        raise _no_posts_error(shard_reports, records, dropped)
    return records, dropped


def _ingest_report(
    shard_reports: list[dict], verdicts: dict[str, dict], n_bot_posts: int, n_dup: int,
    n_posts: int,
) -> dict:  # fmt: skip
    records, dropped = _dropped(shard_reports, n_bot_posts, n_dup)
    report = {
        "records": records,
        "posts": int(n_posts),
        "dropped": dropped,
        "dropped_total": int(sum(dropped.values())),
        "blank_lines": sum(int(s.get("blank_lines", 0)) for s in shard_reports),
        "input_bytes": sum(int(s.get("input_bytes", 0)) for s in shard_reports),
        "merge": {
            "templated_bots": sorted(verdicts),
            "bots": verdicts,
            "bot_posts": int(n_bot_posts),
            "cross_shard_duplicates": int(n_dup),
        },
        "shards": {s["shard"]: s for s in shard_reports},
        "cleaning": CLEANING_RULES,
    }
    if report["records"] != report["posts"] + report["dropped_total"]:
        raise RuntimeError(
            f"ingest accounting mismatch: {records} records, {n_posts} posts, "
            f"{report['dropped_total']} dropped"
        )
    return report


def merge(posts: list[str], reports: list[str], out: str | Path, report_path: str | Path) -> dict:
    """The single merge (``ingest.buckets`` = 1): every shard's posts into one table."""
    if len(posts) != len(reports):
        raise ConfigError("merge-posts: give one report per posts file")
    _check_inputs("merge-posts", posts + reports)
    shard_reports = [read_json(r) for r in reports]
    lf, verdicts, n_bot_posts, n_dup = _merged(posts)
    _dropped(shard_reports, n_bot_posts, n_dup)  # no posts at all: stop before writing
    write_parquet(lf, out)
    n_posts = pl.scan_parquet(str(out)).select(pl.len()).collect().item()
    report = _ingest_report(shard_reports, verdicts, n_bot_posts, n_dup, n_posts)
    write_json(report, report_path)
    return report


def merge_bucket(posts: list[str], out: str | Path, report_path: str | Path) -> dict:
    """One bucket's merge (``ingest.buckets`` > 1): bucket b of every shard, in shard order,
    into posts bucket b, with the same first-occurrence rule and bot verdicts as the single
    merge (every post of an author, and every copy of a post id with one author, is in the
    bucket). Its report (posts, bot records, duplicates, verdicts) is summed by
    :func:`reduce_reports`. An empty bucket is a table of no rows, not an error."""
    _check_inputs("merge-bucket", posts)
    lf, verdicts, n_bot_posts, n_dup = _merged(posts)
    write_parquet(lf, out)
    n_posts = pl.scan_parquet(str(out)).select(pl.len()).collect().item()
    report = {
        "posts": int(n_posts),
        "bot_posts": n_bot_posts,
        "duplicate_id": n_dup,
        "bots": verdicts,
        "inputs": [str(p) for p in posts],
    }
    write_json(report, report_path)
    return report


def reduce_reports(
    shard_reports: list[str], bucket_reports: list[str], report_path: str | Path
) -> dict:
    """The ingest report of a bucketed merge: the shards' reports and the buckets' reports added
    up, the same totals, reasons and bots as the single merge's report, plus each bucket's
    posts (``buckets``, to see how even the buckets are)."""
    _check_inputs("ingest-report", shard_reports + bucket_reports)
    shards = [read_json(r) for r in shard_reports]
    buckets = [read_json(r) for r in bucket_reports]
    verdicts: dict[str, dict] = {}
    for bucket in buckets:
        both = set(verdicts) & set(bucket["bots"])
        if both:  # an author in two buckets: the buckets are not from one partition
            raise ConfigError(
                f"ingest-report: {len(both)} author(s) judged in two buckets; "
                "the bucket reports are not of one run"
            )
        verdicts.update(bucket["bots"])
    try:
        report = _ingest_report(
            shards,
            dict(sorted(verdicts.items())),
            sum(int(b["bot_posts"]) for b in buckets),
            sum(int(b["duplicate_id"]) for b in buckets),
            sum(int(b["posts"]) for b in buckets),
        )
    except RuntimeError as err:  # the sums disagree: reports of different runs or splits
        raise ConfigError(f"ingest-report: {err}; the reports are not of one run") from err
    report["buckets"] = [int(b["posts"]) for b in buckets]
    write_json(report, report_path)
    return report
