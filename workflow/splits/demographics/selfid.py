"""Self-identification validation and thresholds (docs/method.md §2.5).

``splits selfid search`` (one demographic d):

1. Phrase search over D_d: every self-ID and anti-self-ID phrase of d, compiled into ONE regex
   ``(?i)\\b(?:p1|p2|...)\\b`` (longest phrase first, so "I'm a Roman Catholic" wins over
   "I'm a Roman"), case-insensitive, on word boundaries, where an apostrophe in a phrase matches
   straight and curly apostrophes (' ’ ‘ ʼ) and a space matches any run of spaces, tabs or
   no-break spaces. Matching is vectorised in polars (Rust regex): a ``contains`` filter, then one
   ``replace_all`` that brackets every match with NUL markers and a ``split`` whose piece lengths
   give each match's character offsets; no Python loop over posts. Offsets (``start``, ``end``)
   are Python string indices (characters) into the post's text, as ``re.finditer`` reports them.
2. Verification of each occurrence in its context window (``context_chars`` each side):
   ``rules`` (vectorised regex rules, first that fires wins): ``quoted`` (inside
   quotation marks on its line, or right after an opening quote), ``reported_speech`` ("says",
   "said", "told me that", "was like" right before it; not "I say", "I tell them"), ``sarcasm`` ("/s", "yeah right", "jk"
   near it), ``hypothetical`` ("if", "imagine", "pretend", "what if", "even if" shortly before
   it), ``negated`` ("not", "never", "don't think", "wouldn't say" shortly before it),
   ``question`` (the clause ends in "?", or the sentence opens with a question word), ``visit``
   (a visitor, not a member: the phrase names a visit ("I'm visiting") or the clause after it
   names an occasion ("I'm at Emory for the debate tournament", "... for a campus tour"), a
   passing time ("this weekend", "next Tuesday"), an event as the place ("I was at a pledge
   party") or "in town"; never for a phrase of past membership such as "I graduated"), otherwise
   ``statement`` (verified); or ``llm``: a registry model answers YES/NO to the prompt
   ``resources/prompts/selfid_verify.txt``; answers without YES/NO are counted as undetected
   and not verified.
3. Curves: users of U_d binned by group-ness percentile (``bins`` equal bins); per
   bin the verified self-ID and anti-self-ID occurrences per user, divided by the bin's mean
   posts per user (= occurrences per post; shown per 1,000 posts).
4. Threshold: the demographics file's value, or with ``auto`` the breakpoint of a segmented
   ("hinge") least-squares fit of the self-ID curve: constant below the breakpoint, a straight
   line above it, bins weighted by their posts, breakpoints at bin edges with at least two
   non-empty bins on each side; the breakpoint with the smallest weighted squared error wins
   (ties: the lower one). This finds where the self-ID rate leaves its low floor and starts
   rising with group-ness, whether it then jumps (a step) or climbs (a ramp). Without any
   verified self-ID, or with fewer than four non-empty bins (massive ties), ``auto`` falls
   back to the 75th percentile with a warning (``source: auto_fallback`` in threshold.json).
5. Formula comparison: for each group-ness formula (``sum_log``, ``breadth_x_volume``,
   ``entropy``): ROC AUC of the score for users with verified self-IDs (and no verified
   anti-self-ID) against users with verified anti-self-IDs (and no verified self-ID), the
   self-ID and anti-self-ID rates above the threshold and their ratio, the share of self-ID
   users above the threshold, and the formula's own ``auto`` threshold.

Modules: ``phrases`` (step 1), ``verify`` (step 2), ``curves`` (steps 3-4), this module (step 5,
the plot, the stage's functions), ``cli`` (the ``splits selfid`` command).

``splits selfid summary`` gathers the per-demographic thresholds into ``thresholds.json`` and the
comparisons into one CSV and one Markdown table.

With ``ingest.buckets`` > 1, D_d comes in parts (one per posts bucket): ``splits selfid find``
runs step 1 on one part, and ``splits selfid search --matches`` runs steps 2-5 on all the parts'
matches, put in (post id, offset) order, as the search over the one D_d orders them.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from splits.config.definitions import THRESHOLDS_SUPPORT_KEY, Demographic
from splits.demographics.curves import (
    AUTO_FALLBACK,
    SUMS,
    UserSummary,
    auto_threshold,
    breakpoint_support,
    curve_from_sums,
    match_counts,
    rates_at,
    stop_reasons,
    summarise_users,
    with_counts,
)
from splits.demographics.groupness import FORMULAS, groupness_column
from splits.demographics.phrases import PhraseSet, find_phrases
from splits.demographics.settings import SelfidFindSettings, SelfidSettings
from splits.demographics.verify import VERIFIERS, verify_llm, verify_rules
from splits.errors import ConfigError
from splits.health import Finding
from splits.plots import message_figure, save_figure

log = logging.getLogger(__name__)

OPT_IN_KEY = "demographics.accept_unsupported_thresholds"
STAGE = "selfid"
# the users table's columns the search reads (a user's counts, bin and every formula's score),
# read alone: the rest of a large table (its demographic, groupness and seed counts) is not held
USER_SEARCH_COLUMNS = ["author", "percentile", "n_posts", *map(groupness_column, FORMULAS)]
# the verified matches of D_d's parts merged into one file in (post id, offset) order: a match
# carries its context window (~0.5-1 KB), so the merge holds few rows, few from each part (at
# the merge's usual 1,024 rows a file, 30 parts held 30 MB and it grew with P), and its files
# small row groups (a reader decodes one at a time per file)
MATCH_MERGE_ROWS = 8_192
MATCH_MERGE_MIN_BATCH_ROWS = 64
MATCH_MERGE_GROUP_ROWS = 512


# --------------------------------------------------------------------------- formula comparison


def auc_from_counts(positives: np.ndarray, negatives: np.ndarray) -> float | None:
    """Mann-Whitney ROC AUC (ties count one half) from the positives and negatives at each
    score value, the values in ascending order; computed in integers (the count of pairs
    doubled), so that it is exact. None without both classes."""
    pos, neg = positives.astype(np.int64), negatives.astype(np.int64)
    n_pos, n_neg = int(pos.sum()), int(neg.sum())
    if n_pos == 0 or n_neg == 0:
        return None
    below = np.cumsum(neg) - neg  # negatives with a smaller score
    has = np.nonzero(pos)[0]  # Python integers (exact at any size), over the positives' values
    doubled = sum(int(pos[i]) * (2 * int(below[i]) + int(neg[i])) for i in has)
    return doubled / (2 * n_pos * n_neg)


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float | None:
    """:func:`auc_from_counts` of one score per user, ``labels`` True for the positives."""
    labels = np.asarray(labels, dtype=bool)
    counts = (
        pl.DataFrame({"score": np.asarray(scores), "pos": labels})
        .group_by("score")
        .agg(pl.col("pos").sum().alias("pos"), (~pl.col("pos")).sum().alias("neg"))
        .sort("score")
    )
    return auc_from_counts(counts["pos"].to_numpy(), counts["neg"].to_numpy())


def compare_formulas(summary: UserSummary, threshold: float, demographic: str) -> pl.DataFrame:
    """One row per group-ness formula: how well it separates verified self-ID users from
    verified anti-self-ID users, overall (AUC) and above the threshold (rates, ratio); each
    formula's users ranked by its own score (``summary.by_score``)."""
    rows = []
    for formula in FORMULAS:
        sums = summary.by_score[groupness_column(formula)]
        # the users at or above the threshold, by the formula's own percentiles
        above = sums.filter(pl.col("percentile") >= threshold)
        total = {name: int(sums.get_column(name).sum()) for name in SUMS}
        over = {name: int(above.get_column(name).sum()) for name in SUMS}
        rows.append(
            {
                "demographic": demographic,
                "formula": formula,
                "threshold": float(threshold),
                "users": total["users"],
                "users_above": over["users"],
                "self_id_users": total["self_users"],
                "anti_id_users": total["anti_users"],
                # sums: sorted by the score (curves.summarise_users)
                "auc_self_vs_anti": auc_from_counts(
                    sums.get_column("self_only").to_numpy(), sums.get_column("anti_only").to_numpy()
                ),
                "self_rate_above_per_1k": 1000.0 * over["n_self"] / over["n_posts"]
                if over["n_posts"]
                else None,
                "anti_rate_above_per_1k": 1000.0 * over["n_anti"] / over["n_posts"]
                if over["n_posts"]
                else None,
                "self_anti_ratio_above": over["n_self"] / over["n_anti"]
                if over["n_anti"]
                else None,
                "self_id_users_above_share": (
                    over["self_users"] / total["self_users"] if total["self_users"] else None
                ),
                "auto_threshold": auto_threshold(curve_from_sums(sums, summary.bins)),
            }
        )
    return pl.DataFrame(rows, schema=COMPARISON_SCHEMA)


