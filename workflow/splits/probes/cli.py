"""``splits probe``: the bias probes (docs/method.md §3) as sub-subcommands, one module each.

    splits probe stress           --source topics|dreaddit --input PATH --prompt FILE --outdir DIR
    splits probe empathy          --source topics|envent --input PATH --variant NAME
                                  --group-set NAME --outdir DIR
    splits probe empathy-variants --summaries A/summary.json B/summary.json --out T.csv
    splits probe grasp            --ratings FILE [FILE...] [--raters FILE] --outdir DIR
    splits probe grasp            --judgments CLASSIFICATION.parquet [...] --outdir DIR
    splits probe personalization  --input topic_posts.parquet --rewrite-prompt FILE --outdir DIR

Every probe but empathy-variants takes its settings as ``--settings JSON`` (what the rule passes)
or ``--config FILE`` (by hand; schema defaults filled). Models are registry entries named by the
settings and handed over as ``--model-spec JSON`` (read from the config file with ``--config``),
so a change of the entry re-runs exactly the probes that use it.
"""

from __future__ import annotations

import argparse
import importlib

# probe -> (module, configure_parser, run, help)
PROBES = {
    "stress": (
        "splits.probes.cli_stress",
        "configure_parser",
        "run",
        "yes/no stress question varied over the writer's group",
    ),
    "empathy": (
        "splits.probes.cli_empathy",
        "configure_parser",
        "run",
        "perceiver x experiencer intensity ratings, empathy gap",
    ),
    "empathy-variants": (
        "splits.probes.cli_empathy",
        "configure_variants_parser",
        "run_variants",
        "the empathy probe's prompt variants side by side",
    ),
    "grasp": (
        "splits.probes.cli_grasp",
        "configure_parser",
        "run",
        "IRR, XRR and GAI of rater groups with permutation tests",
    ),
    "personalization": (
        "splits.probes.cli_personalization",
        "configure_parser",
        "run",
        "rewrite group cues, compare task answers",
    ),
}

GRASP_DESCRIPTION = (
    "Give either --ratings (long item/rater/rating tables, optional --raters) or --judgments (the "
    "evaluation's classification Parquet files: each (TM, CM, k) is a judge rater "
    "'<tm>|<cm>|k<k>' rating each quadruplet switched / not_switched / undetected, with "
    "attributes tm, cm, k, tm_kind, cm_kind)."
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="probe", required=True, metavar="PROBE")
    for name, (module, configure, _, help_text) in PROBES.items():
        description = GRASP_DESCRIPTION if name == "grasp" else None
        probe = sub.add_parser(name, help=help_text, description=description)
        getattr(importlib.import_module(module), configure)(probe)


def run(args: argparse.Namespace) -> int:
    module, _, run_name, _ = PROBES[args.probe]
    return getattr(importlib.import_module(module), run_name)(args)
