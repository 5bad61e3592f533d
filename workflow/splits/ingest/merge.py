"""Merge the ingested shards into the posts table (``splits merge-posts``).

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


def merge(posts: list[str], reports: list[str], out: str | Path, report_path: str | Path) -> dict:
    if len(posts) != len(reports):
        raise ConfigError("merge-posts: give one report per posts file")
    for p in posts + reports:
        if not Path(p).exists():
            raise ConfigError(f"merge-posts: input {p} does not exist")
    shard_reports = [read_json(r) for r in reports]
    # the scan's own row index keeps the duplicate check streaming (see drop_duplicate_ids)
    lf = pl.scan_parquet([str(p) for p in posts], row_index_name="_row").select(
        "_row", *POSTS_SCHEMA
    )
    dup_hashes = duplicate_hashes(lf)
    # bots are judged on the de-duplicated posts: a record seen twice is one post
    verdicts = bot_verdicts(drop_duplicate_ids(lf, dup_hashes)[0])
    bots = sorted(verdicts)
    for name, verdict in verdicts.items():
        log.info("bot dropped: %s (%d posts): %s", name, verdict["posts"], verdict["reason"])
    n_bot_posts = 0
    if bots:
        is_bot = pl.col("author").is_in(bots)
        n_bot_posts = lf.filter(is_bot).select(pl.len()).collect().item()
        lf = lf.filter(~is_bot)
    lf, n_dup = drop_duplicate_ids(lf, dup_hashes)
    records = sum(int(s["records"]) for s in shard_reports)
    dropped = {r: sum(int(s["dropped"].get(r, 0)) for s in shard_reports) for r in REASONS}
    dropped["bot"] += int(n_bot_posts)
    dropped["duplicate_id"] += int(n_dup)
    if records - sum(dropped.values()) <= 0:
        raise _no_posts_error(shard_reports, records, dropped)
    write_parquet(lf, out)
    n_posts = pl.scan_parquet(str(out)).select(pl.len()).collect().item()
    report = {
        "records": records,
        "posts": int(n_posts),
        "dropped": dropped,
        "dropped_total": int(sum(dropped.values())),
        "blank_lines": sum(int(s.get("blank_lines", 0)) for s in shard_reports),
        "input_bytes": sum(int(s.get("input_bytes", 0)) for s in shard_reports),
        "merge": {
            "templated_bots": bots,
            "bots": verdicts,
            "bot_posts": int(n_bot_posts),
            "cross_shard_duplicates": int(n_dup),
        },
        "shards": {s["shard"]: s for s in shard_reports},
        "cleaning": CLEANING_RULES,
    }
    if report["records"] != report["posts"] + report["dropped_total"]:
        raise RuntimeError(
            f"ingest accounting mismatch: {records} records, {n_posts} posts, {report['dropped_total']} dropped"
        )
    write_json(report, report_path)
    return report