COMPARISON_SCHEMA = {
    "demographic": pl.String,
    "formula": pl.String,
    "threshold": pl.Float64,
    "users": pl.Int64,
    "users_above": pl.Int64,
    "self_id_users": pl.Int64,
    "anti_id_users": pl.Int64,
    "auc_self_vs_anti": pl.Float64,
    "self_rate_above_per_1k": pl.Float64,
    "anti_rate_above_per_1k": pl.Float64,
    "self_anti_ratio_above": pl.Float64,
    "self_id_users_above_share": pl.Float64,
    "auto_threshold": pl.Float64,
}


# --------------------------------------------------------------------------- plot


def plot_curve(
    curve: pl.DataFrame,
    threshold: float,
    display_name: str,
    source: str,
    path: str | Path,
    unsupported: bool = False,
) -> None:
    """The self-ID and anti-self-ID curves with the threshold; ``unsupported``: the label says
    so beside the threshold (an ``auto`` threshold the curve does not support, used on opt-in)."""
    if unsupported:
        source = f"{source}, unsupported"
    # the object API with the Agg canvas: no pyplot state, no GUI backend, faster import
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    data = curve.filter(pl.col("n_posts") > 0)  # empty bins (tied users) are not drawn
    if data.height == 0:
        message_figure(
            path,
            f"Self-identification: {display_name}",
            f"no user with a post in any percentile bin (threshold {threshold:g}, {source})",
        )
        return
    x = ((data["percentile_lo"] + data["percentile_hi"]) / 2).to_numpy()
    fig = Figure(figsize=(6.4, 4.0), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for column, label, style in (
        ("self_rate", "self-ID", "o-"),
        ("anti_rate", "anti-self-ID", "s--"),
    ):
        y = data[column].cast(pl.Float64).to_numpy() * 1000.0
        ax.plot(x, y, style, label=label, markersize=4)
    ax.axvline(threshold, color="grey", linestyle=":", label=f"threshold {threshold:g} ({source})")
    ax.set_xlabel("group-ness percentile within U_d")
    ax.set_ylabel("verified occurrences per 1,000 posts")
    ax.set_title(f"Self-identification: {display_name}")
    ax.set_xlim(0, 100)
    ax.legend(loc="upper left", frameon=False)
    fig.tight_layout()
    save_figure(fig, path)


# --------------------------------------------------------------------------- stage


@dataclass
class SearchResult:
    matches: pl.DataFrame
    curve: pl.DataFrame
    comparison: pl.DataFrame
    threshold: dict


def resolve_threshold(demographic: Demographic, curve: pl.DataFrame) -> dict:
    """The threshold used downstream: the file's fixed value, or the ``auto`` rule; where the
    curve cannot support the rule (no verified self-ID at all, or fewer than four non-empty
    bins) ``auto`` falls back to AUTO_FALLBACK with a warning (source ``auto_fallback``)."""
    has_signal = int(curve["self_occurrences"].sum()) > 0
    auto = auto_threshold(curve) if has_signal else None
    if demographic.threshold != "auto":
        return {
            "threshold": float(demographic.threshold),
            "source": "fixed",
            "auto_threshold": auto,
        }
    if auto is None:
        log.warning(
            "%s: the self-ID curve cannot place an auto threshold (%s); using %s",
            demographic.key,
            "no verified self-ID" if not has_signal else "too few non-empty bins",
            AUTO_FALLBACK,
        )
        return {"threshold": AUTO_FALLBACK, "source": "auto_fallback", "auto_threshold": None}
    return {"threshold": auto, "source": "auto", "auto_threshold": auto}


def _support(key: str, summary: UserSummary, threshold: dict) -> dict:
    """The breakpoint's support (see :func:`breakpoint_support`), logged; a warning when an
    ``auto`` threshold rests on a breakpoint the data do not support."""
    if threshold["auto_threshold"] is None:
        below, above = rates_at(summary.by_percentile, threshold["threshold"])
        n_self = int(summary.by_percentile.get_column("n_self").sum())
        reasons = ["no auto breakpoint (no verified self-ID, or fewer than four non-empty bins)"]
        if threshold["source"] != "fixed":
            reasons += stop_reasons(n_self, below, above, 0.0)
        return {
            "supported": False,
            "reason": "no auto breakpoint (no curve to read)",
            "verified_self_ids": n_self,
            "self_rate_below_per_1k": below,
            "self_rate_above_per_1k": above,
            "stop_reasons": reasons if threshold["source"] != "fixed" else [],
        }
    seed = int.from_bytes(hashlib.sha256(f"selfid-support:{key}".encode()).digest()[:8], "little")
    support = breakpoint_support(summary, threshold["auto_threshold"], seed=seed)
    detail = (
        f"breakpoint {threshold['auto_threshold']:g}: self-ID rate "
        f"{support['self_rate_below_per_1k']} -> {support['self_rate_above_per_1k']} per 1,000 "
        f"posts (permutation p = {support['permutation_p']:.3g} over {support['permutations']} "
        f"shuffles of the users); {support['bootstrap_agreement']:.0%} of "
        f"{support['bootstrap_replicates']} bootstrap resamples place it within one bin; "
        f"{support['non_empty_bins']} non-empty bins, {support['verified_self_ids']} verified "
        "self-IDs"
    )
    if threshold["source"] == "auto" and not support["supported"]:
        log.warning(
            "%s: the auto threshold is weakly supported (%s); read the self-ID curve and fix "
            "the threshold in the demographics file if it does not show a change point",
            key,
            detail,
        )
    else:
        log.info("%s: %s", key, detail)
    return support


def _check_context(context_chars: int) -> None:
    if context_chars < 0:
        raise ConfigError("demographics.context_chars: must be >= 0")


def search_matches(
    posts: pl.LazyFrame, demographic: Demographic, settings: SelfidFindSettings
) -> pl.DataFrame:
    """Step 1 of the module docstring: every phrase match of the demographic in ``posts``, in
    (post id, offset) order whatever the order of the posts (D_d's parts come bucket by
    bucket, and the matches of the parts searched one by one are concatenated)."""
    _check_context(settings.context_chars)
    phrases = PhraseSet.from_demographic(demographic)
    return sort_matches(find_phrases(posts, phrases, settings.context_chars))


def sort_matches(matches: pl.DataFrame) -> pl.DataFrame:
    """Matches in (post id, offset) order, ties kept in their order."""
    return matches.sort("post_id", "start", maintain_order=True)


def selfid_search(
    users: pl.DataFrame,
    posts: pl.LazyFrame,
    demographic: Demographic,
    settings: SelfidSettings,
    model=None,
    template: str | None = None,
) -> SearchResult:
    """Steps 1-5 of the module docstring for one demographic (``model`` and ``template``: the
    LLM verifier's, with ``settings.verifier`` llm)."""
    check_settings(settings)
    find = SelfidFindSettings(context_chars=settings.context_chars)
    matches = search_matches(posts, demographic, find)
    return selfid_from_matches(users, matches, demographic, settings, model, template)


def _check_bins(bins: int) -> None:
    if not 2 <= bins <= 100:
        raise ConfigError("demographics.bins: must be in [2, 100]")


def check_settings(settings: SelfidSettings) -> None:
    """The settings' bounds, checked before the search reads any post."""
    _check_context(settings.context_chars)
    _check_bins(settings.bins)


def verify_matches(
    matches: pl.DataFrame,
    demographic: Demographic,
    settings: SelfidSettings,
    model=None,
    template: str | None = None,
) -> tuple[pl.DataFrame, int]:
    """Step 2 of the module docstring: ``matches`` with each one's ``reason`` and
    ``verified``, and how many LLM answers had no YES/NO (0 with the rules). Each match is
    verified in its own context, so the matches may come in parts, verified one by one."""
    verifier = settings.verifier
    if verifier == "rules":
        return verify_rules(matches), 0
    if verifier == "llm":
        if model is None or template is None:
            raise ConfigError("demographics.verifier_model: the llm verifier needs a model")
        return verify_llm(matches, demographic, model, template)
    raise ConfigError(f"demographics.verifier: {verifier!r} is not one of {VERIFIERS}")


@dataclass
class MatchTally:
    """The counts ``threshold.json`` reports of the verified matches, added up part by part."""

    totals: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)

    def add(self, verified: pl.DataFrame, undetected: int) -> None:
        """One part's verified matches (:func:`verify_matches`)."""
        is_verified = pl.col("verified")
        row = verified.select(
            pl.len().alias("matches"),
            is_verified.sum().alias("verified"),
            (is_verified & (pl.col("kind") == "self")).sum().alias("verified_self"),
            (is_verified & (pl.col("kind") == "anti")).sum().alias("verified_anti"),
        ).row(0, named=True)
        self.totals.update({name: int(n) for name, n in row.items()})
        self.totals["undetected"] += undetected
        self.reasons.update(dict(verified.group_by("reason").len().iter_rows()))

    def report(self) -> dict:
        names = ("matches", "verified", "verified_self", "verified_anti", "undetected")
        return {
            **{name: int(self.totals[name]) for name in names},
            "reasons": {r: int(n) for r, n in sorted(self.reasons.items())},
        }


