"""Benchmark: GRASP permutation tests (splits.probes.grasp) on a DICES-shaped ratings table.

Generates items x raters categorical ratings (DICES-350: 350 items, 123 raters, 3 categories)
with missing ratings, then times the permutation test of one rater group: all seven metrics
(IRR, XRR, GAI, plurality size, negentropy, plurality agreement, cross-negentropy) for the
observed group and every permutation, computed from per-item category counts with one matrix
product per chunk of permutations. The peer, in the same run, is the straightforward way for
IRR alone: the krippendorff package's alpha of the group's columns for each permutation
(checked to give the same IRR values).

    python bench/bench_grasp.py --permutations 200            # try small first
    python bench/bench_grasp.py --permutations 1000 --peer-permutations 200
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from splits.agreement import RatingMatrix  # noqa: E402
from splits.probes.grasp import RaterGroup, grasp  # noqa: E402
from tiny import parse_args  # noqa: E402 - bench/, the script's folder


def make_matrix(n_items: int, n_raters: int, n_cat: int, missing: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, n_cat, size=n_items)
    codes = np.where(
        rng.random((n_items, n_raters)) < 0.6,
        truth[:, None],
        rng.integers(0, n_cat, size=(n_items, n_raters)),
    )
    codes[rng.random(codes.shape) < missing] = -1
    return RatingMatrix(
        tuple(f"i{u}" for u in range(n_items)),
        tuple(f"r{r}" for r in range(n_raters)),
        tuple(f"c{c}" for c in range(n_cat)),
        codes,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=350)
    parser.add_argument("--raters", type=int, default=123)
    parser.add_argument("--categories", type=int, default=3)
    parser.add_argument("--missing", type=float, default=0.1)
    parser.add_argument("--group-size", type=int, default=40)
    parser.add_argument("--permutations", type=int, default=1000)
    parser.add_argument(
        "--peer-permutations", type=int, default=100, help="permutations timed for the peer"
    )
    args = parse_args(
        parser, argv, items=30, raters=20, group_size=8, permutations=20, peer_permutations=5
    )

    import krippendorff

    matrix = make_matrix(args.items, args.raters, args.categories, args.missing)
    members = np.zeros(args.raters, dtype=bool)
    members[: args.group_size] = True
    group = RaterGroup("g=1", ("g",), members)

    started = time.perf_counter()
    result = grasp(matrix, [group], args.permutations, seed=0, smoothing=1.0)
    ours = time.perf_counter() - started
    per_permutation = ours / args.permutations

    # the peer: krippendorff.alpha on the group's columns, one call per permutation
    rng = np.random.default_rng(1)
    data = np.where(matrix.codes < 0, np.nan, matrix.codes).astype(float)
    started = time.perf_counter()
    peer_values = []
    for _ in range(args.peer_permutations):
        chosen = rng.permutation(args.raters)[: args.group_size]
        peer_values.append(
            krippendorff.alpha(reliability_data=data[:, chosen].T, level_of_measurement="nominal")
        )
    peer = (time.perf_counter() - started) / args.peer_permutations

    observed = krippendorff.alpha(
        reliability_data=data[:, members].T, level_of_measurement="nominal"
    )
    assert abs(observed - result.groups["irr"][0]) < 1e-9, "IRR differs from krippendorff"
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"table {args.items} items x {args.raters} raters, {args.categories} categories, "
        f"{args.missing:.0%} missing; group of {args.group_size}"
    )
    print(
        f"splits grasp, 7 metrics: {args.permutations} permutations in {ours:.2f} s "
        f"({per_permutation * 1e3:.2f} ms per permutation)"
    )
    print(
        f"peer krippendorff.alpha, IRR only: {peer * 1e3:.2f} ms per permutation "
        f"({args.peer_permutations} timed); ratio {peer / per_permutation:.1f}x"
    )
    print(f"peak RSS {peak:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
