"""A lexicon as a page's visitor types it: read into entries (``parse_lexicon``) with one-line
errors, and written back (``format_lexicon``)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from splits.hypotheses.engine import QueryError
from splits.hypotheses.lexicon import Limits, entry_tokens

#: typographic quotes a pasted phrase may come with, read as the ASCII double quote
_QUOTES = str.maketrans({"“": '"', "”": '"', "„": '"', "«": '"', "»": '"'})
#: a lexicon entry: a phrase in double quotes, or a run of characters other than space, comma,
#: semicolon and the double quote
_ENTRY = re.compile(r'"([^"]*)"|([^\s,;"]+)')
_SEPARATOR = re.compile(r"[\s,;]")
#: characters a typed lexicon may have per token it may hold (a longer text is refused unread)
CHARS_PER_TOKEN = 40
#: longest piece of a query quoted back in a message
SHOWN_CHARS = 60
#: control characters (C0 and C1, and DEL) read as a space
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: UTF-16 surrogates, which no text holds alone (a broken paste; they cannot be encoded)
_SURROGATE = re.compile(r"[\ud800-\udfff]")
#: the longest value a dropdown of the page may send: its choices are names of the run (topics,
#: groups, sources, sorts), so a longer value is no choice of the page and is refused unread
MAX_CHOICE_CHARS = 200
#: the longest message the page shows (a message quotes at most ``SHOWN_CHARS`` of a value)
MAX_MESSAGE_CHARS = 400


def clean_text(text: str | None) -> str:
    """Typed text without lone surrogates (dropped) and control characters (a space each)."""
    return _CONTROL.sub(" ", _SURROGATE.sub("", text or ""))


def shown(text: str) -> str:
    """``text`` as quoted back in a message: at most ``SHOWN_CHARS`` characters."""
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def sent_text(value: object, what: str, max_chars: int | None = MAX_CHOICE_CHARS) -> str | None:
    """A text a page sent for ``what`` (None when nothing was chosen). The page's controls send
    texts, but any client can post anything to the server: another type, or a text longer than
    ``max_chars``, raises ``QueryError`` with a line that names ``what`` and never the value."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise QueryError(f"the {what} sent is not a text: choose the {what} from the list")
    if max_chars is not None and len(value) > max_chars:
        raise QueryError(
            f"the {what} sent has {len(value):,} characters, more than any {what} of this run "
            f"({max_chars:,} at most): choose the {what} from the list"
        )
    return value


def sent_choice(value: object, choices: Sequence, what: str) -> object:
    """``value`` when it is one of ``choices`` (equal and of the same type: the k 0.05, never the
    text "0.05"); else ``QueryError`` naming ``what``, never the value."""
    if not any(type(value) is type(c) and value == c for c in choices):
        raise QueryError(
            f"the {what} sent is not one of the page's choices: choose it from the list"
        )
    return value


def message_text(text: str) -> str:
    """``text`` as the page may show it: one line, no lone surrogate, at most
    ``MAX_MESSAGE_CHARS`` characters."""
    text = " ".join(clean_text(text).split())
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"


def max_query_chars(limits: Limits) -> int:
    return limits.max_entries * limits.max_phrase_tokens * CHARS_PER_TOKEN


def parse_lexicon(text: str | None, limits: Limits) -> list[str]:
    """The entries of a typed lexicon: words separated by spaces, commas or semicolons, and
    phrases in double quotes (``finna, "on god", y'all``). Repeated entries (same tokens) are
    kept once. Raises ``QueryError`` (one line) for an empty lexicon, an unclosed quote, an
    entry with no letter or digit, a phrase longer than ``limits.max_phrase_tokens`` tokens or
    more than ``limits.max_entries`` entries, or a text longer than ``max_query_chars`` (refused
    before it is read). Lone surrogates and control characters are cleaned out first."""
    text = clean_text(text).translate(_QUOTES)
    if len(text) > max_query_chars(limits):
        raise QueryError(
            f"the lexicon has {len(text):,} characters; at most {max_query_chars(limits):,} "
            f"({CHARS_PER_TOKEN} per token of hypotheses.max_entries x "
            "hypotheses.max_phrase_tokens)"
        )
    if text.count('"') % 2:
        raise QueryError('a double quote is not closed (phrases go in "double quotes")')
    entries: list[str] = []
    seen: set[tuple[str, ...]] = set()
    for match in _ENTRY.finditer(text):
        quoted = match.group(1) is not None
        entry = (match.group(1) if quoted else match.group(2)).strip()
        tokens = entry_tokens(entry)
        if not tokens:
            quoted_back = f'"{shown(entry)}"' if quoted else shown(entry)
            raise QueryError(
                f"{quoted_back} has no letter or digit: posts are matched on words (runs of letters and "
                "digits), so it cannot be searched"
            )
        if len(tokens) > limits.max_phrase_tokens:
            raise QueryError(
                f'"{shown(entry)}" has {len(tokens)} tokens; a phrase has at most '
                f"{limits.max_phrase_tokens} (hypotheses.max_phrase_tokens)"
            )
        if tokens not in seen:
            seen.add(tokens)
            entries.append(entry)
    if not entries:
        raise QueryError('the lexicon is empty: type words, and phrases in "double quotes"')
    if len(entries) > limits.max_entries:
        raise QueryError(
            f"the lexicon has {len(entries)} entries; at most {limits.max_entries} "
            "(hypotheses.max_entries)"
        )
    return entries


def format_lexicon(entries: Sequence[str]) -> str:
    """A lexicon as the text ``parse_lexicon`` reads back: entries joined by ", ", those with a
    space, comma or semicolon in double quotes (a double quote inside an entry is dropped: it is
    not part of any token)."""
    out = []
    for entry in entries:
        entry = str(entry).replace('"', "").strip()
        out.append(f'"{entry}"' if _SEPARATOR.search(entry) else entry)
    return ", ".join(out)
