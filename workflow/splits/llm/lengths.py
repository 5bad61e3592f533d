"""Prompt lengths: every prompt is counted with the model's own tokenizer before generation.

A prompt is *over-long* when its tokens plus the request's ``max_tokens`` exceed the model's
context (the prompt and its whole answer must fit: vLLM refuses a longer prompt with a traceback,
OpenAI-compatible servers answer 400, and a transformers model past its position embeddings
writes noise). What happens to over-long prompts is the model's ``overlong_prompts`` setting:

- ``error`` (default): the job stops before any generation, with one line naming the model, its
  context, how many prompts do not fit, the longest one's token count and its row;
- ``skip``: those prompts are not sent; each gets an empty completion with finish reason
  ``overlong`` (never cached, so a larger context or shorter prompts answer them on the next
  run), counted in the model's throughput (``overlong_skipped``) and in one WARNING line.

Where the counting happens (``Meter``): ``vllm`` and ``transformers`` models load the tokenizer
of the spec (``tokenizer`` or ``model``) without building the engine, so a refusal costs no
engine load; the context is ``max_model_len`` where set, else the model config's maximum
positions. ``openai`` models count with a local ``tokenizer`` when the spec names one, else with
the server's ``/tokenize`` endpoint (vLLM's server has one); the context is the spec's
``max_model_len``, else the ``max_model_len`` the server's ``/v1/models`` lists for the model.
A server that tells neither is not checked (its own refusal then fails the request in one line),
nor is a local model whose tokenizer Hugging Face cannot load (one WARNING line says so).
Token counts follow what each backend sends: raw prompts with the tokenizer's special tokens
(BOS), chats rendered by the chat template with the generation prompt.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from splits.errors import ConfigError
from splits.llm.base import Completion, LLMError, Request

log = logging.getLogger(__name__)

#: model config fields that hold the largest position, in the order they are read
CONTEXT_FIELDS = (
    "max_position_embeddings",
    "n_positions",
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
)
OVERLONG = "overlong"


class PromptTooLong(LLMError):
    """Prompts that do not fit the model's context under ``overlong_prompts: error``."""


@dataclass
class Meter:
    """Counts prompt tokens and knows the context of one model."""

    limit: int | None
    count: Callable[[Request], int] | None
    workers: int = 1  # counts in flight at once (a server's /tokenize: the model's concurrency)

    @property
    def active(self) -> bool:
        return self.limit is not None and self.count is not None


def count_with_tokenizer(tokenizer: Any, request: Request) -> int:
    """Prompt tokens of ``request`` as the backends send it."""
    if request.messages is not None:
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError("the tokenizer has no chat template; send raw prompts")
        text = tokenizer.apply_chat_template(
            [dict(m) for m in request.messages], add_generation_prompt=True, tokenize=False
        )
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])
    return len(tokenizer(request.prompt, add_special_tokens=True)["input_ids"])


def _load_tokenizer(name: str, spec: Mapping[str, Any], source: str) -> Any:
    try:
        from transformers import AutoTokenizer
    except ImportError as err:
        raise ConfigError(
            f"models.{name}: counting prompt tokens needs transformers (pip install "
            f"'splits[llm]'): {err}"
        ) from err
    try:
        return AutoTokenizer.from_pretrained(
            source,
            revision=spec.get("revision") if source == spec.get("model") else None,
            trust_remote_code=bool(spec.get("trust_remote_code", False)),  # openai specs have none,
        )
    except (OSError, ValueError) as err:
        raise ConfigError(
            f"models.{name}: cannot load the tokenizer {source!r} to count prompt tokens: "
            f"{str(err).splitlines()[0]}"
        ) from err


