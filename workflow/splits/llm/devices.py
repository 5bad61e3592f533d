"""The one device picker of the package's torch models (a transformers LLM, the hypotheses'
encoder): ``auto`` (or none) is the GPU where one is visible, else the CPU; an explicit ``cuda``
device is refused in one line where no GPU is visible."""

from __future__ import annotations

from splits.errors import ConfigError


def pick_device(requested: str | None, *, key: str = "device") -> str:
    """The torch device to use for ``requested`` (``auto``/None, ``cpu``, ``cuda``, ``cuda:N``,
    ...); ConfigError naming ``key`` when a CUDA device is asked for and none is visible."""
    import torch

    device = str(requested or "auto")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"{key}: {device} requested but no CUDA GPU is visible")
    return device
