"""Fighting Words benchmark: ``splits.hypotheses.fighting_words`` against ConvoKit 5.0.0's
``FightingWords`` configured alike (the same tokens, n-grams 1-3, ``min_df`` 10, ``max_df`` 0.5,
uniform prior 0.1, no text cleaning), in one run, on the same two groups of real Reddit posts
(Dreaddit: r/ptsd and r/anxiety against r/relationships, repeated ``--copies`` times to scale).
Prints each one's median time over ``--repeats`` runs, the ratio, and the largest z-score
difference (0 up to rounding: the two compute the same numbers).

    python bench/bench_fighting_words.py --reference ../shared/reference --copies 4
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import polars as pl
from tiny import parse_args, skip  # bench/, the script's folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, default=Path("../shared/reference"))
    parser.add_argument("--copies", type=int, default=4, help="the posts repeated this many times")
    parser.add_argument("--repeats", type=int, default=3)
    args = parse_args(parser, copies=1, repeats=1)
    dreaddit = args.reference / "realdata" / "dreaddit" / "dreaddit-train.csv"
    if not dreaddit.is_file():
        skip(f"no reference data at {dreaddit} (see tests/conftest.py: reference_dir)")

    import convokit
    from sklearn.feature_extraction.text import CountVectorizer
    from splits.hypotheses.fighting_words import fighting_words
    from splits.text import words

    frame = pl.read_csv(
        dreaddit,
        columns=["subreddit", "text"],
    )
    texts_a = frame.filter(pl.col("subreddit").is_in(["ptsd", "anxiety"]))["text"].to_list()
    texts_b = frame.filter(pl.col("subreddit") == "relationships")["text"].to_list()
    texts_a, texts_b = texts_a * args.copies, texts_b * args.copies
    settings = dict(ngram_range=(1, 3), min_df=10, max_df=0.5, max_features=None)

    def ours():
        return fighting_words(
            texts_a, texts_b, prior="uniform", uniform_prior=0.1, prior_scale=None, **settings
        )

    utterances = [
        convokit.Utterance(
            id=f"{s}{i}", speaker=convokit.Speaker(id=f"u{s}{i}"), text=t, meta={"side": s}
        )
        for s, texts in (("a", texts_a), ("b", texts_b))
        for i, t in enumerate(texts)
    ]
    corpus = convokit.Corpus(utterances=utterances)

    def theirs():
        vectorizer = CountVectorizer(
            tokenizer=words,
            lowercase=False,
            token_pattern=None,
            ngram_range=(1, 3),
            min_df=10,
            max_df=0.5,
        )
        model = convokit.FightingWords(cv=vectorizer, prior=0.1, text_func=lambda u: u.text)
        model.fit(
            corpus,
            class1_func=lambda u: u.meta["side"] == "a",
            class2_func=lambda u: u.meta["side"] == "b",
        )
        return model.get_ngram_zscores()["z-score"].to_dict()

    timings = {"splits": [], "convokit": []}
    for _ in range(args.repeats):
        start = time.perf_counter()
        result = ours()
        timings["splits"].append(time.perf_counter() - start)
        start = time.perf_counter()
        reference = theirs()
        timings["convokit"].append(time.perf_counter() - start)
    gap = max(abs(z - reference[t]) for t, z in zip(result.terms, result.z, strict=True))
    ours_s, theirs_s = statistics.median(timings["splits"]), statistics.median(timings["convokit"])
    print(f"posts: {len(texts_a)} + {len(texts_b)}, n-grams kept: {len(result.terms)}")
    print(f"splits.hypotheses.fighting_words: median {ours_s:.2f} s")
    print(f"convokit FightingWords:           median {theirs_s:.2f} s")
    print(f"ratio convokit / splits: {theirs_s / ours_s:.2f}; largest |z| difference {gap:.2e}")


if __name__ == "__main__":
    main()
