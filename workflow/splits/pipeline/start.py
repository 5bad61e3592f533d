"""The workflow's config as the Snakefile sees it: which files make it, typed and validated
against the schema, and every check across keys, all before Snakemake builds a job.

``workflow_config`` is the one entry point (the Snakefile calls it once, inside
``stop_on_config_error``); each check raises ``ConfigError`` with one line naming the key.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from snakemake.utils import update_config

from splits.config.definitions import PATH_NAME, load_demographics, load_topics
from splits.config.schema import coerce_to_schema, load_schema, read_config_file, validate_config
from splits.config.yamlfile import expanded_size
from splits.errors import ConfigError
from splits.pipeline.checks import (
    check_evaluation,
    check_hypotheses,
    check_prompt_templates,
    validate_probes,
)
from splits.pipeline.model_files import check_model_files
from splits.pipeline.names import check_names
from splits.pipeline.targets import PROBE_REFERENCE_FILES, evaluation_models
from splits.privacy import require_salt_for_real_data

#: the config file a run uses when no --configfile is given
DEFAULT_CONFIGFILE = "config/config.yaml"


@contextmanager
def stop_on_config_error() -> Iterator[None]:
    """Turn a ConfigError into Snakemake's one-line stop (``config error: <key>: ...``), with no
    traceback; used once at start and by the input functions of targets that need a key set."""
    try:
        yield
    except ConfigError as err:
        sys.exit(f"config error: {err}")


def workflow_config(
    config: dict,
    configfiles: Sequence,
    default: str | Path = DEFAULT_CONFIGFILE,
    jobs_own_software: bool = False,
) -> dict:
    """Complete, type, validate and check the Snakefile's ``config`` in place.

    With no ``--configfile`` the run uses ``default`` under the ``--config`` values; with one or
    more, those files replace the default (list ``config/config.yaml`` first to extend it), and
    the schema's defaults fill every key they leave out. ``jobs_own_software``: the jobs get
    environments of their own (``--use-conda``), so the model backends' packages are theirs to
    have, not this Python's (:func:`jobs_bring_software`)."""
    check_config_size(config)  # Snakemake read the --configfile files and --config values
    if not configfiles:
        merged = read_config_file(default)
        update_config(merged, config)  # the --config values over the default file
        config.clear()
        config.update(merged)
    schema = load_schema()
    coerce_to_schema(config, schema)
    validate_config(config, schema)
    check_config(config, check_packages=not jobs_own_software)
    return config


def hub_environment(config: dict) -> dict[str, str]:
    """The environment the jobs need to read hub models from the cache alone
    (splits.pipeline.model_files.hub_environment_for_jobs); the Snakefile sets it."""
    from splits.pipeline.model_files import hub_environment_for_jobs

    return hub_environment_for_jobs(_used_models(config), config)


def check_config_size(config: dict) -> None:
    """Every config key's value is of bounded size once its YAML aliases are expanded
    (splits.config.yamlfile), checked before anything walks it; the error names the key."""
    for key, value in config.items():
        parts = value.items() if isinstance(value, dict) else [(None, value)]
        for sub, part in parts:
            expanded_size(part, f"{key}.{sub}" if sub is not None else str(key))
    expanded_size(config, "config")


def jobs_bring_software(workflow) -> bool:
    """True when Snakemake deploys the jobs' software itself (``--use-conda``)."""
    from snakemake.settings.types import DeploymentMethod

    settings = getattr(workflow, "deployment_settings", None)
    return bool(settings) and DeploymentMethod.CONDA in settings.deployment_method


def check_config(config: dict, check_packages: bool = True) -> None:
    """Every check across keys and files of a schema-valid config."""
    check_names(config)
    load_demographics(config["demographics"]["file"])
    load_topics(config["topics"]["file"])
    check_ingest(config)
    check_model_references(config)
    check_evaluation_names(config)
    check_evaluation(config)
    check_evaluation_dataset(config)
    check_gpu_models(config)
    validate_probes(config)
    check_reference_dir(config)
    check_hypotheses(config)
    check_prompt_templates(config)
    require_salt_for_real_data(config)  # no public development salt on real data
    if check_packages:
        check_extras(config)
    check_model_files(_used_models(config), config)  # before any job waits on the hub


