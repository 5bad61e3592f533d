"""``splits synth``: the deterministic sample Reddit corpus and its ground truth.

By hand: ``splits synth --demographics D --topics T --out DIR --truth-dir DIR --config
config/config.yaml`` (the ``synth`` section and ``seed`` of a config file, schema defaults
filled), or ``--settings JSON`` as the workflow's rule passes it."""

from __future__ import annotations

import argparse
import logging

from splits.config.definitions import load_demographics, load_topics
from splits.config.settings import add_settings_arguments, settings_from_args
from splits.ingest.settings import SynthSettings
from splits.ingest.synth.generate import generate
from splits.ingest.synth.world import SynthParams

log = logging.getLogger(__name__)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--demographics", required=True, help="demographics file (YAML or release JSON)"
    )
    parser.add_argument("--topics", required=True, help="topic list (YAML or release JSON)")
    parser.add_argument(
        "--out", required=True, help="corpus directory (shard dirs / RS_ RC_ files)"
    )
    parser.add_argument("--truth-dir", required=True, help="where ground_truth.parquet etc. go")
    add_settings_arguments(parser)


def run(args: argparse.Namespace) -> int:
    params = SynthParams.from_settings(settings_from_args(args, SynthSettings))
    demographics = load_demographics(args.demographics)
    topics = load_topics(args.topics)
    meta = generate(params, demographics, topics, args.out, args.truth_dir)
    log.info("generated %d posts by %d users in %s", meta["n_posts"], meta["n_users"], args.out)
    return 0
