"""Benchmark of the evaluation's per-row work: CM prompt rendering (ours: parsed template,
concatenation) against the public evaluator's way (``eval`` of the f-string file per row), and
answer parsing (ours, robust) against docs/method.md §2.9's literal rule, plus the builtin lexical CM.

    python bench/bench_evaluation.py --rows 20000

Prints rows/s for each and the ratio ours / peer (peer = the public evaluator's code path).
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

from splits.config.templates import CM_SLOTS
from splits.evaluation.classify import cm_slot_values, lexical_decision, parse_answer
from splits.evaluation.common import parse_template
from tiny import parse_args  # bench/, the script's folder

PAPER = (
    Path(__file__).resolve().parents[2]
    / "shared/reference/splits-upstream/classify_with_theory_and_demo.txt"
)
FALLBACK = Path(__file__).resolve().parents[1] / "resources/prompts/classify_llama3.txt"


def literal_rule(response: str):
    try:
        set1 = response.split("Post Set 1: ")[1].split("\n")[0].strip()
        set2 = response.split("Post Set 2: ")[1].strip()
        set1 = set1.strip("<").strip(">").strip("Group").strip()
        set2 = set2.strip("<").strip(">").strip("Group").strip()
    except IndexError:
        return None
    if set1 == set2:
        return None
    return {"A": False, "B": True}.get(set1)


def timed(fn, items):
    start = time.perf_counter()
    for item in items:
        fn(item)
    return len(items) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parse_args(parser, rows=100)
    rng = random.Random(args.seed)
    words = "the game was fun rosary parish grading students lesson mass budget hoop".split()

    def post():
        return " ".join(rng.choices(words, k=rng.randint(20, 400)))

    rows = [
        dict(
            sample_a=[post() for _ in range(3)],
            sample_b=[post() for _ in range(3)],
            switched=rng.random() < 0.5,
            theory="Group A: "
            + " ".join(rng.choices(words, k=12))
            + "\nGroup B: "
            + " ".join(rng.choices(words, k=12)),
        )
        for _ in range(args.rows)
    ]
    path = PAPER if PAPER.exists() else None
    text = path.read_text() if path else 'f"""' + FALLBACK.read_text() + '"""'
    template = parse_template(text, "bench", CM_SLOTS, CM_SLOTS)

    def ours_render(row):
        return template.render(
            cm_slot_values(
                "catholic",
                "teacher",
                row["sample_a"],
                row["sample_b"],
                row["switched"],
                row["theory"],
                2000,  # the paper's cut (evaluation.max_post_chars' default)
            )
        )

    def eval_render(row):
        first, second = (
            (row["sample_b"], row["sample_a"])
            if row["switched"]
            else (row["sample_a"], row["sample_b"])
        )
        post_set1 = "\n" + "\n\n".join('"""' + p.replace("\n", "\t")[:2000] + '"""' for p in first)
        post_set2 = "\n" + "\n\n".join('"""' + p.replace("\n", "\t")[:2000] + '"""' for p in second)
        theories = "\n".join(line.strip() for line in row["theory"].splitlines() if line.strip())
        local = dict(
            demo_a="catholic",
            demo_b="teacher",
            post_set1=post_set1,
            post_set2=post_set2,
            theories=theories,
        )
        return eval(text, {}, local)  # noqa: S307 - the public evaluator's own method, for comparison

    assert ours_render(rows[0]) == eval_render(rows[0])
    answers = [
        rng.choice(
            [
                "that ...\n2. Post Set 1: A\n3. Post Set 2: B",
                "**Post Set 1:** B\n**Post Set 2:** A",
                "Post Set 1: Group B (teacher)\nPost Set 2: Group A",
                "I cannot tell.",
            ]
        )
        for _ in range(args.rows)
    ]
    render_ours = timed(ours_render, rows)
    render_peer = timed(eval_render, rows)
    parse_ours = timed(lambda a: parse_answer(a, ["catholic"], ["teacher"]), answers)
    parse_peer = timed(literal_rule, answers)
    payloads = [
        {
            "theory": r["theory"],
            "post_set1": r["sample_a"],
            "post_set2": r["sample_b"],
            "names_a": ["catholic"],
            "names_b": ["teacher"],
        }
        for r in rows
    ]
    lexical = timed(lexical_decision, payloads)
    print(f"rows: {args.rows} (template: {'paper' if path else 'own, wrapped as f-string'})")
    print(
        f"render  ours {render_ours:10.0f} rows/s  eval {render_peer:10.0f} rows/s  ratio {render_ours / render_peer:.2f}"
    )
    print(
        f"parse   ours {parse_ours:10.0f} rows/s  literal {parse_peer:7.0f} rows/s  ratio {parse_ours / parse_peer:.2f}"
    )
    print(f"lexical CM   {lexical:10.0f} rows/s")


if __name__ == "__main__":
    main()
