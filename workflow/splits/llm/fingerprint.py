"""Model identity for the response cache: what makes two model specs the same model."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

SMALL_FILE_BYTES = 1 << 20  # JSON/config files up to this size are hashed whole


def local_fingerprint(path: str | Path) -> str | None:
    """A cheap fingerprint of a local model directory (None for hub ids): the content of its
    small text files (config, tokenizer, generation config) and the names and sizes of the
    others (weights), so a rebuilt or replaced local model does not hit stale cache entries."""
    root = Path(path)
    if not root.is_dir():
        return None
    digest = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = file.relative_to(root).as_posix()
        if rel.startswith(".") or "/." in rel:
            continue
        size = file.stat().st_size
        digest.update(f"{rel}\0{size}\0".encode())
        if file.suffix in (".json", ".txt", ".model", ".jinja") and size <= SMALL_FILE_BYTES:
            digest.update(file.read_bytes())
    return digest.hexdigest()


def hf_identity(backend: str, spec: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    identity: dict[str, Any] = {"backend": backend}
    for key in ("model", "revision", "tokenizer", *keys):
        identity[key] = spec.get(key)
    identity["model_fingerprint"] = local_fingerprint(spec["model"])
    if spec.get("tokenizer"):
        identity["tokenizer_fingerprint"] = local_fingerprint(spec["tokenizer"])
    return identity