def selfid_from_matches(
    users: pl.DataFrame | Iterable[pl.DataFrame],
    matches: pl.DataFrame,
    demographic: Demographic,
    settings: SelfidSettings,
    model=None,
    template: str | None = None,
) -> SearchResult:
    """Steps 2-5 of the module docstring from the phrase matches of step 1
    (:func:`search_matches`, in its order). ``users``: the users table (columns
    USER_SEARCH_COLUMNS), whole or in batches (``splits.io.iter_parquet_slices``): the steps
    read sums over its users (``curves.UserSummary``), never the users at once."""
    _check_bins(settings.bins)
    verified, undetected = verify_matches(matches, demographic, settings, model, template)
    tally = MatchTally()
    tally.add(verified, undetected)
    counts = match_counts(verified)
    batches = [users] if isinstance(users, pl.DataFrame) else users
    per_user = (with_counts(batch, counts) for batch in batches)
    curve, comparison, threshold = selfid_from_tally(per_user, tally, demographic, settings)
    return SearchResult(verified, curve, comparison, threshold)


def selfid_from_tally(
    per_user: Iterable[pl.DataFrame],
    tally: MatchTally,
    demographic: Demographic,
    settings: SelfidSettings,
) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    """Steps 3-5 of the module docstring (curve, threshold with its support, formula
    comparison) from the users in batches, each user with its verified counts
    (``curves.with_counts``), and the verified matches' :class:`MatchTally` (complete once the
    batches are read: a caller may verify the matches part by part as it yields them)."""
    bins = settings.bins
    _check_bins(bins)
    scores = [groupness_column(f) for f in FORMULAS]
    summary = summarise_users(per_user, bins, scores)
    curve = curve_from_sums(summary.by_percentile, bins)
    threshold = resolve_threshold(demographic, curve)
    threshold["support"] = _support(demographic.key, summary, threshold)
    comparison = compare_formulas(summary, threshold["threshold"], demographic.key)
    threshold.update(
        {"demographic": demographic.key, "verifier": settings.verifier, **tally.report()}
    )
    return curve, comparison, threshold


