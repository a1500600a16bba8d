"""Does the extractor learn from credit alone what to write? (issue 44, item 2)

``configs/extractor-credit.yaml`` trains the stem extractor (SmolLM2-135M filling the memory
family's lesson stem) by CISPO on the paper's credit and nothing else, beside the committed
reader, frozen (the paper's experience-only ablation), on the ``train`` pool's 192 dungeons
(half with the stairs east), each played in two consecutive iterations. The right lesson after a visit is "the walked side if it was won, else
the other"; the frozen extractor copies the walked side after a loss.

Per seed this script trains that config (``--set seed=S``), then gives the committed probe
episodes (16 held-out ``test_large`` dungeons, each walked once east and once west: 16 won,
16 lost) to the trained extractor, the frozen one and the scripted outcome-aware rule
(``comprl-gym probe --run``). It reports P(right | won) and P(right | lost) with Wilson
intervals, the trained extractor minus the frozen one paired over the same probe episodes
(Newcombe, McNemar), which side each wrote per (walked side, outcome) cell, the probe logged
during training (every ``experience.probe_every`` iterations), the training store's verdicts
and the credit. The issue's bar, per seed: both lower bounds above 0.5 and above the frozen
extractor. Writes ``benchmarks/results/extractor_learning.json`` and ``.png``.

``--continue-to N`` then trains each seed's run on from its last checkpoint to iteration N
(a copy of its folder, ``runs/extractor-credit-seedS-Nit``, resumed exactly: weights,
optimisers, store, task deck, RNGs) and probes it: the same run given more updates.

``--representation frozen`` first asks whether the rule is in the extractor's features: a
logistic regression on its hidden state where it samples its side, fitted on scripted walks of
the ``train`` dungeons, decodes the stairs' side of the 32 probe episodes (a diagnostic with
labels, not the method).

Run:  python -m benchmarks.extractor_learning.run --seeds 0,1,2   # ~21 min per seed, 2 cores
      python -m benchmarks.extractor_learning.run --reuse         # summarise runs/ already
      python -m benchmarks.extractor_learning.run --reuse --seeds 0,1 --continue-to 80
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from benchmarks.common import REPO, RESULTS, RUNS, comprl_gym, fresh, keep_records, write_result
from comprl_gym.envs.memory import dungeon
from comprl_gym.evaluation.stats import paired_comparison
from comprl_gym.families import family_spec
from comprl_gym.utils import atomic_write_json

CONFIG = "configs/extractor-credit.yaml"
#: ``--learner passing``: the same question with the extractor's learner that passed the
#: known-answer ladder (issue 54.6), its runs under ``runs/extractor-credit-context-seedS``.
PASSING_CONFIG = "configs/extractor-credit-context.yaml"
PASSING_RESULT = RESULTS / "extractor_learning_context.json"
#: Where its per-episode records are committed (gzipped probe reports and metrics logs).
PASSING_RECORDS = RESULTS / "extractor-learning-context"
#: The ladder's name for that learner, whose ``rule`` rung (the same probe episodes, a perfect
#: reward) is the passing study's perfect-credit diagnostic.
PASSING_VARIANT = "context-choices-t10-positive"
#: The probe report names of ``comprl-gym probe --run`` (trained first, then frozen, then the rule).
WRITERS = ("trained", "frozen", "outcome_aware")
#: Iterations per window of :func:`trained_lessons`'s ``by_window``.
WINDOW = 10
#: Per-iteration keys kept from the run's metrics.
CURVE_KEYS = {
    "probe_right_won": "probe/right_won",
    "probe_right_lost": "probe/right_lost",
    "probe_greedy_won": "probe/greedy_right_after_won",
    "probe_greedy_lost": "probe/greedy_right_after_lost",
    "probe_p_won": "probe/p_right_after_won",
    "probe_p_lost": "probe/p_right_after_lost",
    "extractor_entropy": "extractor/entropy",
    "store_right": "store/memory/right",
    "store_wrong": "store/memory/wrong",
    "credit_mean": "extractor/reward_mean",
    "batch": "extractor/batch",
    "with_experience": "with_experience/success",
    "without_experience": "without_experience/success",
}


#: The tries that led to the config's settings, each the config with ``--set`` overrides
#: (docs/results/extractor-learning.md): their runs are summarised beside the seeds when
#: their folders exist. Two were stopped early (``stopped_after``), so they have no
#: checkpoint to probe, only the probe their training logged.
TRIES = {
    "lower_lr": {
        "folder": "extractor-credit-lr5e-4-seed0",
        "overrides": ["extractor.lr=5e-4"],
    },
    "unbalanced_outcomes": {
        "folder": "extractor-credit-revisit-try",
        "overrides": ["experience.distill_balance=none", "extractor.lr=5e-4"],
        "stopped_after": 20,
    },
    "recurring_dungeons": {
        "folder": "extractor-credit-16dungeons-seed0",
        "overrides": [
            "task_pool=16",
            "task_schedule=random",
            "experience.distill=with_experience",
            "experience.inject_sample_from=3",
            "extractor.lr=5e-4",
        ],
    },
    "batch_baseline": {
        "folder": "extractor-credit-batch-pilot",
        "overrides": [
            "task_pool=16",
            "task_schedule=random",
            "experience.distill=with_experience",
            "experience.inject_sample_from=3",
            "experience.extractor_baseline=batch",
            "extractor.lora.top_layers=0",
            "extractor.lr=5e-4",
            "iterations=60",
        ],
        "stopped_after": 18,
    },
}


def run_folder(seed: int, iterations: int | None = None, config: str = CONFIG) -> Path:
    """A seed's run of ``config``; ``iterations``: its continuation to that iteration."""
    suffix = f"-{iterations}it" if iterations else ""
    return RUNS / f"{Path(config).stem}-seed{seed}{suffix}"