def _used_models(config: dict) -> list[tuple[str, str, str]]:
    """(config key, model name, backend) of every model the default run loads."""
    models = config["models"]
    used = [(f"evaluation.experiments ({name})", name) for name in evaluation_models(config)]
    demographics = config["demographics"]
    if demographics["verifier"] == "llm" and demographics["verifier_model"]:
        used.append(("demographics.verifier_model", demographics["verifier_model"]))
    probes = config["probes"]
    if probes["enabled"]:
        for probe in ("stress", "empathy", "personalization"):
            used.append((f"probes.{probe}.model", probes[probe]["model"]))
        used.append(
            ("probes.personalization.judge_model", probes["personalization"]["judge_model"])
        )
    out = [(key, name, models[name]["backend"]) for key, name in used if name in models]
    hypotheses = config["hypotheses"]
    if hypotheses["enabled"]:
        encoder = hypotheses["encoder"]
        # an encoder outside the registry is a Hugging Face id or path (transformers)
        backend = models[encoder]["backend"] if encoder in models else "transformers"
        out.append(("hypotheses.encoder", encoder, backend))
        llms = [("hypotheses.generate.models", name) for name in hypotheses["generate"]["models"]]
        theories_need_model = any(
            models.get(entry["tm"], {}).get("backend") != "builtin"
            for entry in hypotheses["theories"]
        )
        if theories_need_model and hypotheses["theory_model"]:
            llms.append(("hypotheses.theory_model", hypotheses["theory_model"]))
        out += [(key, name, models[name]["backend"]) for key, name in llms if name in models]
    return out


def check_extras(config: dict) -> None:
    """The Python packages of the chosen models' backends are installed, before any job runs:
    one line naming the key, the model, the missing modules and the pip extra."""
    from splits.llm.backends import BACKENDS, backend_class

    for key, name, backend in _used_models(config):
        if backend not in BACKENDS:
            continue
        # the backend's class says what its engine imports (a test's stand-in engine: nothing)
        engine = backend_class(backend)
        extra = engine.extra
        missing = [m for m in engine.requires if importlib.util.find_spec(m) is None]
        if missing:
            raise ConfigError(
                f"{key}: model {name!r} (backend {backend}) needs {' and '.join(missing)}, which "
                f"is not installed; install it with pip install 'splits[{extra}]' (from the "
                "repository: pip install -e '.[" + extra + "]'), or choose a builtin model"
            )


def check_ingest(config: dict) -> None:
    if config["synth"]["enabled"]:
        return
    inputs = config["ingest"]["inputs"]
    if not inputs:
        raise ConfigError("ingest.inputs: empty while synth.enabled is false")
    for path in inputs:
        if not Path(path).exists():
            raise ConfigError(f"ingest.inputs: input {path} does not exist")
        unreadable = unreadable_input(Path(path))
        if unreadable:
            # found here, not by Snakemake, whose own error blames the .snakemake folder
            raise ConfigError(
                f"ingest.inputs: cannot read {unreadable}: make it readable for this user "
                "(chmod a+r) or drop it from ingest.inputs"
            )


def unreadable_input(path: Path) -> str | None:
    """The file of input ``path`` (a file, or a ConvoKit folder's files) that cannot be opened
    for reading, with the reason; None when all can."""
    try:
        files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
        for file in files:
            with open(file, "rb"):
                pass
    except OSError as err:
        return f"{err.filename or path} ({err.strerror or type(err).__name__})"
    return None


def _registered(key: str, name: str | None, models: dict) -> None:
    if name is not None and name not in models:
        raise ConfigError(f"{key}: {name!r} is not a model of the models registry")