def config_context(name: str, spec: Mapping[str, Any]) -> int | None:
    """The largest position of a local or hub model's config (None when it names none)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(
            spec["model"],
            revision=spec.get("revision"),
            trust_remote_code=bool(spec.get("trust_remote_code", False)),  # openai specs have none,
        )
    except (OSError, ValueError) as err:
        raise ConfigError(
            f"models.{name}.model: cannot read the config of {spec['model']!r}: "
            f"{str(err).splitlines()[0]}"
        ) from err
    config = getattr(config, "get_text_config", lambda: config)()
    for field in CONTEXT_FIELDS:
        value = getattr(config, field, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def local_meter(name: str, spec: Mapping[str, Any]) -> Meter:
    """vllm and transformers models: the spec's tokenizer and context. A tokenizer or config
    that Hugging Face cannot load here (a tokenizer only vLLM reads, a hub id offline) leaves the
    prompts unchecked, said in one WARNING line; the engine then loads the model or fails."""
    try:
        tokenizer = _load_tokenizer(name, spec, str(spec.get("tokenizer") or spec["model"]))
        limit = spec.get("max_model_len") or config_context(name, spec)
    except ConfigError as err:
        log.warning("model %s: prompt lengths are not checked: %s", name, err)
        return Meter(None, None)
    if limit is None:
        model_max = getattr(tokenizer, "model_max_length", None)
        limit = model_max if isinstance(model_max, int) and model_max < 10**7 else None
    return Meter(
        int(limit) if limit else None, lambda request: count_with_tokenizer(tokenizer, request)
    )


def _server_root(base_url: str) -> str:
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def openai_meter(name: str, spec: Mapping[str, Any], headers: Mapping[str, str]) -> Meter:
    """openai models: the spec's ``max_model_len`` or the server's, and a local tokenizer or the
    server's ``/tokenize``."""
    import httpx

    base_url = str(spec["base_url"]).rstrip("/")
    model = str(spec["model"])
    timeout = float(spec["timeout_s"])
    probe_s = min(timeout, 10.0)  # what the server tells: asked once, briefly
    limit = spec.get("max_model_len")
    if limit is None:
        try:
            response = httpx.get(f"{base_url}/models", headers=dict(headers), timeout=probe_s)
            entries = response.json().get("data", []) if response.status_code == 200 else []
        except (httpx.HTTPError, ValueError, AttributeError):
            entries = []
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and entry.get("id") == model:
                value = entry.get("max_model_len")
                limit = int(value) if isinstance(value, int) and value > 0 else None
    if limit is None:
        log.info(
            "model %s: the server names no context length and models.%s.max_model_len is "
            "unset: prompt lengths are not checked",
            name,
            name,
        )
        return Meter(None, None)
    if spec.get("tokenizer"):
        tokenizer = _load_tokenizer(name, spec, str(spec["tokenizer"]))
        return Meter(int(limit), lambda request: count_with_tokenizer(tokenizer, request))
    url = _server_root(base_url) + "/tokenize"
    client = httpx.Client(headers=dict(headers), timeout=timeout)

    def count(request: Request) -> int:
        body: dict[str, Any] = {"model": model}
        if request.messages is not None:
            body["messages"] = [dict(m) for m in request.messages]
            body["add_generation_prompt"] = True
        else:
            body["prompt"] = request.prompt
        try:
            response = client.post(url, json=body)
            if response.status_code == 200:
                return int(response.json()["count"])
            status = f"HTTP {response.status_code}"
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as err:
            status = type(err).__name__
        raise LLMError(f"model {name}: the server's {url} counted no tokens ({status})")

    try:
        response = client.post(url, json={"model": model, "prompt": "x"}, timeout=probe_s)
        if response.status_code != 200:
            raise LLMError(f"HTTP {response.status_code}")
        int(response.json()["count"])
    except (httpx.HTTPError, LLMError, ValueError, KeyError, TypeError):
        client.close()
        log.info(
            "model %s: the server at %s counts no tokens (no /tokenize) and models.%s.tokenizer "
            "is unset: prompt lengths are not checked",
            name,
            base_url,
            name,
        )
        return Meter(int(limit), None)
    return Meter(int(limit), count, workers=int(spec["concurrency"]))


def build_meter(name: str, spec: Mapping[str, Any]) -> Meter:
    backend = spec["backend"]
    if backend in ("vllm", "transformers"):
        return local_meter(name, spec)
    if backend == "openai":
        from splits.llm.openai_api import auth_headers

        return openai_meter(name, spec, auth_headers(name, spec))
    return Meter(None, None)


def overlong(meter: Meter, requests: Sequence[Request]) -> tuple[list[int], list[int]]:
    """(prompt tokens of each request, indices of the over-long ones)."""
    if not meter.active:
        return [], []
    if meter.workers > 1 and len(requests) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(meter.workers, len(requests))) as pool:
            lengths = list(pool.map(meter.count, requests))
    else:
        lengths = [meter.count(r) for r in requests]
    over = [
        i
        for i, (n, r) in enumerate(zip(lengths, requests, strict=True))
        if n + int(r.params.max_tokens) > meter.limit
    ]
    return lengths, over


def refusal(
    name: str,
    limit: int,
    lengths: Sequence[int],
    over: Sequence[int],
    requests: Sequence[Request],
    labels: Sequence[str],
) -> PromptTooLong:
    longest = max(over, key=lambda i: lengths[i])
    return PromptTooLong(
        f"model {name}: {len(over)} of {len(requests)} prompts do not fit its context of "
        f"{limit} tokens with their answer; the longest has {lengths[longest]} prompt tokens "
        f"+ max_tokens {requests[longest].params.max_tokens} ({labels[longest]}); raise "
        f"models.{name}.max_model_len (a model with a longer context), shorten the prompts "
        f"(fewer or shorter posts, a smaller max_tokens) or set models.{name}.overlong_prompts: "
        "skip to answer the others"
    )


def skipped(length: int) -> Completion:
    return Completion("", OVERLONG, int(length), 0, 0.0)