def train_and_probe(seed: int, config: str = CONFIG) -> None:
    folder = fresh(run_folder(seed, config=config))
    comprl_gym("train", "--config", config, "--set", f"seed={seed}", "--output-dir", str(folder))
    probe(folder)


def continue_and_probe(seed: int, iterations: int, config: str = CONFIG) -> None:
    """Train the seed's run of ``config`` on to ``iterations`` in a copy of its folder (the
    trainer's exact resume), then probe the copy. A copy that already has its probe is kept
    as it is."""
    source, folder = run_folder(seed, config=config), run_folder(seed, iterations, config)
    if (folder / "probe.json").exists():
        return
    if not (source / "checkpoints").exists():
        raise SystemExit(f"{source} has no checkpoint to continue: train seed {seed} first")
    if not folder.exists():
        shutil.copytree(source, folder)
        (folder / "probe.json").unlink(missing_ok=True)  # the shorter run's probe is not this one
    comprl_gym(
        "train", "--config", config, "--set", f"seed={seed}", "--set", "resume=true",
        "--set", f"iterations={iterations}", "--output-dir", str(folder),
    )  # fmt: skip
    probe(folder)


def probe(folder: Path) -> None:
    comprl_gym("probe", "--run", str(folder), "--out", str(folder / "probe.json"))


def named_side(verdict: dict) -> str:
    """The side a probe lesson named about its episode's dungeon (the family's
    ``named_choice``) when the judge found it right or wrong, ``none`` otherwise."""
    if verdict["verdict"] not in ("right", "wrong"):
        return "none"
    named_choice = family_spec("memory").lessons.named_choice
    return next(side for side in map(named_choice, verdict["lessons"]) if side)


def cells(verdicts: list[dict]) -> dict:
    """Per (walked side, outcome): how many lessons named east and west."""
    out: dict = {}
    for v in verdicts:
        key = f"walked {v['walked']}, {'won' if v['won'] else 'lost'}"
        out.setdefault(key, {"east": 0, "west": 0, "none": 0})[named_side(v)] += 1
    return dict(sorted(out.items()))


def greedy_cells(verdicts: list[dict]) -> dict:
    """Per (walked side, outcome): how many greedy choices named east and west (the side the
    judge's greedy verdict implies about the episode's dungeon)."""
    out: dict = {}
    for v in verdicts:
        stairs = dungeon(v["task_id"]).side
        named = stairs if v["greedy"] == "right" else {"east": "west", "west": "east"}[stairs]
        key = f"walked {v['walked']}, {'won' if v['won'] else 'lost'}"
        out.setdefault(key, {"east": 0, "west": 0})[named] += 1
    return dict(sorted(out.items()))


def writer_summary(report: dict) -> dict:
    """A probe report's rates (its own Wilson intervals), counts and the sides it named."""
    verdicts = report["verdicts"]
    counts = {}
    for outcome, won in (("won", True), ("lost", False)):
        episodes = [v for v in verdicts if v["won"] == won]
        counts[f"right_{outcome}"] = sum(v["verdict"] == "right" for v in episodes)
        counts[outcome] = len(episodes)
    # the greedy choice's right answers, for a writer that has one (a stem extractor)
    greedy = {
        f"greedy_right_{o}": sum(v.get("greedy") == "right" for v in verdicts if v["won"] == won)
        for o, won in (("won", True), ("lost", False))
        if any(v.get("greedy") is not None for v in verdicts)
    }
    return {
        "name": report["name"],
        "right_after_won": report["right_after_won"],
        "right_after_lost": report["right_after_lost"],
        # the model's own choice, read without a draw (absent for a writer without one)
        **{
            key: report[key]
            for key in (
                "greedy_right_after_won",
                "greedy_right_after_lost",
                "p_right_after_won",
                "p_right_after_lost",
            )
            if key in report
        },
        "counts": {**counts, **greedy},
        "sides_named": cells(verdicts),
    }


