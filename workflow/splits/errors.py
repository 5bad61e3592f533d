"""The errors a user can cause, each printed as one line by the command line and the Snakefile."""

from __future__ import annotations


class ConfigError(ValueError):
    """A user-facing configuration error; the message is one line and names the key."""


class InputError(Exception):
    """Input data that cannot be read as a whole (a truncated or corrupt stream, an unsupported
    compression, no records at all); the message is one line and names the file. Not a
    ValueError, so that no parser fallback mistakes it for a format variant."""