def _markdown_table(frame: pl.DataFrame) -> str:
    def fmt(value) -> str:
        if value is None:
            return ""
        if isinstance(value, float):
            return "" if math.isnan(value) else f"{value:.3g}"
        return str(value)

    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(fmt(v) for v in row) + " |" for row in frame.iter_rows()]
    return "\n".join([header, rule, *body]) + "\n"


def summarise(
    threshold_records: list[dict], comparison_files: list[str]
) -> tuple[dict, pl.DataFrame]:
    """``thresholds.json``: each demographic's threshold percentile, and under
    THRESHOLDS_SUPPORT_KEY (not a demographic) how each was chosen and how well its breakpoint
    is supported (from each demographic's threshold.json, read); the formula comparison table."""
    thresholds = {}
    support = {}
    for data in threshold_records:
        thresholds[data["demographic"]] = data["threshold"]
        support[data["demographic"]] = {
            "source": data.get("source"),
            "auto_threshold": data.get("auto_threshold"),
            "threshold": data["threshold"],
            "accepted_unsupported": bool(data.get("accepted_unsupported")),
            **(data.get("support") or {}),
        }
    comparison = (
        pl.concat([pl.read_parquet(p) for p in comparison_files], how="vertical")
        if comparison_files
        else pl.DataFrame(schema=COMPARISON_SCHEMA)
    ).sort("demographic", "formula")
    out: dict = dict(sorted(thresholds.items()))
    out[THRESHOLDS_SUPPORT_KEY] = dict(sorted(support.items()))
    return out, comparison


