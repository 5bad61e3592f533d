"""Triviality: how much a lexicon merely restates its target group's identity.

With S_d the target group's identity words, the strings ``", ".join(S_d)`` and ``", ".join(L)``
are encoded token by token; triviality is SubspaceBERTScore recall (Ishibashi et al., NAACL 2024,
as the 2026 Splits! release computes it): for every token vector a of S_d, its soft membership in
the span of the lexicon's token vectors is the norm of the projection of a / |a| onto that span
(an orthonormal basis from the QR decomposition of the lexicon's vectors); recall is the mean of
the memberships weighted by |a|. 1: the lexicon's vectors span every identity token.

Encoders (``hypotheses.encoder``):

- a Hugging Face encoder (``transformers.AutoModel``; the release uses ``bert-base-uncased``):
  last hidden states of every token, special tokens included, at most 128 tokens, batched (the
  padding is removed per text, so a text's vectors do not depend on its batch);
- ``builtin`` kind ``hashed-ngrams``: an offline stand-in with no model download. Each word token
  (the retrieval tokens) gets the sum of signed hashed vectors of its character 3-grams
  (with word boundary marks) in ``dims`` dimensions. It is not contextual and knows no synonyms:
  it measures spelling overlap with the identity words (identity words score 1, unrelated words
  low), which is what the sample corpus needs and what a run without a GPU or network can do.

Identity words come from the demographics file (``identity_words`` of each demographic) or from a
JSON/YAML mapping ``{demographic: [words]}`` (the release's ``lexica/demo_seed_words.json``
format) given as ``hypotheses.identity_words``. Beside the score, ``identity_words_covered`` lists
the identity words whose tokens occur consecutively inside one lexicon entry.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import polars as pl
from threadpoolctl import threadpool_limits

from splits.config.definitions import load_demographics
from splits.config.yamlfile import parse_yaml
from splits.errors import ConfigError
from splits.hypotheses.lexicon import entry_tokens
from splits.llm.devices import pick_device

log = logging.getLogger(__name__)

MAX_LENGTH = 128  # encoder tokens per text, as the release
HASHED_KIND = "hashed-ngrams"
HASHED_DIMS = 1024
HASHED_CACHE_WORDS = 20_000  # word vectors kept (8 KiB each at 1024 dimensions)
# The score is rounded: the decomposition under it runs in the machine's BLAS, whose kernels
# (chosen per CPU) round in their own order, so unrounded the same inputs gave floats a few ulps
# apart on two CPUs (and outputs that differ byte for byte); 9 decimals, as group-ness, is far
# below any use.
SCORE_DECIMALS = 9


# --------------------------------------------------------------------------- the score


def span_basis(vectors: np.ndarray) -> np.ndarray:
    """Orthonormal columns spanning the rows of ``vectors``: the left singular vectors of the
    singular values above numpy's rank tolerance (``matrix_rank``'s: the largest times the
    larger dimension times the float epsilon). A QR keeps a column for every vector, and where
    vectors repeat (a token's vector, such as every ", " separator's under the hashed encoder,
    is the same each time) the extra columns are directions made of rounding noise, which
    differ from one CPU's BLAS to another's and count as part of the span: the score was
    inflated and changed by up to 0.03 between two BLAS kernels on the same machine. Where the
    vectors are independent (a BERT encoder's, each token in its own context) the span is the
    QR's, as the release computes it."""
    left, singular, _ = np.linalg.svd(vectors.T, full_matrices=False)
    if not singular.size or singular[0] <= 0:
        return left[:, :0]
    tolerance = singular[0] * max(vectors.shape) * np.finfo(np.float64).eps
    return left[:, : int((singular > tolerance).sum())]


def subspace_recall(identity: np.ndarray, lexicon: np.ndarray) -> float:
    """SubspaceBERTScore recall of the identity token vectors (rows) against the span of the
    lexicon's token vectors (rows), rounded to ``SCORE_DECIMALS`` decimals."""
    identity = np.asarray(identity, dtype=np.float64)
    lexicon = np.asarray(lexicon, dtype=np.float64)
    if identity.ndim != 2 or lexicon.ndim != 2 or not len(identity) or not len(lexicon):
        raise ValueError("subspace_recall needs two non-empty matrices of token vectors")
    basis = span_basis(lexicon)
    weights = np.linalg.norm(identity, axis=1)
    keep = weights > 0
    if not keep.any():
        return 0.0
    unit = identity[keep] / weights[keep, None]
    membership = np.minimum(np.linalg.norm(unit @ basis, axis=1), 1.0)
    return round(float((membership * weights[keep]).sum() / weights[keep].sum()), SCORE_DECIMALS)


def covered_identity_words(identity_words: Sequence[str], lexicon: Sequence[str]) -> list[str]:
    """Identity words whose tokens occur consecutively inside one lexicon entry."""
    entries = [entry_tokens(e) for e in lexicon]
    out = []
    for word in identity_words:
        tokens = entry_tokens(word)
        size = len(tokens)
        if size and any(
            tokens == entry[i : i + size] for entry in entries for i in range(len(entry) - size + 1)
        ):
            out.append(word)
    return out


def joined(words: Sequence[str]) -> str:
    """The text a word list is encoded as (the release's ``", ".join``)."""
    return ", ".join(words)


# --------------------------------------------------------------------------- encoders


class Encoder(Protocol):
    name: str

    def identity(self) -> dict[str, Any]: ...

    def encode(self, texts: Sequence[str]) -> list[np.ndarray]: ...


class HashedNgramEncoder:
    """Offline, deterministic token vectors from hashed character 3-grams (see module doc)."""

    def __init__(self, name: str, dims: int = HASHED_DIMS):
        if not isinstance(dims, int) or isinstance(dims, bool) or dims < 8:
            raise ConfigError(f"models.{name}.dims: must be an integer >= 8")
        self.name = name
        self.dims = dims
        self._cache: dict[str, np.ndarray] = {}

    def identity(self) -> dict[str, Any]:
        return {"backend": "builtin", "kind": HASHED_KIND, "dims": self.dims, "version": 1}

    def _word(self, word: str) -> np.ndarray:
        if word not in self._cache:
            if len(self._cache) >= HASHED_CACHE_WORDS:  # bounded memory over a large vocabulary
                self._cache.clear()
            marked = f"<{word}>"
            vector = np.zeros(self.dims)
            for i in range(len(marked) - 2):
                digest = hashlib.blake2b(marked[i : i + 3].encode("utf-8"), digest_size=8).digest()
                value = int.from_bytes(digest, "little")
                vector[value % self.dims] += 1.0 if (value >> 63) & 1 else -1.0
            self._cache[word] = vector
        return self._cache[word]

    def encode(self, texts: Sequence[str]) -> list[np.ndarray]:
        out = []
        for text in texts:
            words = entry_tokens(text)
            out.append(
                np.stack([self._word(w) for w in words]) if words else np.zeros((0, self.dims))
            )
        return out


class TransformersEncoder:
    """A Hugging Face encoder: last hidden states of every non-padding token (special tokens
    included), texts batched by length."""

    def __init__(self, name: str, spec: Mapping[str, Any]):
        try:
            import torch
            from transformers import AutoModel, AutoTokenizer
        except ImportError as err:
            raise ConfigError(
                f"hypotheses.encoder: {name} needs torch and transformers "
                f"(pip install 'splits[llm]'): {err}"
            ) from err
        self.name = name
        self.spec = dict(spec)
        self.batch_size = int(spec.get("batch_size") or 32)
        self.device = torch.device(pick_device(spec.get("device"), key=f"models.{name}.device"))
        if spec.get("cpu_threads") and self.device.type == "cpu":
            torch.set_num_threads(int(spec["cpu_threads"]))
        source = spec["model"]
        common = {
            "revision": spec.get("revision"),
            "trust_remote_code": bool(spec.get("trust_remote_code", False)),
        }
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(
                spec.get("tokenizer") or source, **common
            )
            self.model = AutoModel.from_pretrained(source, **common)
        except (OSError, ValueError) as err:
            raise ConfigError(
                f"hypotheses.encoder: cannot load {source!r} ({str(err).splitlines()[0]})"
            ) from err
        self.model.to(self.device).eval()
        self._torch = torch

    def identity(self) -> dict[str, Any]:
        from splits.llm.fingerprint import hf_identity

        return hf_identity("transformers-encoder", self.spec, ())

    def encode(self, texts: Sequence[str]) -> list[np.ndarray]:
        torch = self._torch
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out: list[np.ndarray | None] = [None] * len(texts)
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                batch = self.tokenizer(
                    [texts[i] for i in chunk],
                    padding=True,
                    truncation=True,
                    max_length=MAX_LENGTH,
                    return_tensors="pt",
                ).to(self.device)
                hidden = self.model(**batch).last_hidden_state.float().cpu().numpy()
                mask = batch["attention_mask"].cpu().numpy().astype(bool)
                for row, i in enumerate(chunk):
                    out[i] = hidden[row][mask[row]]
        return [o if o is not None else np.zeros((0, 1)) for o in out]


def load_encoder(name: str, registry: Mapping[str, Any]) -> Encoder:
    """The encoder ``name``: a registry entry (``backend: transformers`` or ``backend: builtin,
    kind: hashed-ngrams``), or else a Hugging Face model id or local path."""
    if name in registry:
        from splits.llm.registry import model_spec

        spec = model_spec(name, registry)
        backend = spec["backend"]
        if backend == "builtin" and spec.get("kind") == HASHED_KIND:
            return HashedNgramEncoder(name, spec.get("dims", HASHED_DIMS))
        if backend == "transformers":
            return TransformersEncoder(name, spec)
        raise ConfigError(
            f"hypotheses.encoder: model {name!r} is {backend} "
            f"{spec.get('kind', '')}; an encoder is a transformers model or builtin {HASHED_KIND}"
        )
    return TransformersEncoder(name, {"model": name})


# --------------------------------------------------------------------------- identity words


def load_identity_words(path: str | Path | None, demographics_file: str | Path) -> dict:
    """{demographic: [identity words]} from ``path`` (JSON or YAML mapping, the release's
    format) or, when ``path`` is None, the demographics file's ``identity_words``."""
    if path is None:
        return {d.key: list(d.identity_words) for d in load_demographics(demographics_file)}
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"hypotheses.identity_words: {path} does not exist")
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".json":
        data = parse_yaml(text, f"hypotheses.identity_words: {path}")
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ConfigError(f"hypotheses.identity_words: cannot parse {path} ({err})") from err
    if not isinstance(data, Mapping) or not all(
        isinstance(v, list) and all(isinstance(w, str) for w in v) for v in data.values()
    ):
        raise ConfigError(
            f"hypotheses.identity_words: {path} must map each demographic to a list of words"
        )
    return {str(k): list(v) for k, v in data.items()}