def right_by_episode(report: dict, won: bool, read: str = "verdict") -> dict:
    """Per probe episode of that outcome, 1.0 when the lesson was right: the sampled one
    (``read="verdict"``) or the greedy choice (``read="greedy"``)."""
    return {
        v["episode_id"]: float(v.get(read) == "right")
        for v in report["verdicts"]
        if v["won"] == won
    }


def curve_of(folder: Path) -> list[dict]:
    """The run's per-iteration :data:`CURVE_KEYS` from its metrics log."""
    from comprl_gym.trainers.run import Run

    curve = []
    for record in Run(folder).metrics:
        row = {"iteration": record["step"]}
        row.update({k: record[m] for k, m in CURVE_KEYS.items() if m in record})
        curve.append(row)
    return curve


def trained_lessons(folder: Path) -> dict:
    """What the extractor trained on, judged: each CISPO sample of an extraction (the run's
    ``batch_log``, one per sample) with the side it named (its answer token), its dungeon
    (the store's revision log), whether that side is the stairs' and the sign of its
    advantage. Returns the counts, how often the advantage's sign agrees with the lesson's
    correctness (+ for right, - for wrong) per side named, and the same per :data:`WINDOW`
    iterations (``by_window``: samples, right, naming east, signed, agreeing)."""
    from transformers import AutoTokenizer

    from comprl_gym.llm.models import resolve_model
    from comprl_gym.trainers.run import Run

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("smollm2"))
    side_of = {
        tokenizer(f" {s}", add_special_tokens=False)["input_ids"][0]: s for s in ("east", "west")
    }
    run = Run(folder)
    with run.store() as store:
        added = {r["experience_id"]: r["detail"] for r in store.revisions() if r["kind"] == "add"}
    task_of = {i: d["task_ids"][0] for i, d in added.items()}
    checkpoint = run.checkpoint()
    config = checkpoint.config
    # Under task_schedule: revisit an iteration's groups are its revisits, then its new tasks,
    # the last groups_per_iteration // 2 of which the next iteration plays again: a lesson
    # written from one of those is read on that next visit, the others only by chance.
    revisited_from = config.groups_per_iteration - config.groups_per_iteration // 2
    out: dict = {"samples": 0, "right": 0, "by_side": {}, "written_before_a_revisit": 0}
    # per WINDOW iterations (by the actor step the sample was written at): what was trained on
    windows: dict[int, dict] = {}
    for record in checkpoint.batch_log:
        if record["kind"] != "extract" or len(record["ids"]) != 1 or not record.get("answer"):
            continue
        named = side_of.get(record["answer"][0])
        truth = dungeon(task_of[int(record["ids"][0])]).side
        right = named == truth
        first = (record["actor_step"] - 1) // WINDOW * WINDOW + 1
        window = windows.setdefault(
            first,
            {"iterations": f"{first}-{first + WINDOW - 1}", "samples": 0, "right": 0, "east": 0,
             "signed": 0, "agree": 0},
        )  # fmt: skip
        window["samples"] += 1
        window["right"] += right
        window["east"] += named == "east"
        cell = out["by_side"].setdefault(named, {"right": 0, "wrong": 0, "agree": 0, "signed": 0})
        cell["right" if right else "wrong"] += 1
        for tally in (cell, window):  # the credit's sign against the lesson's correctness
            if abs(record["advantage"]) > 1e-9:
                tally["signed"] += 1
                tally["agree"] += (record["advantage"] > 0) == right
        out["samples"] += 1
        out["right"] += right
        episode = int(added[int(record["ids"][0])]["trajectory_ids"][0].rsplit("-", 1)[1])
        if config.task_schedule == "revisit":
            out["written_before_a_revisit"] += episode // config.group_size >= revisited_from
    out["by_window"] = [windows[k] for k in sorted(windows)]
    signed = sum(c["signed"] for c in out["by_side"].values())
    agree = sum(c["agree"] for c in out["by_side"].values())
    out["credit_agrees"] = {
        "agree": agree,
        "signed": signed,
        "fraction": agree / signed if signed else None,
    }
    return out


