"""The sandbox's answers as HTML fragments and the lift@k curve (no web library needed).

Every number shown carries its full value in a ``data-value`` attribute, so a test reading the
page compares it with the run's table without parsing rounded text. Post texts are shown without
authors, and Reddit username mentions inside a text (``u/name``) are masked as ``u/[user]``.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping

import numpy as np
from matplotlib.figure import Figure

from splits.sandbox.query import NO_VALUE, Answer, RunSettings, Session
from splits.sandbox.typed import clean_text

#: a Reddit username mention: u/name or /u/name (names are 3-20 letters, digits, _ or -)
MENTION = re.compile(r"(?<![\w/])/?u/[A-Za-z0-9_-]{2,}")
MASKED_MENTION = "u/[user]"

CSS = """
#sb-message .sb-error {color: #a40000; font-weight: 600;}
#sb-message .sb-note, .sb-notes li {color: #6b4e00;}
.sb-query {margin: 0 0 0.4em 0;}
table.sb-stats, table.sb-session {border-collapse: collapse; font-size: 0.92em;}
table.sb-stats th, table.sb-stats td, table.sb-session th, table.sb-session td {
  border-bottom: 1px solid #ddd; padding: 3px 8px; text-align: right;}
table.sb-stats th, table.sb-session th {background: #f3f3f3;}
table.sb-session td.sb-lexicon {text-align: left; max-width: 28em; overflow-wrap: anywhere;}
tr.sb-significant td.sb-q {font-weight: 700;}
ol.sb-posts {padding-left: 2.2em;}
ol.sb-posts li {margin-bottom: 0.7em;}
.sb-post-meta {font-size: 0.85em; color: #555;}
.sb-post-text {max-height: 9em; overflow: auto; white-space: pre-wrap;}
.sb-post-text mark {background: #ffe066; padding: 0 1px;}
.sb-group.sb-target {color: #0b5394; font-weight: 600;}
.sb-group.sb-other {color: #7a3e00; font-weight: 600;}
.sb-group.sb-hidden {color: #999;}
"""


def lift_text(value: float) -> str:
    return NO_VALUE if value is None or not np.isfinite(value) else f"{value:.3f}"


def p_text(value: float) -> str:
    return NO_VALUE if value is None or not np.isfinite(value) else f"{value:.3g}"


def percent(fraction: float) -> str:
    return f"{fraction * 100:g}%"


def _value(tag: str, css: str, value: float, text: str) -> str:
    return f'<{tag} class="{css}" data-value="{float(value)!r}">{html.escape(text)}</{tag}>'


def message_html(text: str = "", kind: str = "error") -> str:
    """A one-line message (``kind`` error or note); empty text gives an empty block."""
    text = clean_text(text)  # a lone surrogate cannot be sent to the page
    if not text:
        return ""
    return f'<div class="sb-{kind}">{html.escape(text)}</div>'


def answer_html(answer: Answer, names: Mapping[str, str], settings: RunSettings) -> str:
    """Statistics of one answer: per k the depth, hits, lift, interval, p, session q and the
    release's band; the triviality; the run's own row when the run has this hypothesis."""
    r = answer.result
    other = r.group_b if r.target == r.group_a else r.group_a
    alpha = settings.lift.alpha
    level = f"{(1 - alpha) * 100:g}%"
    rows = r.rows
    parts = [
        '<p class="sb-query">Lexicon <b>'
        + html.escape(", ".join(r.lexicon))
        + "</b> on <b>"
        + html.escape(r.topic)
        + "</b>: does <b>"
        + html.escape(names.get(r.target, r.target))
        + "</b> use it more than <b>"
        + html.escape(names.get(other, other))
        + "</b>?</p>"
    ]
    if rows.height:
        first = rows.row(0, named=True)
        share = first["target_in_list"] / first["list_size"]
        parts.append(
            f'<p class="sb-query">{r.matching_posts:,} posts match an entry; the ranked list holds '
            f"{first['list_size']:,} posts, {first['target_in_list']:,} of them the target's "
            f"(base rate {share:.3f}). q: Benjamini-Hochberg over this session's "
            f"{answer.session_queries} quer{'y' if answer.session_queries == 1 else 'ies'} "
            f"({answer.session_tests} tests).</p>"
        )
        head = (
            "<tr><th>k</th><th>n (top posts)</th><th>target in top n</th><th>lift</th>"
            f"<th>interval ({level})</th><th>p</th><th>q (session)</th>"
            "<th>null band (release's &quot;CI&quot;)</th></tr>"
        )
        body = []
        for row, q in zip(rows.iter_rows(named=True), answer.q, strict=True):
            significant = " sb-significant" if q < alpha else ""
            body.append(
                f'<tr class="sb-row{significant}" data-k="{row["k_fraction"]!r}">'
                f"<td>{percent(row['k_fraction'])}</td><td>{row['n']:,}</td>"
                f"<td>{row['hits_at_n']:,}</td>"
                + _value("td", "sb-lift", row["lift"], lift_text(row["lift"]))
                + "<td>["
                + _value("span", "sb-low", row["lift_low"], lift_text(row["lift_low"]))
                + ", "
                + _value("span", "sb-high", row["lift_high"], lift_text(row["lift_high"]))
                + "]</td>"
                + _value("td", "sb-p", row["p_value"], p_text(row["p_value"]))
                + _value("td", "sb-q", q, p_text(q))
                + f"<td>[{lift_text(row['null_band_low'])}, "
                f"{lift_text(row['null_band_high'])}]</td></tr>"
            )
        parts.append(f'<table class="sb-stats" id="sb-lift-table">{head}{"".join(body)}</table>')
    parts.append(_triviality_html(answer, settings))
    if answer.run_rows is not None and answer.run_rows.height:
        run = answer.run_rows
        at = run.filter((run["k_fraction"] - settings.report_k).abs() < 1e-12)
        row = (at if at.height else run).row(0, named=True)
        parts.append(
            '<p class="sb-run">In the run\'s table as <code>'
            + html.escape(row["hypothesis_id"])
            + f"</code> (source {html.escape(row['source'])}): at k = "
            f"{percent(row['k_fraction'])} lift "
            + _value("span", "sb-run-lift", row["lift"], lift_text(row["lift"]))
            + ", q over the run "
            + _value("span", "sb-run-q", row["q_value"], p_text(row["q_value"]))
            + ".</p>"
        )
    if answer.notes:
        items = "".join(f"<li>{html.escape(n)}</li>" for n in answer.notes)
        parts.append(f'<ul class="sb-notes">{items}</ul>')
    return "\n".join(parts)


def _triviality_html(answer: Answer, settings: RunSettings) -> str:
    r = answer.result
    if r.triviality is None:
        return '<p class="sb-triviality">Triviality: not computed.</p>'
    below = [t for t in settings.thresholds if r.triviality < t]
    verdict = f"non-trivial below {min(below):g}" if below else "trivial at every threshold"
    covered = (
        "identity words inside the lexicon: " + html.escape(", ".join(r.identity_words_covered))
        if r.identity_words_covered
        else "no identity word inside the lexicon"
    )
    return (
        '<p class="sb-triviality">Triviality (recall of the target\'s identity words): '
        + _value("b", "sb-triviality-value", r.triviality, f"{r.triviality:.3f}")
        + f" ({verdict}; {covered}).</p>"
    )


def highlighted(text: str, spans) -> str:
    """``text`` as HTML with the character ``spans`` in ``<mark>`` and username mentions
    masked."""
    text = str(text)
    spans = [(int(s), int(e)) for s, e in spans]
    mentions = [(m.start(), m.end()) for m in MENTION.finditer(text)]
    cuts = sorted({0, len(text), *(c for s in spans for c in s), *(c for m in mentions for c in m)})
    out = []
    for start, end in zip(cuts, cuts[1:], strict=False):
        mention = next(((s, e) for s, e in mentions if s <= start and end <= e), None)
        if mention is not None and start != mention[0]:
            continue  # the rest of a masked mention
        piece = MASKED_MENTION if mention is not None else text[start:end]
        chunk = html.escape(piece)
        if any(s <= start and end <= e for s, e in spans):
            chunk = f"<mark>{chunk}</mark>"
        out.append(chunk)
    return "".join(out)


def posts_html(answer: Answer | None, names: Mapping[str, str], show_groups: bool) -> str:
    """The top of the ranked list: rank, score, the text with matched entries highlighted, and
    the author's group only when ``show_groups`` (so the reader can guess first)."""
    if answer is None:
        return ""
    r = answer.result
    items = []
    for row in r.posts.iter_rows(named=True):
        if show_groups:
            css = "sb-target" if row["group"] == r.target else "sb-other"
            group = (
                f'<span class="sb-group {css}" data-group="{html.escape(row["group"])}">'
                f"{html.escape(names.get(row['group'], row['group']))}</span>"
            )
        else:
            group = '<span class="sb-group sb-hidden">group hidden</span>'
        how = (
            f"score {row['score']:.2f}"
            if not row["padding"]
            else "no entry matches (random order after the matching posts)"
        )
        items.append(
            f'<li class="sb-post" data-rank="{row["rank"]}"><div class="sb-post-meta">'
            f"{how} · {group}</div>"
            f'<div class="sb-post-text">{highlighted(row["text"], row["spans"])}</div></li>'
        )
    shown = "shown" if show_groups else "hidden: guess, then tick the box to check"
    return (
        f"<p>The top {r.posts.height} posts of the ranked list (authors never shown; each "
        f'post\'s group {shown}).</p><ol class="sb-posts">{"".join(items)}</ol>'
    )


def session_html(session: Session, settings: RunSettings) -> str:
    """Every query of the session, latest first, with lift, p and q at the report's k."""
    if not session.results:
        return ""
    q = session.q()
    k = settings.report_k
    rows = []
    for number, (key, result) in reversed(list(enumerate(session.results.items(), start=1))):
        other = result.group_b if result.target == result.group_a else result.group_a
        at = [i for i, f in enumerate(result.rows["k_fraction"].to_list()) if abs(f - k) < 1e-12]
        if at:
            i = at[0]
            lift = lift_text(result.rows["lift"][i])
            p, q_at = p_text(result.rows["p_value"][i]), p_text(q[key][i])
        else:
            lift = p = q_at = NO_VALUE
        rows.append(
            f"<tr><td>{number}</td>"
            f'<td class="sb-lexicon">{html.escape(", ".join(result.lexicon))}</td>'
            f"<td>{html.escape(result.topic)}</td><td>{html.escape(result.target)}</td>"
            f"<td>{html.escape(other)}</td><td>{lift}</td><td>{p}</td><td>{q_at}</td></tr>"
        )
    return (
        f"<p>This session: {len(session.results)} queries, {session.tests} tests (q is "
        "Benjamini-Hochberg over all of them and changes as queries are added).</p>"
        '<table class="sb-session"><tr><th>#</th><th>lexicon</th><th>topic</th><th>target</th>'
        f"<th>compared with</th><th>lift@{percent(k)}</th><th>p</th><th>q</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def curve_figure(answer: Answer, settings: RunSettings) -> Figure | None:
    """lift@k against k (log scale) with the confidence interval, the release's null band and
    the line lift = 1."""
    rows = answer.result.rows
    if not rows.height:
        return None
    k = rows["k_fraction"].to_numpy()
    lift = rows["lift"].to_numpy()
    figure = Figure(figsize=(6.4, 3.4), dpi=100)
    ax = figure.add_subplot()
    ax.fill_between(
        k,
        rows["null_band_low"].to_numpy(),
        rows["null_band_high"].to_numpy(),
        color="#cccccc",
        alpha=0.6,
        label="null band (unrelated lexicon)",
    )
    ax.errorbar(
        k,
        lift,
        yerr=[lift - rows["lift_low"].to_numpy(), rows["lift_high"].to_numpy() - lift],
        marker="o",
        capsize=3,
        color="#0b5394",
        label=f"lift@k ({(1 - settings.lift.alpha) * 100:g}% interval)",
    )
    ax.axhline(1.0, color="black", linewidth=0.7, linestyle=":")
    ax.set_xscale("log")
    ax.set_xticks(k, [percent(f) for f in k])
    ax.minorticks_off()
    ax.set_xlabel("k (share of the ranked list)")
    ax.set_ylabel("lift@k")
    ax.legend(fontsize=8, frameon=False)
    figure.tight_layout()
    return figure
