"""Benchmark: the self-ID stage's job over a demographic's users (``splits selfid search
--matches``: verification, curve, threshold, support tests, formula comparison) as the number of
users grows tenfold, against its peer, the same steps over the users held one by one.

Generates a users table (group-ness scores from small post counts in a few seed subreddits,
so tied as real scores are; a heavy-tailed n_posts) and the self-ID matches of a rate that rises
above the 70th percentile, then runs, each in its own process, the stage (it reads the users
table in slices and holds sums over them; the support tests draw counts of users) and the peer
(the users table read whole, the curve from the users one by one, and the support tests as
first written: every user shuffled over the percentiles 999 times and resampled 200 times).
Prints each one's time and peak memory, the growth of the memory, and checks that both make
the same curve and threshold.

    python bench/bench_selfid_users.py --users 59400 594000
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from measure import run_measured  # noqa: E402 - bench/, the script's folder
from splits.config.definitions import load_demographics  # noqa: E402
from splits.config.settings import schema_defaults  # noqa: E402
from splits.demographics.selfid import search_matches  # noqa: E402
from splits.demographics.settings import SelfidFindSettings, SelfidSettings  # noqa: E402
from tiny import parse_args  # noqa: E402

DEMOGRAPHICS = {
    "demographics": [
        {
            "key": "catholic",
            "display_name": "Catholic",
            "threshold": "auto",
            "seed_subreddits": ["Catholicism"],
            "self_id_phrases": ["I'm Catholic"],
            "anti_self_id_phrases": ["I'm Jewish"],
        }
    ]
}


def make_inputs(root: str | Path, n: int, seed: int = 0) -> None:
    """users.parquet, matches.parquet and demographics.yaml in ``root`` for ``n`` users."""
    root = Path(root)
    rng = np.random.default_rng(seed)
    seeds = rng.geometric(0.6, n).clip(1, 8)
    counts = rng.geometric(0.3, (n, 8)) * (np.arange(8)[None, :] < seeds[:, None])
    score = np.round(np.log1p(counts).sum(1), 9)
    share = counts / counts.sum(1, keepdims=True)
    logs = np.log(np.where(share > 0, share, 1.0))
    entropy = np.round(-(share * logs).sum(1), 9)
    percentile = (pl.Series(score).rank("min").to_numpy() - 1) * 100.0 / n
    pl.DataFrame(
        {
            "author": [f"user{i:08d}" for i in range(n)],
            "percentile": percentile,
            "n_posts": rng.geometric(0.05, n).astype(np.int64),
            "g_sum_log": score,
            "g_breadth_x_volume": (seeds * counts.sum(1)).astype(float),
            "g_entropy": entropy,
        }
    ).write_parquet(root / "users.parquet")
    says_self = np.nonzero(rng.random(n) < np.where(percentile >= 70, 0.08, 0.01))[0]
    says_anti = np.nonzero(rng.random(n) < 0.01)[0]
    posts = pl.DataFrame(
        {
            "author": [f"user{i:08d}" for i in [*says_self, *says_anti]],
            "text": ["Well, I'm Catholic and I go to Mass every week."] * len(says_self)
            + ["Honestly I'm Jewish myself."] * len(says_anti),
        }
    ).with_row_index("post_id")
    posts = posts.with_columns(pl.format("p{}", "post_id").alias("post_id"))
    (root / "demographics.yaml").write_text(json.dumps(DEMOGRAPHICS))
    (demographic,) = load_demographics(str(root / "demographics.yaml"))
    matches = search_matches(posts.lazy(), demographic, SelfidFindSettings(context_chars=150))
    matches.write_parquet(root / "matches.parquet")


PEER = """
import hashlib, json, math, sys
import numpy as np, polars as pl
from splits.demographics.curves import (_hinge_fit, auto_threshold, bin_expr, selfid_curve,
    user_counts)
from splits.demographics.verify import verify_rules
users_file, matches_file, out = sys.argv[1:]
users = pl.read_parquet(users_file)
per_user = user_counts(users, verify_rules(pl.read_parquet(matches_file)))
bins = 20
width = 100.0 / bins
curve = selfid_curve(per_user, bins)
breakpoint = auto_threshold(curve)
frame = per_user.select(bin_expr(bins), "n_posts", "n_self")
user_bin = frame["bin"].to_numpy()
posts, selfs = (frame[c].to_numpy().astype(float) for c in ("n_posts", "n_self"))