def probe_summary(reports: list[dict], read: str = "verdict") -> dict:
    """The probe's three writers (trained, frozen, the rule), the trained one minus the frozen
    one paired over the probe episodes, and whether the trained one meets the bar. ``read``:
    judge the sampled lessons (``verdict``) or the greedy choices (``greedy``: the passing
    learner samples at temperature 10, near a coin, so its samples say little of what it
    learnt)."""
    by_writer = dict(zip(WRITERS, reports))
    trained = writer_summary(by_writer["trained"])
    versus = {
        outcome: paired_comparison(
            right_by_episode(by_writer["trained"], won, read),
            right_by_episode(by_writer["frozen"], won, read),
        )
        for outcome, won in (("after_won", True), ("after_lost", False))
    }
    rate = "greedy_right" if read == "greedy" else "right"
    return {
        "trained": trained,
        "frozen": writer_summary(by_writer["frozen"]),
        "outcome_aware": writer_summary(by_writer["outcome_aware"]),
        "judged": read,
        "trained_minus_frozen": versus,
        "meets_the_bar": all(
            trained[f"{rate}_{o}"]["low"] > 0.5 and versus[o]["difference"]["low"] > 0
            for o in ("after_won", "after_lost")
        ),
    }


def run_summary(folder: Path, read: str = "verdict") -> dict:
    """A run's probe (when ``probe.json`` exists; judged by ``read``, see
    :func:`probe_summary`), its logged probe curve and its provenance."""
    out: dict = {"curve": curve_of(folder)}
    if not (folder / "probe.json").exists():
        return out
    from comprl_gym.trainers.run import Run

    probe_file = json.loads((folder / "probe.json").read_text())
    summary = Run(folder).summary
    reports = probe_file["families"]["memory"]
    greedy = (
        {"greedy_sides": {w: greedy_cells(r["verdicts"]) for w, r in zip(WRITERS[:2], reports)}}
        if read == "greedy"
        else {}
    )
    return {
        **probe_summary(reports, read),
        **greedy,
        **out,
        "extractor_updates": summary["last"].get("extractor/updates"),
        "train_time_s": summary["train_time_s"],
        "trained_lessons": trained_lessons(folder),
        "checkpoint": probe_file["sources"]["run"],
        "provenance": summary["provenance"],
    }


def scripted_training_episodes() -> list:
    """Every ``train`` dungeon walked once east and once west by the probe's scripted walker
    (one won, one lost each): the perfect-credit diagnostic's episodes, played like the
    probe's but on the training pool."""
    from comprl_gym.lessons.probe import walked_both_ways

    episodes = walked_both_ways("train")
    for episode in episodes:
        episode.episode_id = f"scripted-{episode.task_id}-{episode.meta['walked']}"
        episode.meta = {"with_experience": False, "group": episode.meta["group"]}
    return episodes


#: The perfect-credit diagnostic's runs: folder under runs/ -> the config overrides it ran with
#: (``--perfect-credit STEPS --set ...``).
PERFECT_RUNS = {
    "extractor-credit-perfect": ["extractor.lr=5e-4"],
}


def perfect_credit(seed: int, steps: int, out: Path, overrides: list[str]) -> dict:
    """The config's extractor trained as the runs train it (its settings, CISPO, the choice
    baseline, batches of ``extractor_batch_size``), but on scripted training episodes
    (balanced: each dungeon walked both ways) and with a perfect reader's credit: each
    lesson's one use is won when it names the stairs' side. A diagnostic, not the method: it
    says whether this model learns the rule in this many updates from a signal without noise.
    Probed on the committed probe episodes every 5 updates; the final probe is written to
    ``out`` as ``comprl-gym probe --out`` writes it."""
    import random
    import tempfile

    from comprl_gym.experience import ExperienceConfig, ExperienceManager
    from comprl_gym.families import family_spec
    from comprl_gym.lessons.probe import ScriptedRule, load_probe_episodes, run_probe
    from comprl_gym.seeding import seed_everything
    from comprl_gym.trainers.config import TrainConfig
    from comprl_gym.trainers.probing import ExtractorWriter, probe_metrics
    from comprl_gym.trainers.run import build_extractor

    config = TrainConfig.from_yaml(REPO / CONFIG, [f"seed={seed}", *overrides])
    seed_everything(seed)
    settings = config.experience
    episodes = scripted_training_episodes()
    spec = family_spec("memory")
    won = [e for e in episodes if e.won]
    lost = [e for e in episodes if not e.won]
    rng = random.Random(seed)
    extractor = build_extractor(config.extractor, settings, seed, trainable=True)
    curve = []
    with tempfile.TemporaryDirectory() as folder:
        manager = ExperienceManager(folder, ExperienceConfig(diversify=False, max_entries=64))
        extractor.manager = manager
        half = settings.extractor_batch_size // 2
        for step in range(1, steps + 1):
            batch = rng.sample(won, half) + rng.sample(lost, half)
            for episode in batch:
                for lesson_id in extractor.write(episode, step):
                    verdict = spec.judge(manager.get_one(lesson_id).text)
                    manager.report_outcome([lesson_id], won=verdict.verdict == "right")
            ready = extractor.ready_samples(step)
            stats = extractor.update(ready, step) if ready else {}
            row = {"iteration": step, "credit_mean": stats.get("reward_mean")}
            if step % 5 == 0:
                probe = probe_metrics(extractor, config.env_ids, step)
                row.update(
                    probe_right_won=probe["probe/right_won"],
                    probe_right_lost=probe["probe/right_lost"],
                )
                print(
                    f"step {step}: probe right {row['probe_right_won']}/16 after a win, {row['probe_right_lost']}/16 after a loss",
                    flush=True,
                )
            curve.append(row)
        probe_episodes = load_probe_episodes("memory")
        frozen = build_extractor(config.extractor, settings, seed)
        reports = [
            run_probe(
                ExtractorWriter(extractor),
                probe_episodes,
                "trained extractor (perfect credit)",
                steps,
            ),
            run_probe(ExtractorWriter(frozen), probe_episodes, "frozen extractor", steps),
            run_probe(ScriptedRule.outcome_aware(), probe_episodes),
        ]
        manager.close()
    atomic_write_json(
        out,
        {
            "families": {"memory": [r.to_dict() for r in reports]},
            "sources": {"run": {"steps": steps}},
        },
    )
    return {"curve": curve, "steps": steps, "samples_per_step": settings.extractor_batch_size}


