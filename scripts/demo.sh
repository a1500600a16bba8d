#!/usr/bin/env bash
# The main job on the embedded defaults (`make demo`; docs/results/demo.md):
#   1. a short Complementary RL run on the memory family (configs/demo.yaml), from the
#      committed reader assets/memory-reader/reader.pt (rebuilt by configs/memory-reader.yaml
#      when absent: about 30 more minutes on 2 cores);
#   2. `comprl-gym stream`, before and after that training, on 32 held-out dungeons of the
#      memory family's `test` pool, each visited twice, on common random numbers: no lessons,
#      the run's own extractor, scripted memories, and placebos that write the same words with
#      no information; each prints success by visit per arm and each treatment minus its
#      placebo, with intervals.
# Outputs: runs/demo/ (metrics, checkpoints, store, learning_curve.png) and
# runs/demo-stream-{before,after}/ (episodes.jsonl, summary.md, stream.png). Rerunning
# continues the training from its last checkpoint and streams again (earlier streams are
# moved to runs/demo-stream-*.previous).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# glibc's malloc: a fixed 1 MiB mmap threshold, so that a freed tensor of 1 MiB or more goes
# back to the system at once. By default the threshold grows with every such free, after which
# a training step's activations land on the heap and stay resident once freed (the training
# process then held 12.1 GiB; benchmarks/results/demo_memory.json). Allocation only: no number
# changes.
export MALLOC_MMAP_THRESHOLD_=${MALLOC_MMAP_THRESHOLD_:-1048576}
export MALLOC_TRIM_THRESHOLD_=${MALLOC_TRIM_THRESHOLD_:-1048576}
READER=assets/memory-reader/reader.pt
if [ ! -f "$READER" ]; then
    echo "the reader $READER is absent: rebuilding it (about 30 minutes on 2 cores)"
    .venv/bin/comprl-gym train --config configs/memory-reader.yaml --set warmup.steps=80 \
        --set 'warmup.formats=["oracle","exemplar"]' --set warmup.lr=1e-3 \
        --set actor.init_weights= --output-dir runs/memory-reader-oe80
    .venv/bin/comprl-gym train --config configs/memory-reader.yaml --output-dir runs/memory-reader
    mkdir -p "$(dirname "$READER")"
    cp runs/memory-reader/warmup/reader.pt "$READER"
fi
.venv/bin/comprl-gym train --config configs/demo.yaml
# The same held-out dungeons, arms and seeds streamed twice: as the run starts (--config:
# the reader and the untrained extractor) and after its training (--run).
for STREAM in runs/demo-stream-before runs/demo-stream-after; do
    if [ -e "$STREAM" ]; then
        rm -rf "$STREAM.previous"
        mv "$STREAM" "$STREAM.previous"
    fi
done
.venv/bin/comprl-gym stream --config configs/demo.yaml --env comprl/Memory-Fork-v0 --split test \
    --tasks 32 --visits 2 --env-arg observation_mode=compact --env-arg branch_length=2 \
    --env-arg moves=open --max-steps 5 --temperature 1.0 --seed 0 \
    --arms none,coin,own,outcome_aware,coin_exemplar,exemplar \
    --versus own:coin --versus exemplar:coin_exemplar --versus outcome_aware:coin \
    --output-dir runs/demo-stream-before
.venv/bin/comprl-gym stream --run runs/demo --env comprl/Memory-Fork-v0 --split test \
    --tasks 32 --visits 2 --env-arg observation_mode=compact --env-arg branch_length=2 \
    --env-arg moves=open --max-steps 5 --temperature 1.0 --seed 0 \
    --arms none,coin,own,outcome_aware,coin_exemplar,exemplar \
    --versus own:coin --versus exemplar:coin_exemplar --versus outcome_aware:coin \
    --output-dir runs/demo-stream-after
echo "learning curve: runs/demo/learning_curve.png; success by visit:" \
    "runs/demo-stream-before/stream.png, runs/demo-stream-after/stream.png"