def fit(p, s):
    n_posts = np.bincount(user_bin, p, minlength=bins)
    n_self = np.bincount(user_bin, s, minlength=bins)
    kept = np.nonzero(n_posts > 0)[0]
    found = _hinge_fit(kept * width, (kept + 1) * width, n_self[kept] / n_posts[kept],
                       n_posts[kept], 2)
    if found is None:
        return math.nan, 0.0
    above = kept * width >= found[0]
    below = n_self[kept][~above].sum() / max(n_posts[kept][~above].sum(), 1.0)
    return found[0], n_self[kept][above].sum() / n_posts[kept][above].sum() - below

_, rise = fit(posts, selfs)
seed = int.from_bytes(hashlib.sha256(b"selfid-support:catholic").digest()[:8], "little")
rng = np.random.default_rng(seed)
n = len(posts)
as_large = 0
for _ in range(999):
    order = rng.permutation(n)
    as_large += fit(posts[order], selfs[order])[1] >= rise - 1e-15
found = []
for _ in range(200):
    w = np.bincount(rng.integers(0, n, n), minlength=n)
    found.append(fit(w * posts, w * selfs)[0])
agreement = float(np.mean(np.abs(np.asarray(found) - breakpoint) <= width + 1e-9))
curve.write_parquet(out + ".curve.parquet")
json.dump({"threshold": breakpoint, "permutation_p": (1 + as_large) / 1000,
           "bootstrap_agreement": agreement}, open(out + ".json", "w"))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, nargs="+", default=[59_400, 594_000])
    args = parse_args(parser, users=[2000, 6000])
    settings = json.dumps(dataclasses.asdict(schema_defaults(SelfidSettings)))
    header = f"{'users':>10} {'stage s':>8} {'MiB':>6} {'per-user s':>11} {'MiB':>6}"
    print(f"{header}   threshold; permutation p, bootstrap agreement (stage / per-user)")
    measured = []
    for n in args.users:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            make = f"import sys; sys.path.insert(0, {str(ROOT / 'bench')!r})\n"
            make += f"from bench_selfid_users import make_inputs; make_inputs(sys.argv[1], {n})"
            subprocess.run([sys.executable, "-c", make, str(tmp)], check=True)
            out = tmp / "out"
            stage = [sys.executable, "-m", "splits.cli", "selfid", "search"]
            stage += ["--users", str(tmp / "users.parquet")]
            stage += ["--matches", str(tmp / "matches.parquet")]
            stage += ["--demographics", str(tmp / "demographics.yaml")]
            stage += ["--demographic", "catholic", "--settings", settings]
            for flag, name in (("matches", "m"), ("curve", "c"), ("comparison", "cmp")):
                stage += [f"--out-{flag}", str(out / f"{name}.parquet")]
            stage += ["--out-threshold", str(out / "t.json"), "--out-plot", str(out / "p.png")]
            code = f"import sys; sys.path.insert(0, {str(ROOT / 'workflow')!r})\n{PEER}"
            peer = [sys.executable, "-c", code, str(tmp / "users.parquet")]
            peer += [str(tmp / "matches.parquet"), str(tmp / "peer")]
            stage_s, stage_mib = run_measured(stage)
            peer_s, peer_mib = run_measured(peer)
            threshold = json.loads((out / "t.json").read_text())
            mine = json.loads((tmp / "peer.json").read_text())
            same_curve = pl.read_parquet(out / "c.parquet").equals(
                pl.read_parquet(tmp / "peer.curve.parquet")
            )
            if not same_curve or threshold["threshold"] != mine["threshold"]:
                raise SystemExit("the stage and the per-user peer make different curves")
            support = threshold["support"]
            print(
                f"{n:>10,} {stage_s:>8.2f} {stage_mib:>6.0f} {peer_s:>11.2f} {peer_mib:>6.0f}"
                f"   {threshold['threshold']:g}; {support['permutation_p']:.3f} / "
                f"{mine['permutation_p']:.3f}, {support['bootstrap_agreement']:.2f} / "
                f"{mine['bootstrap_agreement']:.2f}"
            )
            measured.append((stage_mib, peer_mib))
    (first_stage, first_peer), (last_stage, last_peer) = measured[0], measured[-1]
    print(
        f"memory growth over {args.users[-1] / args.users[0]:g}x the users: stage "
        f"{last_stage / first_stage:.2f}x, per-user peer {last_peer / first_peer:.2f}x; same curves"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