def perfect_credit_summary() -> dict:
    """Each perfect-credit diagnostic's probe and curve (``--perfect-credit``) that ran."""
    out = {}
    for name, overrides in PERFECT_RUNS.items():
        folder = RUNS / name
        if (folder / "probe.json").exists():
            reports = json.loads((folder / "probe.json").read_text())["families"]["memory"]
            out[name] = {
                "overrides": overrides,
                **probe_summary(reports),
                **json.loads((folder / "curve.json").read_text()),
            }
    return out


#: Where ``--representation`` keeps :func:`representation_probe`'s result for the summary.
REPRESENTATION = RUNS / "extractor-credit-representation.json"
#: Hidden-state layers :func:`representation_probe` reads: the input of the top 8 blocks (the
#: ones the config's LoRA adapts), and the last (after the final norm, what the LM head reads).
REPRESENTATION_LAYERS = (22, 30)
#: What :func:`representation_probe` decodes, each from an episode: 1 for east / won.
DECODED = ("stairs_side", "walked_side", "won")


def answer_features(extractor, episodes: list, layers: tuple[int, ...]) -> dict[int, list]:
    """Per layer, each episode's hidden state at the position where the stem extractor samples
    its side (the chat prompt and the stem's opening, as ``fill_stem`` builds it), and the
    model's own log-odds of east over west there (layer ``-1``)."""
    import torch

    from comprl_gym.families import family_spec
    from comprl_gym.lessons.formats import stem_prompt

    backend, model = extractor.backend, extractor.optimizer.model
    out: dict[int, list] = {layer: [] for layer in (*layers, -1)}
    with torch.no_grad():
        for episode in episodes:
            stem = family_spec("memory").stem_for(episode.task_id)
            # every dungeon's stem has the same two choices, " east" and " west"
            prompt, (east, west) = stem_prompt(backend, extractor.format.messages(episode), stem)
            ids = backend.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")
            result = model(**ids, output_hidden_states=True)
            for layer in layers:
                out[layer].append(result.hidden_states[layer][0, -1].float())
            logits = result.logits[0, -1].float()
            out[-1].append(float(logits[east] - logits[west]))
    return out


def linear_decoding(train_x, train_y, test_x, test_y) -> float:
    """Held-out accuracy of an L2-regularised logistic regression (features standardised on
    the training set), fitted by L-BFGS: what a linear read-out of the features can decode."""
    import torch

    x, y = torch.stack(train_x), torch.tensor(train_y, dtype=torch.float32)
    mean, std = x.mean(0), x.std(0) + 1e-6
    x = (x - mean) / std
    weights = torch.zeros(x.shape[1], requires_grad=True)
    bias = torch.zeros(1, requires_grad=True)
    optimiser = torch.optim.LBFGS([weights, bias], max_iter=200)

    def loss():
        optimiser.zero_grad()
        value = torch.nn.functional.binary_cross_entropy_with_logits(x @ weights + bias, y)
        value = value + 1e-2 * weights.pow(2).sum()
        value.backward()
        return value

    optimiser.step(loss)
    test = (torch.stack(test_x) - mean) / std
    predicted = ((test @ weights + bias) > 0).float()
    return float((predicted == torch.tensor(test_y, dtype=torch.float32)).float().mean())


