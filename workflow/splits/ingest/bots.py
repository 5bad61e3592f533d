"""Bots: the known-bot list dropped at ingest (AutoModerator and ``resources/bots.txt``), and
the accounts judged bots by what they write about themselves, on all shards at once
(``merge-posts``; the rules are in :mod:`splits.ingest.merge`'s docstring)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from splits.errors import ConfigError

DEFAULT_BOTS = ("AutoModerator",)


def load_bot_list(path: str | Path | None) -> set[str]:
    bots = set(DEFAULT_BOTS)
    if path is None:
        return bots
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"ingest.bots_file: {path} does not exist")
    for line in p.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            bots.add(line)
    return bots


BOT_NAME = r"(?i)bot[0-9_]*$"
# what a bot writes about itself; "^" (Reddit superscript) and "*", "_" (emphasis) are removed
# and apostrophes made straight before matching
BOT_SELF_DECLARED = (
    r"(?i)\bi(?:'m| am) (?:just |only )?an? (?:\w+ ){0,2}(?:ro)?bot\b"
    r"|\bbeep\W{0,6}boop\b|\bbleep\W{0,6}bloop\b|\bboop\W{0,6}beep\b"
    r"|this (?:action|comment|post|reply|message) was (?:performed|generated|posted) automatically"
    r"|\bdownvote (?:this )?(?:comment )?to (?:remove|delete)\b"
)
BOT_FOOTER = r"\^[(\[]?\w"  # a Reddit superscript word; three or more make a bot footer
# a link to a user page: a Markdown link target (/u/NAME, /user/NAME) or a full reddit URL
USER_LINK = r"(?i)(?:\]\(\s*/?u(?:ser)?/|reddit\.com/u(?:ser)?/)"
OWN_SUBREDDIT_OR_INBOX = r"(?i)(?:\br/|\bto=)"
# a literal word of every alternative of BOT_SELF_DECLARED and of USER_LINK: a text that matches
# either holds one of them, in any case (none of their letters has a non-ASCII case variant
# that the patterns' Unicode case folding would match: no k, no s)
SIGN_WORDS = ["bot", "beep", "bleep", "boop", "automatically", "downvote", "u/", "user/"]
MIN_SIGNED_POSTS = 2  # accounts whose name does not say bot: signed posts needed (and half)


def _name_pattern(prefix: str) -> pl.Expr:
    """``prefix`` + the author's own name (regex-escaped) + a word end."""
    escaped = pl.col("author").str.replace_all(r"[^A-Za-z0-9_]", r"\$0")
    return pl.lit(prefix) + escaped + pl.lit(r"(?:\b|/|$)")


def _marks(row: dict) -> str:
    kinds = {
        "declared": "says it is a bot",
        "user_link": "links to its own user page",
        "own_link": "links to its own subreddit or inbox",
        "footer": "^superscript footer",
    }
    return ", ".join(f"{label}: {row[key]}" for key, label in kinds.items() if row[key])


def bot_verdicts(lf: pl.LazyFrame) -> dict[str, dict]:
    """The bots among the posts' authors (see the module docstring), each with its number of
    (de-duplicated) posts and the reason. Give it de-duplicated posts."""
    plain = (
        pl.col("text").str.replace_all(r"[\^*_]", "").str.replace_all("[\u2019\u2018\u02bc]", "'")
    )
    signed_any = plain.str.contains(BOT_SELF_DECLARED) | pl.col("text").str.contains(USER_LINK)
    named = pl.col("author").str.contains(BOT_NAME)
    # the two patterns run only on the posts that hold one of their literal words (or a
    # character ``plain`` removes, which could join one): most posts hold none, and a literal
    # search is many times faster than the patterns (what is kept is the same, see SIGN_WORDS)
    maybe_signed = pl.col("text").str.contains_any(
        SIGN_WORDS, ascii_case_insensitive=True
    ) | pl.col("text").str.contains(r"[\^*_]")
    signers = (
        lf.filter(maybe_signed).select("author", "text").collect().filter(signed_any)["author"]
    )
    candidates = (
        lf.filter(named | pl.col("author").is_in(signers.unique().implode()))
        .select("author", "text")
        .collect()
    )
    if candidates.height == 0:
        return {}
    template = pl.col("text").str.replace_all(r"[0-9]+", "#").str.slice(0, 80)
    last_line = (
        pl.col("text")
        .str.strip_chars()
        .str.extract(r"([^\n]*)$", 1)
        .str.replace_all(r"[0-9]+", "#")
        .str.strip_chars()
    )
    declared = plain.str.contains(BOT_SELF_DECLARED)
    user_link = pl.col("text").str.contains(_name_pattern(USER_LINK))
    own_link = pl.col("text").str.contains(_name_pattern(OWN_SUBREDDIT_OR_INBOX))
    footer = pl.col("text").str.count_matches(BOT_FOOTER) >= 3
    marks = candidates.with_columns(
        named.alias("named"),
        template.alias("template"),
        last_line.alias("last_line"),
        declared.alias("declared"),
        user_link.alias("user_link"),
        own_link.alias("own_link"),
        footer.alias("footer"),
    )
    stats = (
        marks.group_by("author")
        .agg(
            pl.col("named").first(),
            n=pl.len(),
            distinct=pl.col("template").n_unique(),
            declared=pl.col("declared").sum(),
            user_link=pl.col("user_link").sum(),
            own_link=pl.col("own_link").sum(),
            footer=pl.col("footer").sum(),
            marked=(
                pl.col("declared") | pl.col("user_link") | pl.col("own_link") | pl.col("footer")
            ).sum(),
        )
        .join(
            marks.filter(pl.col("last_line") != "")
            .group_by("author", "last_line")
            .len()
            .group_by("author")
            .agg(pl.col("len").max().alias("same_last_line")),
            on="author",
            how="left",
        )
        .with_columns(pl.col("same_last_line").fill_null(0))
        .sort("author")
    )
    bots: dict[str, dict] = {}
    for row in stats.iter_rows(named=True):
        n = row["n"]
        signed = row["declared"] + row["user_link"]
        reason = None
        if row["named"] and n >= 3 and row["distinct"] <= 0.5 * n:
            reason = f"templated: {row['distinct']} distinct of {n} posts (digits masked)"
        elif row["named"] and row["same_last_line"] >= 3 and row["same_last_line"] >= 0.5 * n:
            reason = f"the same last line in {row['same_last_line']} of {n} posts"
        elif row["named"] and row["marked"] >= 0.5 * n:
            reason = f"a bot's marks in {row['marked']} of {n} posts ({_marks(row)})"
        elif not row["named"] and signed >= MIN_SIGNED_POSTS and signed >= 0.5 * n:
            reason = f"signed as a bot in {signed} of {n} posts ({_marks(row)})"
        if reason:
            bots[row["author"]] = {"posts": n, "reason": reason}
    return bots


def templated_bots(lf: pl.LazyFrame) -> list[str]:
    """The names of :func:`bot_verdicts`, sorted."""
    return sorted(bot_verdicts(lf))
