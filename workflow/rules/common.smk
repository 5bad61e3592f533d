# Shared setup: config validation (one-line errors naming the key), definition files, paths and
# input functions. Stage rule files stay thin and call the functions defined here.

import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))

from splits.config import (  # noqa: E402
    ConfigError,
    load_demographics,
    load_topics,
    validate_config,
)

try:
    validate_config(config)
    DEMOGRAPHICS = load_demographics(config["demographics"]["file"])
    TOPICS = load_topics(config["topics"]["file"])
except ConfigError as err:
    sys.exit(f"config error: {err}")

RESULTS = "results"
DEMOGRAPHIC_KEYS = [d.key for d in DEMOGRAPHICS]
SEED = config["seed"]


wildcard_constraints:
    demographic="|".join(DEMOGRAPHIC_KEYS),
    shard=r"[A-Za-z0-9_.\-]+",


# ---------------------------------------------------------------------------------------------
# final targets: one function per stage family, gathered by rule all.
# Each stage's section below owns its own target function; keep them in this order.
# ---------------------------------------------------------------------------------------------


def final_targets():
    return (
        ingest_targets()
        + graph_targets()
        + demographics_targets()
        + topics_targets()
        + sampling_targets()
        + evaluation_targets()
        + probes_targets()
    )


# --- ingest ----------------------------------------------------------------------------------


def ingest_targets():
    return []


# --- graph -----------------------------------------------------------------------------------


def graph_targets():
    return []


# --- demographics ----------------------------------------------------------------------------


def demographics_targets():
    return []


# --- topics ----------------------------------------------------------------------------------


def topics_targets():
    return []


# --- sampling and export ---------------------------------------------------------------------


def sampling_targets():
    return []


# --- evaluation ------------------------------------------------------------------------------


def evaluation_targets():
    return []


# --- probes ----------------------------------------------------------------------------------


def probes_targets():
    return []