def representation_probe(writers: list[str]) -> dict:
    """Is the rule in the extractor's features? Each extractor of ``writers`` (``frozen``, or
    a seed's final checkpoint as ``seed S``) reads every ``train`` dungeon walked both ways
    (384 scripted episodes) and the 32 probe episodes; a logistic regression fitted on the
    first, per layer of :data:`REPRESENTATION_LAYERS`, decodes from the answer position the
    stairs' side (the rule's output), the walked side and the outcome of the second. Beside
    it: how often the model's own choice there (east over west, greedy) names the stairs'
    side. Each writer's result is kept in :data:`REPRESENTATION` as it finishes (about 20
    minutes a writer on 2 busy cores); a writer already there is not read again."""
    from comprl_gym.lessons.probe import load_probe_episodes, walked
    from comprl_gym.trainers.config import TrainConfig
    from comprl_gym.trainers.run import Run, build_extractor

    config = TrainConfig.from_yaml(REPO / CONFIG)
    train, test = scripted_training_episodes(), load_probe_episodes("memory")

    def labels(episodes: list) -> dict[str, list[int]]:
        return {
            "stairs_side": [int(dungeon(e.task_id).side == "east") for e in episodes],
            "walked_side": [int(walked(e) == "east") for e in episodes],
            "won": [int(e.won) for e in episodes],
        }

    train_y, test_y = labels(train), labels(test)
    out: dict = {"train_episodes": len(train), "test_episodes": len(test), "writers": {}}
    if REPRESENTATION.exists():
        out = json.loads(REPRESENTATION.read_text())
    out["layers"] = list(REPRESENTATION_LAYERS)
    for name in writers:
        if name in out["writers"]:
            continue
        if name == "frozen":
            extractor = build_extractor(config.extractor, config.experience, 0)
        else:
            folder = run_folder(int(name.removeprefix("seed ")))
            out.setdefault("checkpoints", {})[name] = str(folder.relative_to(REPO))
            extractor = Run(folder).extractor()
        train_x = answer_features(extractor, train, REPRESENTATION_LAYERS)
        test_x = answer_features(extractor, test, REPRESENTATION_LAYERS)
        greedy = [int(v > 0) for v in test_x[-1]]
        out["writers"][name] = {
            "greedy_names_stairs": sum(g == t for g, t in zip(greedy, test_y["stairs_side"])),
            "decoded": {
                str(layer): {
                    target: linear_decoding(
                        train_x[layer], train_y[target], test_x[layer], test_y[target]
                    )
                    for target in DECODED
                }
                for layer in REPRESENTATION_LAYERS
            },
        }
        atomic_write_json(REPRESENTATION, out)
        print(name, json.dumps(out["writers"][name]), flush=True)
    return out


def continued_runs(seed: int, config: str = CONFIG) -> list[tuple[int, Path]]:
    """The seed's continuations that were probed, ``(iterations, folder)``, fewest first."""
    found = []
    for folder in RUNS.glob(f"{run_folder(seed, config=config).name}-*it"):
        iterations = folder.name.rsplit("-", 1)[1].removesuffix("it")
        if iterations.isdigit() and (folder / "probe.json").exists():
            found.append((int(iterations), folder))
    return sorted(found)


def summarise(seeds: list[int]) -> dict:
    return {
        "question": "does the stem extractor learn from credit alone to name the walked side "
        "after a win and the other side after a loss?",
        "config": CONFIG,
        "command": f"comprl-gym train --config {CONFIG} --set seed=S; comprl-gym probe --run DIR",
        "probe": "the memory family's committed probe episodes: 16 test_large dungeons (8 east, "
        "8 west), each walked once east and once west by a scripted agent",
        "bar": "per seed: P(right | won) and P(right | lost) with Wilson lower bounds above 0.5, "
        "and trained minus frozen above 0 (paired over the probe episodes)",
        "interval": "Wilson 95% for rates; Newcombe's paired 95% and McNemar's exact p",
        "seeds": {str(seed): {"seed": seed, **run_summary(run_folder(seed))} for seed in seeds},
        # each seed's run trained on from its last checkpoint (``--continue-to``), the longest
        "continued": {
            str(seed): {"seed": seed, "iterations": runs[-1][0], **run_summary(runs[-1][1])}
            for seed in seeds
            if (runs := continued_runs(seed))
        },
        "tries": {
            name: {
                **{k: v for k, v in t.items() if k != "folder"},
                **run_summary(RUNS / t["folder"]),
            }
            for name, t in TRIES.items()
            if (RUNS / t["folder"] / "metrics.jsonl").exists()
        },
        "perfect_credit": perfect_credit_summary(),
        # ``--representation``: the rule read linearly from each extractor's features
        "representation": json.loads(REPRESENTATION.read_text()) if REPRESENTATION.exists() else {},
    }


