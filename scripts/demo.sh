#!/usr/bin/env bash
# The main job on the embedded defaults: a short Complementary RL run (SmolLM2-135M as actor
# and extractor, a generated MiniHack corridor) ending with a before/after, with/without-experience
# table of held-out success. About 14 minutes on 2 cores after the install
# (benchmarks/results/demo.json). Rerunning continues from the last checkpoint in runs/demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/comprl-gym train --config configs/demo.yaml
