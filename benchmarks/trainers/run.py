"""Trainer benchmarks: update throughput against TRL, and a small learning run.

``python -m benchmarks.trainers.run throughput`` times one policy-gradient update (forward,
backward, optimiser step) of our :class:`~comprl_gym.trainers.policy.PolicyOptimizer` (CISPO)
and of TRL's ``GRPOTrainer`` with ``loss_type="cispo"`` on the same model, the same batch of
token sequences and the same prompt/completion lengths, alternating in one process. TRL's
update is timed through its own ``compute_loss`` (what ``training_step`` runs once the
generations are buffered), ``accelerator.backward`` and its optimiser.

``python -m benchmarks.trainers.run learning`` trains GRPO and Complementary RL on an easy
task family with the same seeds and the same number of rollouts and plots success curves and
the actor's wait time for experience.

``python -m benchmarks.trainers.run paper-table --config configs/paper-table-cpu.yaml``
reproduces the paper's comparison at the scale a config sets: the untrained actor, GRPO,
static experience (frozen extractor), experience-only (frozen actor) and Complementary RL, each
trained from the same YAML with the same budget and seeds, then evaluated at the config's
``eval_temperature`` (both shipped configs sample at T=1) on the same evaluation tasks (reset
seeds after the training pool's) without (arm ``none``) and, where a store exists, with
experience (arm ``own``). The table is the library's (``comprl-gym table``,
:mod:`comprl_gym.evaluation.table`): each arm's success pooled over seeds with a Wilson 95%
interval and per-seed rates, each method minus GRPO and minus the untrained actor paired per
(seed, task) with Newcombe's interval and McNemar's p. A GPU run is the same command with a
config whose models and budget fit the device.

Results go to ``benchmarks/results/trainers_throughput*.json``, ``trainers_learning.json``
(written by ``learning``; none is committed: no run of it on the current code exists),
``paper_table.json``, ``.md`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import RESULTS, finished

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _batch(vocab: int, batch: int, prompt_len: int, completion_len: int, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(10, vocab - 10, (batch, prompt_len), generator=g)
    completions = torch.randint(10, vocab - 10, (batch, completion_len), generator=g)
    advantages = torch.randn(batch, generator=g)
    return prompts, completions, advantages


def throughput(args: argparse.Namespace) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from comprl_gym.llm.models import resolve_model
    from comprl_gym.trainers.config import ModelSettings
    from comprl_gym.trainers.losses import CISPO
    from comprl_gym.trainers.policy import PolicyOptimizer, TrainSample

    torch.set_num_threads(args.threads)
    path = str(resolve_model(args.model))
    tokenizer = AutoTokenizer.from_pretrained(path)
    prompts, completions, advantages = _batch(
        len(tokenizer), args.batch, args.prompt_len, args.completion_len
    )
    tokens_per_update = args.batch * (args.prompt_len + args.completion_len)

    # ---- ours
    ours = PolicyOptimizer.from_settings(
        ModelSettings(model=args.model, lr=1e-6, micro_batch_size=args.batch), loss=CISPO()
    )
    samples = [
        TrainSample.from_generation(p.tolist(), c.tolist(), float(a))
        for p, c, a in zip(prompts, completions, advantages)
    ]

    def ours_step() -> float:
        start = time.perf_counter()
        ours.update(samples)
        return time.perf_counter() - start

    # ---- TRL
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    out = tempfile.mkdtemp()
    config = GRPOConfig(
        output_dir=out,
        loss_type="cispo",
        epsilon_high=5.0,
        beta=0.0,
        learning_rate=1e-6,
        per_device_train_batch_size=args.batch,
        num_generations=args.batch,
        max_completion_length=args.completion_len,
        use_cpu=True,
        report_to=[],
        logging_steps=1000,
        save_strategy="no",
        # Same numerics as ours: float32, no activation recomputation. (TRL's defaults are
        # bf16=True and gradient_checkpointing=True; bf16 autocast is very slow on most CPUs.)
        bf16=False,
        gradient_checkpointing=False,
    )
    trl = GRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **_: [0.0] * len(completions),
        args=config,
        train_dataset=Dataset.from_dict({"prompt": ["hi"] * args.batch}),
        processing_class=tokenizer,
    )
    trl.create_optimizer()
    trl.current_gradient_accumulation_steps = 1
    inputs = {
        "prompt_ids": prompts,
        "prompt_mask": torch.ones_like(prompts),
        "completion_ids": completions,
        "completion_mask": torch.ones_like(completions),
        "advantages": advantages,
        "old_per_token_logps": None,
        "num_items_in_batch": torch.tensor(float(completions.numel())),
    }

    def trl_step() -> float:
        start = time.perf_counter()
        trl.model.train()
        loss = trl.compute_loss(trl.model, inputs)
        trl.accelerator.backward(loss)
        trl.optimizer.step()
        trl.optimizer.zero_grad()
        return time.perf_counter() - start

    ours_step(), trl_step()  # warm-up
    ours_times, trl_times = [], []
    for _ in range(args.repeats):
        ours_times.append(ours_step())
        trl_times.append(trl_step())
    ours_tps = tokens_per_update / statistics.median(ours_times)
    trl_tps = tokens_per_update / statistics.median(trl_times)
    result = {
        "model": args.model,
        "batch": args.batch,
        "prompt_len": args.prompt_len,
        "completion_len": args.completion_len,
        "threads": args.threads,
        "repeats": args.repeats,
        "ours_update_s": ours_times,
        "trl_update_s": trl_times,
        "ours_tokens_per_s": ours_tps,
        "trl_tokens_per_s": trl_tps,
        "ratio_ours_over_trl": ours_tps / trl_tps,
    }
    print("\n| trainer | median update (s) | tokens/s | ratio |\n| --- | --- | --- | --- |")
    print(
        f"| comprl-gym PolicyOptimizer (cispo) | {statistics.median(ours_times):.2f} | {ours_tps:.0f} | {ours_tps / trl_tps:.2f} |"
    )
    print(
        f"| TRL GRPOTrainer loss_type=cispo | {statistics.median(trl_times):.2f} | {trl_tps:.0f} | 1.00 |"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "trainers_throughput.json").write_text(json.dumps(result, indent=2) + "\n")
    _plot_throughput(result)
    return result


def _plot_throughput(result: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    names = ["comprl-gym", "TRL GRPOTrainer"]
    values = [result["ours_tokens_per_s"], result["trl_tokens_per_s"]]
    ax.bar(names, values, color=["tab:blue", "tab:gray"])
    ax.set_ylabel("update tokens/s")
    ax.set_title(
        f"CISPO update, {result['model']}, {result['batch']}x"
        f"{result['prompt_len'] + result['completion_len']} tokens"
    )
    for i, v in enumerate(values):
        ax.text(i, v, f"{v:.0f}", ha="center", va="bottom")
    fig.tight_layout()
    fig.savefig(RESULTS / "trainers_throughput.png", dpi=120)


def learning(args: argparse.Namespace) -> dict:
    import torch

    from comprl_gym.trainers import TrainConfig, make_trainer

    torch.set_num_threads(args.threads)
    runs: dict[str, list[dict]] = {}
    summaries: dict[str, list[dict]] = {}
    for algorithm in ("grpo", "complementary"):
        for seed in args.seeds:
            out = Path(args.output_dir) / f"{algorithm}-seed{seed}"
            config = TrainConfig.from_dict(
                {
                    "algorithm": algorithm,
                    "seed": seed,
                    "env_ids": [args.env_id],
                    "iterations": args.iterations,
                    "groups_per_iteration": args.groups,
                    "group_size": args.group_size,
                    "max_episode_steps": args.max_steps,
                    "actor": {"model": args.model, "lr": args.lr, "max_new_tokens": 24},
                    "extractor": {"model": args.model, "lr": args.lr, "max_new_tokens": 40},
                    "output_dir": str(out),
                    "resume": False,
                    "eval_tasks": args.eval_tasks,
                    "progress": True,
                    "tensorboard": False,
                }
            )
            trainer = make_trainer(config)
            try:
                summary = trainer.train()
            finally:
                trainer.close()
            runs.setdefault(algorithm, []).append(trainer.metrics.read())
            summaries.setdefault(algorithm, []).append(summary)
    result = {
        "args": vars(args) | {"seeds": list(args.seeds)},
        "runs": runs,
        "summaries": summaries,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "trainers_learning.json").write_text(
        json.dumps(result, indent=2, default=str) + "\n"
    )
    _plot_learning(result)
    print(
        "\n| algorithm | seed | train success (last 3 it.) | eval w/o exp | eval with exp | mean actor wait/it (s) | time (min) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for algorithm, per_seed in runs.items():
        for seed, records, summary in zip(args.seeds, per_seed, summaries[algorithm]):
            tail = [r["success"] for r in records[-3:]]
            ev = summary["evaluation"].get(args.env_id, {})
            w = ev.get("without_experience", {}).get("success", float("nan"))
            x = ev.get("with_experience", {}).get("success", float("nan"))
            wait = statistics.mean(r["actor_wait_s"] for r in records)
            print(
                f"| {algorithm} | {seed} | {statistics.mean(tail):.2f} | {w:.2f} | {x:.2f} | {wait:.2f} | {summary['train_time_s'] / 60:.1f} |"
            )
    return result


#: The paper's table (arXiv 2603.17621, 3-task mix): success by method and evaluation mode.
PAPER_TABLE = {
    ("grpo", "without_experience"): 0.75,
    ("static_experience", "with_experience"): 0.59,
    ("static_experience", "without_experience"): 0.54,
    ("experience_only", "with_experience"): 0.33,
    ("complementary", "with_experience"): 0.82,
    ("complementary", "without_experience"): 0.78,
}
METHODS = ("untrained", "grpo", "static_experience", "experience_only", "complementary")


def paper_table(args: argparse.Namespace) -> dict:
    """Train every method from one config with the same seeds and budget; evaluate all alike.

    Seeds are the outer loop, so a run cut short has every method for the seeds it finished.
    The table is rewritten after every run; with ``--resume`` a run whose ``summary.json``
    (written by the trainer at its end) is already in ``--output-dir`` is read, not repeated.
    """
    import torch

    from comprl_gym.trainers import TrainConfig, make_trainer
    from comprl_gym.utils import atomic_write_json

    torch.set_num_threads(args.threads)
    runs: dict[str, dict[int, dict]] = {}
    for seed in args.seeds:
        for method in args.methods:
            run_dir = Path(args.output_dir) / f"{method}-seed{seed}"
            if args.resume and finished(run_dir):
                from comprl_gym.trainers.run import Run

                runs.setdefault(method, {})[seed] = Run(run_dir).summary
                print(f"{method} seed {seed}: read {run_dir}", flush=True)
                continue
            overrides = [
                f"algorithm={'grpo' if method == 'untrained' else method}",
                f"seed={seed}",
                f"output_dir={run_dir}",
                "resume=false",
                *args.set,
            ]
            config = TrainConfig.from_yaml(args.config, overrides)
            trainer = make_trainer(config)
            try:
                if method == "untrained":
                    started = time.perf_counter()
                    summary = {"evaluation": trainer.evaluate(), "train_time_s": 0.0}
                    summary["times"] = {"evaluation_s": time.perf_counter() - started}
                    atomic_write_json(run_dir / "summary.json", summary)
                else:
                    summary = trainer.train()
            finally:
                trainer.close()
            runs.setdefault(method, {})[seed] = summary
            print(f"{method} seed {seed}: {summary['evaluation']}", flush=True)
            _write_paper_table(args, runs)  # on disk now: a run cut short keeps what finished
    return _write_paper_table(args, runs)  # every run, those read back last included


#: The trainer's evaluation modes as the library table's arms: no lessons, the run's own store.
EVAL_ARMS = {"without_experience": "none", "with_experience": "own"}


def paper_table_runs(runs: dict[str, dict[int, dict]]) -> dict[str, list]:
    """Each method's finished runs as :mod:`comprl_gym.evaluation.table` reads them: the
    trainer's final evaluation, one visit, its without-experience episodes the ``none`` arm
    and its with-experience ones the ``own`` arm. A task is (env id, evaluation task); every
    method of a seed plays the same tasks with the same sampling seed (the trainer's common
    random numbers), so methods pair per (seed, task)."""
    from comprl_gym.evaluation.table import Run

    methods: dict[str, list] = {}
    for method, by_seed in runs.items():
        for seed, summary in sorted(by_seed.items()):
            episodes = [
                {
                    "arm": arm,
                    "visit": 1,
                    "task_index": (env_id, t),
                    "won": won,
                    "reset_seed": (env_id, t),
                    "sampling_seed": seed,
                }
                for env_id, row in sorted(summary["evaluation"].items())
                for mode, arm in EVAL_ARMS.items()
                if mode in row
                for t, won in enumerate(row[mode]["won"])
            ]
            methods.setdefault(method, []).append(
                Run(seed, method, "", episodes, source=f"{method}-seed{seed}")
            )
    return methods


def _write_paper_table(args: argparse.Namespace, runs: dict[str, dict[int, dict]]) -> dict:
    """The table of the runs finished so far, written by the library's ``comprl-gym table``
    logic (each method's arms pooled over seeds with Wilson intervals, per-seed rates, each
    method minus GRPO and minus the untrained actor, paired): JSON, Markdown and PNG, with the
    paper's numbers beside it."""
    from comprl_gym.evaluation.table import markdown, write_table

    methods = paper_table_runs(runs)
    against = [m for m in ("grpo", "untrained") if m in methods]
    extra = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "paper": {f"{method} {mode}": v for (method, mode), v in PAPER_TABLE.items()},
        "train_time_s": {
            method: [runs[method][s]["train_time_s"] for s in sorted(runs[method])]
            for method in runs
        },
    }
    result = write_table(Path(args.out).with_suffix(""), methods, against, extra)
    print(markdown(result), flush=True)
    return result


