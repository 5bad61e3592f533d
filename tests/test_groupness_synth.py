"""Group-ness and self-ID validation on the generated sample corpus, scored against its ground
truth (membership, planted change points, the kind of every planted phrase occurrence).

The corpus is made by ``splits synth`` with the default config's seed; the test turns its
ConvoKit utterances into a posts table directly (ids, authors, subreddits, texts; deleted texts
dropped) so these tests depend on the generator only, not on the ingest and graph stages.
"""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import polars as pl
import pytest
from splits.config.definitions import load_demographics
from splits.config.settings import schema_defaults
from splits.demographics.d_posts import demographic_posts
from splits.demographics.groupness import build_users, read_bots
from splits.demographics.phrases import PhraseSet, find_phrases
from splits.demographics.selfid import roc_auc, selfid_search
from splits.demographics.settings import GroupnessSettings, SelfidSettings


@pytest.fixture(scope="module")
def synth(tmp_path_factory, repo_root):
    out = tmp_path_factory.mktemp("synth")
    demographics = repo_root / "config" / "demographics.sample.yaml"
    cmd = [
        sys.executable,
        "-m",
        "splits.cli",
        "synth",
        "--demographics",
        str(demographics),
        "--topics",
        str(repo_root / "config" / "topics.yaml"),
        "--out",
        str(out / "corpus"),
        "--truth-dir",
        str(out / "truth"),
        "--config",
        str(repo_root / "config" / "config.yaml"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    frames = [
        pl.read_ndjson(path, infer_schema_length=None).select(
            pl.col("id").alias("post_id"),
            pl.col("speaker").alias("author"),
            pl.col("meta").struct.field("subreddit").str.to_lowercase().alias("subreddit"),
            pl.col("text"),
            pl.lit("comment").alias("kind"),
            pl.col("timestamp").cast(pl.Int64).alias("created_utc"),
            pl.col("meta").struct.field("score").cast(pl.Int64).alias("score"),
            pl.col("conversation_id"),
            pl.col("reply-to").cast(pl.String).alias("reply_to"),
        )
        for path in sorted((out / "corpus").glob("*/utterances.jsonl"))
    ]
    posts = (
        pl.concat(frames)
        .filter(
            ~pl.col("text").is_in(["[deleted]", "[removed]", ""])
            & (pl.col("author") != "[deleted]")
        )
        .unique("post_id", keep="first")
        .sort("post_id")
    )
    per_sub = posts.group_by("subreddit").len()
    kept = per_sub.filter(pl.col("len") >= 20)["subreddit"].to_list()
    meta = __import__("json").loads((out / "truth" / "synth_meta.json").read_text())
    result = {
        "posts": posts,
        "kept": kept,
        "demographics": load_demographics(demographics),
        "truth": pl.read_parquet(out / "truth" / "ground_truth.parquet"),
        "post_truth": pl.read_parquet(out / "truth" / "post_truth.parquet"),
        "meta": meta,
        "users": {},
        "selfid": {},
    }
    for d in result["demographics"]:
        groupness = schema_defaults(GroupnessSettings)
        users = build_users(posts.lazy(), kept, d, read_bots(None), groupness).users
        d_posts = demographic_posts(posts.lazy(), users, kept)
        result["users"][d.key] = users
        result["selfid"][d.key] = selfid_search(users, d_posts, d, schema_defaults(SelfidSettings))
    return result


def change_point(meta: dict, key: str) -> float:
    return float(meta["demographics"][key]["change_point"])


def test_default_groupness_auc_for_true_membership(synth):
    for d in synth["demographics"]:
        users = synth["users"][d.key].join(
            synth["truth"].filter(pl.col("demographic") == d.key).select("author", "is_member"),
            on="author",
            how="left",
        )
        labels = users["is_member"].fill_null(False).to_numpy()
        auc = roc_auc(users["groupness"].to_numpy(), labels)
        print(f"{d.key}: {users.height} users, {labels.sum()} members, AUC {auc:.3f}")
        assert auc >= 0.85, d.key


def test_auto_threshold_finds_the_planted_change_point(synth):
    for d in synth["demographics"]:
        found = synth["selfid"][d.key].threshold
        planted = change_point(synth["meta"], d.key)
        print(f"{d.key}: auto {found['threshold']} planted {planted}")
        assert found["source"] == "auto"
        assert abs(found["threshold"] - planted) <= 10, d.key


def test_above_threshold_selfid_rises_and_antiselfid_does_not(synth):
    for d in synth["demographics"]:
        result = synth["selfid"][d.key]
        curve = result.curve.filter(pl.col("n_posts") > 0)
        t = result.threshold["threshold"]
        above = curve.filter(pl.col("percentile_lo") >= t)
        below = curve.filter(pl.col("percentile_lo") < t)

        def rate(frame, column):
            return frame[column].sum() / frame["n_posts"].sum()

        self_above, self_below = rate(above, "self_occurrences"), rate(below, "self_occurrences")
        anti_above, anti_below = rate(above, "anti_occurrences"), rate(below, "anti_occurrences")
        print(
            f"{d.key}: self {self_below:.4f} -> {self_above:.4f}, "
            f"anti {anti_below:.4f} -> {anti_above:.4f} per post"
        )
        assert self_above > 3 * self_below, d.key
        assert anti_above <= anti_below, d.key
        # the self-ID rate of the top bins is above that of every bin below the threshold
        assert above["self_rate"].min() > below["self_rate"].max(), d.key


def test_formula_comparison_has_every_formula(synth):
    for d in synth["demographics"]:
        table = synth["selfid"][d.key].comparison
        assert table["formula"].to_list() == ["sum_log", "breadth_x_volume", "entropy"]
        assert (table["auc_self_vs_anti"] > 0.5).all(), d.key
        assert (table["self_anti_ratio_above"] > 1).all(), d.key


def test_rule_verifier_on_planted_contexts(synth):
    truth = synth["post_truth"].select("post_id", "kind_of_text")
    expected = {
        "selfid": True,
        "anti_selfid": True,
        "selfid_quoted": False,
        "selfid_question": False,
        "selfid_negated": False,
        "selfid_hypothetical": False,
    }
    frames = [r.matches.join(truth, on="post_id", how="inner") for r in synth["selfid"].values()]
    matches = pl.concat(frames).filter(pl.col("kind_of_text").is_in(list(expected)))
    wanted = matches["kind_of_text"].replace_strict(expected, return_dtype=pl.Boolean)
    correct = matches["verified"] == wanted
    accuracy = correct.mean()
    print(f"rule verifier on {matches.height} planted occurrences: accuracy {accuracy:.3f}")
    for kind in expected:
        part = correct.filter(matches["kind_of_text"] == kind)
        print(f"  {kind}: {part.mean():.3f} of {part.len()}")
    assert matches.height >= 200
    assert accuracy >= 0.9


def reference_matches(texts: list[tuple[str, str]], phrases: list[str]) -> list[tuple]:
    """Plain Python ``re`` reference: one pattern, built here from the phrases."""
    alternatives = []
    for phrase in sorted(
        {" ".join(p.lower().replace("’", "'").split()) for p in phrases}, key=lambda p: (-len(p), p)
    ):
        words = [re.escape(w).replace("'", "['’‘ʼ]") for w in phrase.split(" ")]
        alternatives.append(r"[ \t\xa0]+".join(words))
    pattern = re.compile(r"\b(?:" + "|".join(alternatives) + r")\b", re.IGNORECASE)
    return [
        (post_id, m.start(), m.end(), m.group(0))
        for post_id, text in texts
        for m in pattern.finditer(text)
    ]


def test_phrase_matching_equals_python_re_on_generated_text(synth):
    # every post with a planted phrase occurrence, and a sample of the others (Python's re
    # over the whole corpus is what the benchmark measures; it is too slow for a unit test)
    planted = synth["post_truth"].filter(pl.col("kind_of_text").str.contains("selfid"))["post_id"]
    all_posts = synth["posts"].select("post_id", "author", "text")
    posts = pl.concat(
        [
            all_posts.filter(pl.col("post_id").is_in(planted.implode())),
            all_posts.filter(~pl.col("post_id").is_in(planted.implode())).sample(3000, seed=2),
        ]
    )
    rng = np.random.default_rng(0)
    # add apostrophe, case and spacing variants of the generated text
    variants = posts.sample(n=1500, seed=1).with_columns(
        (pl.col("post_id") + "v").alias("post_id"),
        pl.col("text").str.replace_all("'", "’").str.replace_all(" a ", "  A ").str.to_uppercase(),
    )
    posts = pl.concat([posts, variants])
    texts = list(posts.select("post_id", "text").iter_rows())
    total = 0
    for d in synth["demographics"]:
        phrases = list(d.self_id_phrases) + list(d.anti_self_id_phrases)
        found = find_phrases(posts, PhraseSet.from_demographic(d), context_chars=40)
        mine = list(found.select("post_id", "start", "end", "match").iter_rows())
        ref = reference_matches(texts, phrases)
        order = {pid: i for i, (pid, _) in enumerate(texts)}
        assert sorted(mine, key=lambda r: (order[r[0]], r[1])) == ref, d.key
        total += len(ref)
        # contexts are the windows around the match in the original text
        text_of = dict(texts)
        sample = found.sample(n=min(50, found.height), seed=int(rng.integers(1000)))
        for row in sample.iter_rows(named=True):
            text = text_of[row["post_id"]]
            assert row["left_context"] == text[max(0, row["start"] - 40) : row["start"]]
            assert row["right_context"] == text[row["end"] : row["end"] + 40]
    assert total >= 1000
