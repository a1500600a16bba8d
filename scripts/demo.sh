#!/usr/bin/env bash
# The main job on the embedded defaults: a short Complementary RL run (SmolLM2-135M as actor
# and extractor, generated MiniHack tasks) ending with a before/after, with/without-experience table.
# About 7 minutes on 2 quiet cores (20-30 when shared). Rerunning continues from the last checkpoint in runs/demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/comprl-gym train --config configs/demo.yaml
