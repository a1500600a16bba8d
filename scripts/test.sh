#!/usr/bin/env bash
# The test command: install, start services, run every test (slow, docker and vllm ones too).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
bash scripts/services.sh start
trap 'bash scripts/services.sh stop' EXIT
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/python -m pytest "$@"