def require_identity_words(words: Mapping[str, Sequence[str]], targets: Sequence[str]) -> None:
    missing = sorted({t for t in targets if not words.get(t)})
    if missing:
        raise ConfigError(
            f"hypotheses.identity_words: no identity words for {', '.join(missing)} "
            "(add identity_words to the demographics file or give a mapping file)"
        )


# --------------------------------------------------------------------------- scoring a set


def triviality_scores(
    encoder: Encoder,
    pairs: Sequence[tuple[str, str]],
    batch_texts: int,
) -> list[float]:
    """SubspaceBERTScore recall of each (identity text, lexicon text) pair. Each distinct text is
    encoded once; lexicon texts are encoded ``batch_texts`` at a time and dropped after scoring,
    so memory holds one batch of hidden states plus the identity texts'."""
    identity_texts = sorted({i for i, _ in pairs})
    identity_vectors = dict(zip(identity_texts, encoder.encode(identity_texts), strict=True))
    lexicon_texts = list(dict.fromkeys(lex for _, lex in pairs))
    wanted: dict[str, list[int]] = {}
    for row, (_, lex) in enumerate(pairs):
        wanted.setdefault(lex, []).append(row)
    scores = [float("nan")] * len(pairs)
    for start in range(0, len(lexicon_texts), batch_texts):
        chunk = lexicon_texts[start : start + batch_texts]
        encoded = encoder.encode(chunk)
        # one small QR per pair: a multi-threaded BLAS only contends with itself here
        with threadpool_limits(limits=1, user_api="blas"):
            for text, vectors in zip(chunk, encoded, strict=True):
                for row in wanted[text]:
                    identity = identity_vectors[pairs[row][0]]
                    if len(vectors) and len(identity):
                        scores[row] = subspace_recall(identity, vectors)
        log.info("triviality: %d of %d lexicons encoded", start + len(chunk), len(lexicon_texts))
    return scores


def triviality_frame(hypotheses: Sequence, words: Mapping[str, Sequence[str]], encoder, batch: int):
    """The triviality table of a set: score and covered identity words per hypothesis."""
    require_identity_words(words, sorted({h.target for h in hypotheses}))
    pairs = [(joined(words[h.target]), joined(list(h.lexicon))) for h in hypotheses]
    scores = triviality_scores(encoder, pairs, batch)
    return pl.DataFrame(
        {
            "hypothesis_id": [h.hypothesis_id for h in hypotheses],
            "triviality": scores,
            "identity_words_covered": [
                covered_identity_words(words[h.target], h.lexicon) for h in hypotheses
            ],
        },
        schema={
            "hypothesis_id": pl.String,
            "triviality": pl.Float64,
            "identity_words_covered": pl.List(pl.String),
        },
    )