def check_model_references(config: dict) -> None:
    """Keys that name a model name a model of the registry (the hypotheses section's are
    checked by check_hypotheses, with their roles)."""
    models = config["models"]
    demographics = config["demographics"]
    if demographics["verifier"] == "llm":
        if not demographics["verifier_model"]:
            raise ConfigError("demographics.verifier_model: the llm verifier needs a model")
        _registered("demographics.verifier_model", demographics["verifier_model"], models)
    _registered("topics.generate.model", config["topics"]["generate"]["model"], models)
    probes = config["probes"]
    if probes["enabled"]:  # disabled probes need no model
        for probe in ("stress", "empathy", "personalization"):
            _registered(f"probes.{probe}.model", probes[probe]["model"], models)
        _registered(
            "probes.personalization.judge_model", probes["personalization"]["judge_model"], models
        )
    evaluation = config["evaluation"]
    for key in ("tm_prompts", "cm_prompts"):
        for model in evaluation[key]:
            if model not in models:
                raise ConfigError(f"evaluation.{key}.{model}: not a model of the models registry")


def check_evaluation_names(config: dict) -> None:
    """Experiments name registry models; experiment and model names go into file paths."""
    models = config["models"]
    for name, experiment in config["evaluation"]["experiments"].items():
        if not re.fullmatch(PATH_NAME, name):
            raise ConfigError(f"evaluation.experiments.{name}: name must match {PATH_NAME}")
        for axis in ("tms", "cms"):
            for model in experiment[axis]:
                _registered(f"evaluation.experiments.{name}.{axis}", model, models)
                if not re.fullmatch(PATH_NAME, model):
                    raise ConfigError(
                        f"models.{model}: a model used by the evaluation needs a name matching "
                        f"{PATH_NAME}"
                    )
        for group, members in experiment.get("groups", {}).items():
            for model in members:
                if model not in experiment["tms"]:
                    raise ConfigError(
                        f"evaluation.experiments.{name}.groups.{group}: {model!r} is not one of "
                        "the experiment's tms"
                    )


def check_evaluation_dataset(config: dict) -> None:
    """A given ``evaluation.dataset`` exists and holds at least the largest k of calibration
    posts in every row (the pipeline's own quadruplets are re-sampled for larger ks instead)."""
    path = config["evaluation"]["dataset"]
    if not path:
        return
    if not Path(path).is_file():
        raise ConfigError(f"evaluation.dataset: {path} does not exist")
    import polars as pl

    try:
        smallest = (
            pl.scan_parquet(path).select(pl.col("example_posts").list.len().min()).collect().item()
        )
    except Exception as err:  # polars raises several types for a bad file or a missing column
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(
            f"evaluation.dataset: cannot read example_posts of {path} ({first})"
        ) from err
    if smallest is None:
        raise ConfigError(f"evaluation.dataset: {path} has no rows")
    for name, experiment in config["evaluation"]["experiments"].items():
        largest = max(int(k) for k in experiment["ks"])
        if largest > smallest:
            raise ConfigError(
                f"evaluation.experiments.{name}.ks: k={largest} exceeds the calibration set "
                f"size ({smallest}) of evaluation.dataset {path}"
            )


def check_gpu_models(config: dict) -> None:
    """The registry entries of the models that get GPU resources are valid (their jobs' resources
    are read from them while Snakemake builds the DAG)."""
    from splits.llm.registry import gpu_resources

    names = set(evaluation_models(config))
    encoder = config["hypotheses"]["encoder"]
    if encoder in config["models"]:
        names.add(encoder)
    for name in sorted(names):
        gpu_resources(name, config["models"])


def check_reference_dir(config: dict) -> None:
    """A set ``probes.reference_dir`` holds every reference data file the reference probes read."""
    folder = config["probes"]["reference_dir"]
    if not folder:
        return
    for files in PROBE_REFERENCE_FILES.values():
        for name in files:
            if not (Path(folder) / name).is_file():
                raise ConfigError(f"probes.reference_dir: {folder} lacks {name}")
