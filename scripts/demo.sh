#!/usr/bin/env bash
# The main job on the embedded defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/comprl-gym run 'comprl/MiniHack-*' --agent expert --episodes 5 --seed 0
