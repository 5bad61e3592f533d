"""Every model file the run will load, found before the first job: a model, tokenizer or encoder
is a local path, is in the local Hugging Face cache, or the hub is reachable (and allowed).

A compute node without network would otherwise run every earlier stage and then retry the hub
for each model job, failing hours into a run; here the start stops in its first seconds with
one line naming the config key, the model and the fixes. Nothing is downloaded and the hub is
never asked about a model: the cache is read with ``huggingface_hub.try_to_load_from_cache``
(which honours ``HF_HOME`` / ``HF_HUB_CACHE``), and the network with one TCP connection to the
hub's host, given :data:`CONNECT_TIMEOUT_S` in all (name lookup included).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlparse

from splits.errors import ConfigError

#: seconds the start waits for the hub's host to answer
CONNECT_TIMEOUT_S = 3.0
#: the files of a repository that tell the cache holds it (a model's or a tokenizer's)
CACHE_MARKERS = ("config.json", "tokenizer_config.json", "tokenizer.json")
_TRUE = {"1", "on", "yes", "true"}

#: the builtin encoder a run without network can use (config/config.yaml's ngram-encoder)
OFFLINE_ENCODER_FIX = (
    "or use the builtin offline encoder (models: {ngram-encoder: {backend: builtin, kind: "
    "hashed-ngrams}} and hypotheses.encoder: ngram-encoder)"
)


def hub_offline_reason() -> str | None:
    """Why the hub may not be used (the offline variable that is set), or None."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(name, "").strip().lower() in _TRUE:
            return f"{name} is set"
    return None


def hub_unreachable_reason(timeout: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why the hub's host (``HF_ENDPOINT``, huggingface.co by default) cannot be reached within
    ``timeout`` seconds, or None when it answers. The connection runs in a thread so that a
    name lookup that hangs costs no more than ``timeout`` either."""
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host = endpoint.hostname or "huggingface.co"
    port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    outcome: dict[str, str] = {}

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            outcome["ok"] = ""
        except OSError as err:
            outcome["error"] = err.strerror or type(err).__name__

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout)
    if "ok" in outcome:
        return None
    return f"{host}:{port} does not answer ({outcome.get('error', f'no answer in {timeout:g} s')})"


def in_hub_cache(repo_id: str, revision: str | None) -> bool:
    """The local Hugging Face cache holds ``repo_id`` at ``revision`` (one of CACHE_MARKERS)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        # the jobs bring their own packages (--use-conda): their environment reads the cache
        return True
    for filename in CACHE_MARKERS:
        try:
            found = try_to_load_from_cache(repo_id, filename, revision=revision)
        except ValueError:  # not a repository id (huggingface_hub's HFValidationError)
            return False
        if isinstance(found, str):
            return True
    return False


def _looks_like_path(source: str) -> bool:
    return source.startswith(("/", "./", "../", "~")) or source.count("/") > 1


def model_sources(
    used: Iterable[tuple[str, str, str]], models: dict
) -> list[tuple[str, str, str | None, str]]:
    """(config key, source, revision, the key that names the source) of every model or tokenizer
    an engine loads from a path or the hub (its backend class's ``hub_files``), from ``used`` =
    (key, name, backend) of the run's models; a name outside the registry (an encoder) is a
    Hugging Face id or path, named by the key itself."""
    from splits.llm.backends import BACKENDS, backend_class

    out = []
    for key, name, backend in used:
        if backend not in BACKENDS:
            continue
        spec = models.get(name, {"model": name})
        for what in backend_class(backend).hub_files:
            if spec.get(what):
                setting = f"models.{name}.{what}" if name in models else key
                out.append((key, str(spec[what]), spec.get("revision"), setting))
    return out


def check_model_files(used: Iterable[tuple[str, str, str]], config: dict) -> None:
    """Every model and tokenizer of ``used`` ((key, name, backend) of the run's models) is a
    local path, in the Hugging Face cache, or on a reachable hub that may be used; and the
    WordPiece vocabulary of the wordpiece analyzer is a file. ConfigError with one line naming
    the key, the model and the fixes otherwise."""
    hypotheses = config["hypotheses"]
    retrieval = hypotheses.get("retrieval", {})
    if hypotheses["enabled"] and retrieval.get("analyzer") == "wordpiece" and retrieval["vocab"]:
        if not Path(retrieval["vocab"]).is_file():
            raise ConfigError(
                f"hypotheses.retrieval.vocab: {retrieval['vocab']} does not exist (nothing is "
                "downloaded: give the path of bert-base-uncased's vocab.txt)"
            )
    missing = []
    for key, source, revision, setting in model_sources(used, config["models"]):
        if Path(source).expanduser().exists():
            continue
        if _looks_like_path(source):
            raise ConfigError(f"{setting}: {source!r} is neither a folder nor a file here")
        if not in_hub_cache(source, revision):
            missing.append((key, source, setting))
    if not missing:
        return
    reason = hub_offline_reason() or hub_unreachable_reason()
    if reason is None:
        return  # the jobs download what the cache lacks
    key, source, setting = missing[0]
    fix = OFFLINE_ENCODER_FIX if key == "hypotheses.encoder" else "or choose a builtin model"
    raise ConfigError(
        f"{key}: model {source!r} is not in the Hugging Face cache and the hub cannot be used "
        f"({reason}): download it first (huggingface-cli download {source}, with the run's "
        f"HF_HOME), point {setting} at a local folder, {fix}"
    )


def hub_environment_for_jobs(used: Iterable[tuple[str, str, str]], config: dict) -> dict[str, str]:
    """``{"HF_HUB_OFFLINE": "1"}`` when the run's models include hub ids (all in the cache, or
    the start check would have stopped) and the hub cannot be reached: the jobs then read the
    cache without asking the hub first, so that none waits on connection timeouts; else
    nothing (the hub is reachable, or forbidden already, or no model comes from it)."""
    if hub_offline_reason() is not None:
        return {}
    hub_ids = [
        source
        for _, source, _, _ in model_sources(used, config["models"])
        if not Path(source).expanduser().exists()
    ]
    if not hub_ids or hub_unreachable_reason() is None:
        return {}
    return {"HF_HUB_OFFLINE": "1"}