def _plot_learning(result: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.6))
    colors = {"grpo": "tab:gray", "complementary": "tab:blue"}
    for algorithm, per_seed in result["runs"].items():
        for i, records in enumerate(per_seed):
            x = [r["rollouts"] for r in records]
            ax.plot(
                x,
                [r["success"] for r in records],
                color=colors[algorithm],
                alpha=0.8,
                label=algorithm if i == 0 else None,
            )
            bx.plot(
                x,
                [r["actor_wait_s"] for r in records],
                color=colors[algorithm],
                alpha=0.8,
                label=algorithm if i == 0 else None,
            )
    ax.set_xlabel("rollouts")
    ax.set_ylabel("training success rate")
    ax.set_title(result["args"]["env_id"])
    ax.legend()
    bx.set_xlabel("rollouts")
    bx.set_ylabel("actor wait for experience (s / iteration)")
    bx.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "trainers_learning.png", dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("throughput")
    p.add_argument("--model", default="smollm2")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=192)
    p.add_argument("--completion-len", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p = sub.add_parser("learning")
    p.add_argument("--model", default="smollm2")
    p.add_argument("--env-id", default="comprl/MiniHack-Room-Random-5x5-v0")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--iterations", type=int, default=8)
    p.add_argument("--groups", type=int, default=2)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-steps", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-6)
    p.add_argument("--eval-tasks", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--output-dir", default=tempfile.mkdtemp(prefix="bench-trainers-"))
    p = sub.add_parser("paper-table", help="every method from one config, same seeds and budget")
    p.add_argument("--config", default="configs/paper-table-cpu.yaml")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(RESULTS / "paper_table.json"))
    p.add_argument("--output-dir", default=tempfile.mkdtemp(prefix="bench-paper-table-"))
    p.add_argument(
        "--resume", action="store_true", help="read finished runs from --output-dir, run the rest"
    )
    args = parser.parse_args(argv)
    {"throughput": throughput, "learning": learning, "paper-table": paper_table}[args.what](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
