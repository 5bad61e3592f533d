"""The one device picker of the package's torch models (LLMs, encoders)."""

from __future__ import annotations

from splits.errors import ConfigError


def pick_device(requested: str | None) -> str:
    """The torch device to load a model on: ``requested`` None or ``"auto"`` gives ``"cuda"``
    when a CUDA GPU is visible, else ``"cpu"``; any other value is returned as it is, except a
    ``cuda`` device when no CUDA GPU is visible (a ``ConfigError``: the caller names its key)."""
    import torch

    device = str(requested or "auto")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"{device} requested but no CUDA GPU is visible")
    return device