def perfect_credit_on_the_ladder() -> dict:
    """The passing learner's ``rule`` rung of the known-answer ladder (``benchmarks/results/
    ladder.json``): the same extractor, settings and probe episodes with a perfect reward,
    per seed the greedy right answers of 32 after each probed update."""
    ladder = json.loads((RESULTS / "ladder.json").read_text())
    out = {}
    for result in ladder["results"]:
        if result["rung"] == "rule" and result["settings"].get("variant") == PASSING_VARIANT:
            out[str(result["seed"])] = {
                "seed": result["seed"],
                "curve": [
                    {"updates": p["updates"], "greedy_right": p["greedy_right"],
                     "episodes": p["episodes"], "mean_p_target": p["mean_p_target"]}
                    for p in result["curve"]
                ],
            }  # fmt: skip
    return out


def passing_summary(seeds: list[int]) -> dict:
    """The question again with the learner that passed the ladder (``--learner passing``)."""
    return {
        "question": "with the extractor's learner that passed the known-answer ladder, does the "
        "stem extractor learn from credit alone to name the walked side after a win and the "
        "other side after a loss?",
        "config": PASSING_CONFIG,
        "learner": PASSING_VARIANT,
        "command": f"comprl-gym train --config {PASSING_CONFIG} --set seed=S; "
        "comprl-gym probe --run DIR",
        "probe": "the memory family's committed probe episodes: 16 test_large dungeons (8 east, "
        "8 west), each walked once east and once west by a scripted agent",
        "bar": "per seed, on the greedy choice (the learner samples at temperature 10): right "
        "after a win and after a loss with Wilson lower bounds above 0.5, and trained minus "
        "frozen above 0 (paired over the probe episodes)",
        "interval": "Wilson 95% for rates; Newcombe's paired 95% and McNemar's exact p",
        "seeds": {
            str(seed): {
                "seed": seed,
                **run_summary(run_folder(seed, config=PASSING_CONFIG), read="greedy"),
            }
            for seed in seeds
        },
        # each seed's run trained on from its last checkpoint (``--continue-to``), the longest
        "continued": {
            str(seed): {
                "seed": seed,
                "iterations": runs[-1][0],
                **run_summary(runs[-1][1], read="greedy"),
            }
            for seed in seeds
            if (runs := continued_runs(seed, PASSING_CONFIG))
        },
        "perfect_credit": perfect_credit_on_the_ladder(),
    }