def support_findings(support: dict[str, dict]) -> list[Finding]:
    """Run-health findings of the thresholds: an ``auto`` threshold used although its curve does
    not support it (on opt-in), or one whose breakpoint moves with the sample."""
    findings = []
    for key, s in sorted(support.items()):
        if s.get("source") == "fixed":
            continue
        rates = (
            f"verified self-IDs per 1,000 posts {s.get('self_rate_below_per_1k')} below, "
            f"{s.get('self_rate_above_per_1k')} above"
        )
        if s.get("stop_reasons"):
            findings.append(
                Finding(
                    STAGE,
                    "selfid_unsupported_threshold",
                    f"demographic {key}",
                    f"auto threshold {s['threshold']:g} used although its self-ID curve does not "
                    f"support it ({'; '.join(s['stop_reasons'])}; {rates})",
                    f"set a fixed threshold for {key} in the demographics file (and "
                    f"{OPT_IN_KEY}: false)",
                )
            )
        elif not s.get("supported", True):
            findings.append(
                Finding(
                    STAGE,
                    "selfid_unstable_threshold",
                    f"demographic {key}",
                    f"auto threshold {s['threshold']:g}: only "
                    f"{s.get('bootstrap_agreement', 0):.0%} of bootstrap resamples place the "
                    f"breakpoint within one bin of it ({rates})",
                    f"read the self-ID curve and set a fixed threshold for {key} in the "
                    "demographics file",
                )
            )
    return findings


COMPARISON_INTRO = (
    "# Group-ness formulas: separation of self-ID from anti-self-ID users\n\n"
    "auc_self_vs_anti: ROC AUC of the formula's score, users with verified self-IDs (and no "
    "verified anti-self-ID) against users with verified anti-self-IDs (and no self-ID). "
    "Rates are verified occurrences per 1,000 posts of the users at or above the threshold "
    "percentile under that formula.\n\n"
)


def comparison_markdown(comparison: pl.DataFrame) -> str:
    """formula_comparison.md: what the columns mean, then the table."""
    return COMPARISON_INTRO + _markdown_table(comparison)
