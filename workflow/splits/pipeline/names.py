"""Config values that become parts of paths or wildcards, checked before Snakemake reads them.

A name that goes into a path (an experiment, a model of the evaluation, a hypotheses file's
set, a GRASP input, an empathy variant; demographic keys are checked where the demographics
file is read) holds only :data:`SAFE_NAME` characters, so that no ``..``, ``/`` or shell text
can place a job's output outside the outdir, and no regex character leaks into a wildcard
constraint. The outdir holds no brace (nor control character): braces would be read by
Snakemake as wildcards in every path. Braces in the name of a file the config points at
(``ingest.inputs`` included) are refused too: Snakemake has no escape for them in a job's
input, so such a file is renamed or linked under another name.
"""

from __future__ import annotations

import re
from typing import Any

from splits.config.definitions import SAFE_NAME, SAFE_NAME_CHARACTERS
from splits.errors import ConfigError

#: an outdir may hold anything printable but braces: the rules quote every path in their shell
#: commands (spaces, quotes, ; and $( ) are taken as they are), but braces are wildcards to
#: Snakemake in every output path, with no escape
OUTDIR_PATTERN = r"[^{}\x00-\x1f\x7f]+"
OUTDIR_CHARACTERS = "any printable character but { }"

#: config keys (their last part) whose string values name files or folders the run reads
PATH_KEY = re.compile(
    r"(^|_)(file|files|dir|path|prompt|prompts|dataset|vocab|theories|ratings|raters|words|"
    r"function|inputs)$"
)
#: keys PATH_KEY matches whose values are not files (rating values, a policy)
NOT_PATH_KEYS = {"missing_ratings", "overlong_prompts"}


def check_name(key: str, name: Any) -> None:
    if not isinstance(name, str) or not re.fullmatch(SAFE_NAME, name):
        raise ConfigError(
            f"{key}: name {name!r} goes into file paths and may hold only {SAFE_NAME_CHARACTERS}"
        )


def check_outdir(outdir: str) -> None:
    if not re.fullmatch(OUTDIR_PATTERN, outdir):
        raise ConfigError(f"outdir: {outdir!r} may hold {OUTDIR_CHARACTERS}")


def _path_values(value: Any, key: str) -> list[tuple[str, str]]:
    """(key, string) of every string under ``key`` that names a file (PATH_KEY)."""
    if isinstance(value, dict):
        return [
            found
            for name, child in value.items()
            for found in _path_values(child, f"{key}.{name}" if key else str(name))
        ]
    leaf = key.rsplit(".", 1)[-1]
    if leaf.split("[")[0] in NOT_PATH_KEYS:
        return []
    if isinstance(value, list):
        return [
            found
            for i, child in enumerate(value)
            for found in _path_values(child, f"{key}[{i}]" if PATH_KEY.search(leaf) else key)
        ]
    if isinstance(value, str) and PATH_KEY.search(leaf.split("[")[0]):
        return [(key, value)]
    return []


def check_file_names(config: dict) -> None:
    """Files the config names hold no brace (Snakemake's wildcard marks)."""
    for key, value in _path_values(config, ""):
        if key.startswith("models."):
            continue  # a model's files are read by its engine, never a Snakemake input
        if "{" in value or "}" in value:
            raise ConfigError(
                f"{key}: {value!r}: Snakemake reads braces in a file name as a wildcard; rename "
                "the file or folder without { } (or link it: ln -s)"
            )


def check_names(config: dict) -> None:
    """Every config value that becomes part of a path or a wildcard (module doc)."""
    check_outdir(config["outdir"])
    for name, experiment in config["evaluation"]["experiments"].items():
        check_name(f"evaluation.experiments.{name}", name)
        for axis in ("tms", "cms"):
            for model in experiment[axis]:
                check_name(f"evaluation.experiments.{name}.{axis}", model)
    for name in config["hypotheses"]["files"]:
        check_name(f"hypotheses.files.{name}", name)
    for name in config["probes"]["grasp"]["inputs"]:
        check_name(f"probes.grasp.inputs.{name}", name)
    for name in config["probes"]["empathy"]["variants"]:
        check_name(f"probes.empathy.variants.{name}", name)
    check_file_names(config)