def plot_passing(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4.6))
    for seed, data in result["seeds"].items():
        # its continuation's log when there is one: it holds the first iterations too
        data = result.get("continued", {}).get(seed) or data
        rows = [r for r in data["curve"] if r.get("probe_greedy_won") is not None]
        xs = [r["iteration"] for r in rows]
        (line,) = axes[0].plot(
            xs, [r["probe_greedy_won"] for r in rows], "-o", label=f"seed {seed}, after a win"
        )
        axes[0].plot(
            xs,
            [r["probe_greedy_lost"] for r in rows],
            "--s",
            color=line.get_color(),
            label=f"seed {seed}, after a loss",
        )
        axes[1].plot(xs, [r["probe_p_won"] for r in rows], "-o", color=line.get_color())
        axes[1].plot(xs, [r["probe_p_lost"] for r in rows], "--s", color=line.get_color())
        trained = [r for r in data["curve"] if r.get("extractor_entropy") is not None]
        axes[2].plot(
            [r["iteration"] for r in trained],
            [r["extractor_entropy"] for r in trained],
            color=line.get_color(),
            label=f"seed {seed}",
        )
    for seed, data in result["perfect_credit"].items():
        curve = data["curve"]
        axes[0].plot(
            [p["updates"] + 1 for p in curve],
            [p["greedy_right"] / p["episodes"] for p in curve],
            ":",
            color="grey",
            label="perfect credit (ladder), all 32" if seed == "0" else None,
        )
    for ax, title, ylabel in (
        (axes[0], "probe, greedy choice: right (16 each)", "rate"),
        (axes[1], "probe: mean P(right lesson)", "P"),
        (axes[2], "extractor entropy of its choice (trained batch)", "nats"),
    ):  # fmt: skip
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("iteration (ladder: update + 1)")
        ax.set_ylabel(ylabel)
    for ax in axes[:2]:
        ax.set_ylim(-0.02, 1.02)
        ax.axhline(0.5, color="grey", lw=0.5)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    fig.savefig(path, dpi=110)


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4.8))
    runs = [(f"seed {seed}", data, "-") for seed, data in result["seeds"].items()]
    runs += [
        (f"seed {seed}, to iteration {data['iterations']}", data, "-.")
        for seed, data in result.get("continued", {}).items()
    ]
    runs += [(name.replace("_", " "), data, "--") for name, data in result["tries"].items()]
    runs += [
        (f"perfect credit, {' '.join(data['overrides']) or 'the config'} (diagnostic)", data, ":")
        for data in result["perfect_credit"].values()
    ]
    for label, data, style in runs:
        rows = [r for r in data["curve"] if "probe_right_won" in r]
        xs = [r["iteration"] for r in rows]
        (line,) = axes[0].plot(
            xs, [r["probe_right_won"] / 16 for r in rows], style, marker="o", label=label
        )
        color = line.get_color()
        axes[1].plot(xs, [r["probe_right_lost"] / 16 for r in rows], style, marker="o", color=color)
        store = [r for r in data["curve"] if "store_right" in r]
        axes[2].plot(
            [r["iteration"] for r in store],
            [r["store_right"] / max(1, r["store_right"] + r["store_wrong"]) for r in store],
            style,
            color=color,
        )
    for ax, title in zip(
        axes,
        (
            "probe: right after a won visit (frozen 0.50)",
            "probe: right after a lost visit (frozen 0.00)",
            "training store (its last 48 lessons): naming the right side",
        ),
    ):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("iteration")
        ax.set_ylim(-0.02, 1.02)
        ax.axhline(0.5, color="grey", lw=0.5)
    axes[0].set_ylabel("rate (16 probe episodes per outcome)")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=5, fontsize=8)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated training seeds")
    parser.add_argument("--reuse", action="store_true", help="summarise runs already under runs/")
    parser.add_argument(
        "--learner",
        choices=("committed", "passing"),
        default="committed",
        help=f"committed: {CONFIG}'s learner; passing: the learner that passed the ladder "
        f"({PASSING_CONFIG}; only --seeds, --reuse and --continue-to apply)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="the result file (default: benchmarks/results/extractor_learning.json, or "
        "extractor_learning_context.json with --learner passing)",
    )
    parser.add_argument(
        "--perfect-credit",
        type=int,
        metavar="STEPS",
        default=0,
        help="first run the perfect-credit diagnostic for STEPS updates (seed 0)",
    )
    parser.add_argument(
        "--perfect-folder",
        default="extractor-credit-perfect",
        choices=sorted(PERFECT_RUNS),
        help="the diagnostic's folder under runs/, which fixes its config overrides",
    )
    parser.add_argument(
        "--continue-to",
        type=int,
        metavar="N",
        default=0,
        help="then train each seed's run on to iteration N (a copy of its folder) and probe it "
        "(a summary reads every continuation already probed, with or without this)",
    )
    parser.add_argument(
        "--representation",
        metavar="WRITERS",
        default="",
        help="first decode the rule linearly from these extractors' features at the answer, "
        "comma-separated: frozen, 'seed S' (a seed's final checkpoint); ~20 min each",
    )
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    if args.learner == "passing":
        for seed in seeds:
            folder = run_folder(seed, config=PASSING_CONFIG)
            if not args.reuse:
                train_and_probe(seed, PASSING_CONFIG)
            elif not (folder / "probe.json").exists():
                probe(folder)
        for seed in seeds if args.continue_to else []:
            continue_and_probe(seed, args.continue_to, PASSING_CONFIG)
        # the per-episode records behind the result: each probe's verdicts and each run's log
        for seed in seeds:
            continued = [folder for _, folder in continued_runs(seed, PASSING_CONFIG)]
            for folder in [run_folder(seed, config=PASSING_CONFIG), *continued]:
                keep_records(folder, ("probe.json", "metrics.jsonl"), PASSING_RECORDS)
        write_result(args.out or PASSING_RESULT, passing_summary(seeds), plot_passing)
        return 0
    if args.perfect_credit:
        folder = RUNS / args.perfect_folder
        folder.mkdir(parents=True, exist_ok=True)
        overrides = PERFECT_RUNS[args.perfect_folder]
        record = perfect_credit(0, args.perfect_credit, folder / "probe.json", overrides)
        atomic_write_json(folder / "curve.json", record)
    if args.representation:
        representation_probe([w.strip() for w in args.representation.split(",")])
    for seed in seeds:
        if not args.reuse:
            train_and_probe(seed)
        elif not (run_folder(seed) / "probe.json").exists():
            probe(run_folder(seed))
    for seed in seeds if args.continue_to else []:
        continue_and_probe(seed, args.continue_to)
    result = summarise(seeds)
    write_result(args.out or RESULTS / "extractor_learning.json", result, plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
