"""vLLM's own OpenAI-compatible server (``vllm serve``) as the server of a served ``vllm`` model
(``llm.serve.vllm_server: vllm-serve``), started with the engine arguments batch mode gives
``vllm.LLM``."""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from typing import Any

from splits.errors import ConfigError
from splits.llm.base import LLMError

log = logging.getLogger(__name__)


VLLM_CPU_CLI = """
import importlib.metadata as metadata, sys
version = metadata.version
def alias(name):
    try:
        return version(name)
    except metadata.PackageNotFoundError:
        if name != "vllm":
            raise
        return version("vllm-cpu") + "+cpu"  # as vllm.platforms reads it: a CPU build
metadata.version = alias
sys.argv[0] = "vllm"
from vllm.entrypoints.cli.main import main
main()
"""


def vllm_command() -> list[str] | None:
    """How to run vLLM's command line here: ``vllm`` on PATH, or through this Python where the
    installed vLLM is the CPU build ``vllm-cpu`` (whose own ``vllm`` command fails); None where
    there is neither."""
    import importlib.metadata

    try:
        importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        try:
            importlib.metadata.version("vllm-cpu")
        except importlib.metadata.PackageNotFoundError:
            pass
        else:
            return [sys.executable, "-c", VLLM_CPU_CLI]
    executable = shutil.which("vllm")
    return [executable] if executable is not None else None


def vllm_serve_argv(name: str, spec: Mapping[str, Any], host: str, port: int) -> list[str]:
    """``vllm serve`` with the engine arguments batch mode gives ``vllm.LLM`` (the same model,
    revision, parallelism, context, dtype, memory share, prefix caching, seed), served under the
    registry name."""
    from splits.llm.vllm_backend import engine_kwargs

    command = vllm_command()
    if command is None:
        raise ConfigError(
            f"models.{name}: llm.serve.vllm_server is vllm-serve but no vllm executable is on "
            "PATH (pip install 'splits[vllm]')"
        )
    kwargs = engine_kwargs(spec)
    argv = [*command, "serve", str(kwargs.pop("model")), "--host", host, "--port", str(port)]
    argv += ["--served-model-name", name]
    kwargs.pop("disable_log_stats", None)  # the server logs its statistics by default
    for key, value in kwargs.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False:
            if key == "enable_prefix_caching":
                argv.append("--no-enable-prefix-caching")
        else:
            argv += [flag, str(value)]
    return argv


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _exit_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """The child gets SIGTERM when this server process dies, even by SIGKILL (Linux)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class VLLMServe:
    """vLLM's own OpenAI-compatible server as a child process, ready once ``/health`` answers."""

    kind = "vllm"
    busy = False  # vLLM queues requests itself; active clients hold the lease
    last_active = 0.0

    def __init__(self, name: str, spec: Mapping[str, Any], host: str = "127.0.0.1"):
        self.name = name
        self.host = host
        self.port = _free_port(host)
        self.argv = vllm_serve_argv(name, spec, host, self.port)
        self.process: subprocess.Popen | None = None

    def start(self, stopping: threading.Event) -> VLLMServe:
        import httpx

        shown = ["vllm", *self.argv[3:]] if self.argv[1:2] == ["-c"] else self.argv
        log.info("model %s: %s", self.name, " ".join(shown))
        self.process = subprocess.Popen(self.argv, preexec_fn=_exit_with_parent)
        url = f"http://{self.host}:{self.port}/health"
        while not stopping.is_set():
            if self.process.poll() is not None:
                raise LLMError(
                    f"model {self.name}: vllm serve exited with status {self.process.returncode}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=5).status_code == 200:
                    break
            stopping.wait(1.0)
        return self

    def stats(self) -> dict[str, Any]:
        return {
            "model": self.name,
            "server": "vllm serve",
            "pid": getattr(self.process, "pid", None),
        }

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
