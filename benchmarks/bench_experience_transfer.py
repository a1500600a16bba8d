"""Does a lesson change what the actor does? Train it to read, then stream held-out tasks.

The memory family (``comprl/Memory-Fork-v0``) hides what wins: each named dungeon's stairs lie
down one branch of a dark fork, on a side fixed per dungeon and never shown; stepping into the
other branch loses at once. Without a lesson the actor can do no better than a coin.

1. **Train to read** (the static-experience setting): GRPO with the with/without halves on the
   training dungeons. The with-experience half is shown the store's lesson for its dungeon;
   the store holds the benchmark's oracle lessons of the *training* dungeons only and nothing
   writes to it (a trainer variant whose ``experience_job`` does nothing: one class, see
   :class:`LessonReadingTrainer`; ``--all-with-lessons`` shows every episode its lesson).
   ``--reading-warmup N`` first takes N supervised steps on the training dungeons' first
   answers with their oracle lesson (:func:`reading_warmup`): GRPO alone collapsed to a blind
   side in every run so far, and the warm-up makes an actor that reads, so that what the
   lessons do to it can be measured. The prompt lists the open moves only (``--moves open``,
   east and west at the fork).
2. **Untrained vs trained reading**: the untrained actor plays the held-out dungeons once with
   no lesson and with the oracle lesson.
3. **Stream the held-out dungeons** (never trained on), ``--visits`` visits each, with the
   trained actor, one arm per lesson source, every episode on common random numbers (the same
   reset and sampling seed in every arm; a fresh agent per episode):

   ``none`` no lessons; ``own`` the run's extractor (SmolLM2, frozen) distils every finished
   episode into the arm's store; ``exemplar`` a won episode's actions stored verbatim (no LLM);
   ``cases`` every episode's actions and outcome stored verbatim, won or lost (no LLM);
   ``placebo`` a lesson of the oracle's token length naming the dungeon and nothing else;
   ``inverted`` the oracle lesson with the other side; ``oracle`` the benchmark's correct
   lesson (the upper bound of reading). Fixed arms' stores hold one lesson per held-out
   dungeon; learning arms start empty and fill between visits. Nothing from the training
   dungeons is in any arm's store.

Writes ``benchmarks/results/experience_transfer.json`` (every episode's seeds, outcome and the
lessons it was shown; per arm and visit the success with Wilson intervals; each arm minus
``none`` paired with Newcombe's interval and McNemar's exact p) and ``.png`` (success by
visit, one line per arm). 15-30 minutes on 2 CPU cores; ``--quick`` is a 2-minute smoke
run on the tiny random model.

    python benchmarks/bench_experience_transfer.py [--iterations 10] [--tasks 64] [--visits 3]

The committed results (``R=benchmarks/results``; ``B="python benchmarks/bench_experience_transfer.py
--groups 4 --lora-layers 0 --tasks 64"``; the warm-ups before ``both_sides`` showed each
training dungeon's lesson for its own side only, and those without ``--warmup-lessons`` used
oracle, exemplar and lost_case: add ``--warmup-sides true --warmup-lessons
oracle,exemplar,lost_case`` to repeat them):

    # experience_transfer_reading.json: a reader of the oracle's phrasing only
    $B --all-with-lessons --reading-warmup 40 --warmup-lessons oracle --iterations 2 \
        --lr 1e-3 --visits 2 --out $R/experience_transfer_reading
    # experience_transfer_streaming_reader60.json: 60 steps on the oracle's and the exemplar's
    # formats; saves the reader the runs below start from
    $B --all-with-lessons --reading-warmup 60 --warmup-lessons oracle,exemplar \
        --save-reader reader60.pt --iterations 2 --lr 1e-3 --visits 3 \
        --out $R/experience_transfer_streaming_reader60
    # experience_transfer_streaming_lost_cases.json: 36 steps more with lost cases too (a
    # fresh AdamW at 1e-3 on the trained reader: it unlearnt reading; see the README)
    $B --all-with-lessons --load-reader reader60.pt --reading-warmup 36 --iterations 2 \
        --lr 1e-3 --visits 3 --out $R/experience_transfer_streaming_lost_cases
    # experience_transfer_cases.json: the same 36 steps at --warmup-lr 3e-4; reading kept
    $B --all-with-lessons --load-reader reader60.pt --reading-warmup 36 --warmup-lr 3e-4 \
        --iterations 1 --lr 1e-4 --visits 2 --arms none,exemplar,cases,inverted,oracle \
        --out $R/experience_transfer_cases
    # extractor_memory_{static,complementary}.json: the library's trainers from that reader,
    # 8 training dungeons, the run's extractor streaming held-out dungeons ('own')
    $B --trainer static_experience --load-reader reader60.pt --train-tasks 8 --iterations 6 \
        --lr 1e-4 --visits 2 --arms none,own,oracle --out $R/extractor_memory_static
    $B --trainer complementary --load-reader reader60.pt --train-tasks 8 --iterations 6 \
        --lr 1e-4 --visits 2 --arms none,own,oracle \
        --paired-with $R/extractor_memory_static.json --out $R/extractor_memory_complementary
    # experience_transfer_streaming_both_sides.json: a new reader, 72 warm-up steps on all
    # three formats, each training dungeon's lesson written for both sides (--warmup-sides both)
    $B --all-with-lessons --reading-warmup 72 --warmup-lessons oracle,exemplar,lost_case \
        --save-reader reader_both72.pt --iterations 1 \
        --lr 1e-4 --visits 3 --out $R/experience_transfer_streaming_both_sides
    # experience_transfer_streaming_both_sides_grpo.json: that reader, 2 GRPO iterations at 1e-3
    $B --all-with-lessons --load-reader reader_both72.pt --iterations 2 --lr 1e-3 --visits 3 \
        --arms none,exemplar,cases,placebo,inverted,oracle \
        --out $R/experience_transfer_streaming_both_sides_grpo
    # experience_transfer_streaming_both_sides_read.json: 80 steps, oracle and exemplar only
    $B --all-with-lessons --reading-warmup 80 --warmup-lessons oracle,exemplar \
        --save-reader reader_both_oe80.pt --iterations 1 --lr 1e-4 --visits 3 \
        --out $R/experience_transfer_streaming_both_sides_read
    # experience_transfer_streaming_coin.json: the same with blind prompts labelled either side
    $B --all-with-lessons --reading-warmup 80 --warmup-lessons oracle,exemplar,none \
        --save-reader reader_coin80.pt --iterations 1 --lr 1e-4 --visits 3 \
        --out $R/experience_transfer_streaming_coin
    # experience_transfer_streaming_reader_coin.json: the _read reader, 30 steps with blind coins
    $B --all-with-lessons --load-reader reader_both_oe80.pt --reading-warmup 30 --warmup-lr 3e-4 \
        --save-reader reader_oe80_coin30.pt --iterations 1 --lr 1e-4 --visits 3 \
        --out $R/experience_transfer_streaming_reader_coin
    # extractor_memory_coin_{static,complementary}.json: the library's trainers from that reader
    $B --trainer static_experience --load-reader reader_oe80_coin30.pt --train-tasks 8 \
        --iterations 6 --lr 1e-4 --visits 2 --arms none,own,oracle \
        --out $R/extractor_memory_coin_static
    $B --trainer complementary --load-reader reader_oe80_coin30.pt --train-tasks 8 \
        --iterations 6 --lr 1e-4 --visits 2 --arms none,own,oracle \
        --paired-with $R/extractor_memory_coin_static.json --out $R/extractor_memory_coin_complementary
    # experience_transfer_streaming_reader_coin_large.json: that reader on the 256 dungeons of
    # test_large (the later --tasks overrides $B's)
    $B --all-with-lessons --load-reader reader_oe80_coin30.pt --iterations 1 --lr 1e-4 \
        --visits 3 --held-out test_large --tasks 256 --untrained-tasks 0 \
        --arms none,exemplar,placebo,inverted,oracle \
        --out $R/experience_transfer_streaming_reader_coin_large
    # ..._reader_coin_large_seed1.json: the same with --seed 1 --arms none,exemplar,placebo
    # experience_transfer_streaming_mismatched_large.json: that reader, 30 steps more with a
    # neighbour's lesson labelled a coin, streamed on the 256 dungeons of test_large
    $B --all-with-lessons --load-reader reader_oe80_coin30.pt --reading-warmup 30 \
        --warmup-lr 3e-4 --warmup-lessons oracle,exemplar,none,mismatched \
        --save-reader reader_coin_mismatched30.pt --iterations 1 --lr 1e-4 --visits 3 \
        --held-out test_large --tasks 256 --untrained-tasks 0 \
        --arms none,exemplar,placebo,inverted,oracle \
        --out $R/experience_transfer_streaming_mismatched_large
    # extractor_memory_stem_{static,complementary}.json: the library's trainers from the
    # reader_coin reader, the extractor filling the family's lesson stem (it chooses the side)
    S="--load-reader reader_oe80_coin30.pt --train-tasks 8 --iterations 10 --lr 1e-4 --visits 2
       --arms none,own,oracle --extractor-format stem --merge-interval 0
       --extractor-temperature 1.0 --extractor-lr 2e-4"
    $B --trainer static_experience $S --out $R/extractor_memory_stem_static
    $B --trainer complementary $S --paired-with $R/extractor_memory_stem_static.json \
        --out $R/extractor_memory_stem_complementary
    $B --trainer complementary --credit paired $S \
        --paired-with $R/extractor_memory_stem_static.json \
        --out $R/extractor_memory_stem_complementary_paired
    # (the first two again with --seed 1 --untrained-tasks 0: ..._seed1.json; all three with
    # --seed 1 and 2 for the table below)
    # extractor_memory_table.{json,md,png}, the paper's table: the other trainers from the
    # same reader with $S --untrained-tasks 0 --threads 1 (two runs side by side), seeds 0-2
    # (--seed N writes ..._seedN; static and Complementary RL's seed 2 likewise), then
    # benchmarks/paper_table.py (the command is in its docstring)
    $B --trainer grpo $S --arms none,oracle --out $R/extractor_memory_grpo
    $B --trainer experience_only $S --out $R/extractor_memory_stem_experience_only
    $B --trainer static_experience $S --extractor-format exemplar --out $R/extractor_memory_exemplar
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ENV_ID = "comprl/Memory-Fork-v0"
RESULTS = Path(__file__).resolve().parent / "results"
ARMS = ("none", "own", "exemplar", "cases", "placebo", "inverted", "oracle")
#: The lesson formats the reading warm-up can teach (``--warmup-lessons``); ``none`` is the
#: prompt with no lesson, labelled once with each side: a coin is all it can know.
#: ``mismatched`` is another training dungeon's lesson (one whose name shares a word), also
#: labelled once with each side: a record about a neighbour says nothing about this dungeon,
#: and a streaming memory shows a neighbour's record to a dungeon it has none for.
WARMUP_LESSONS = ("oracle", "exemplar", "lost_case", "none", "mismatched")
#: Formats labelled with both sides whatever ``--warmup-sides`` says: nothing in them says which.
COIN_LESSONS = ("none", "mismatched")
#: ``--warmup-sides``: each training dungeon's lesson written for both sides, or its own only.
WARMUP_SIDES = ("both", "true")
#: ``--trainer``: the benchmark's lesson-reading trainer, or one of the library's.
TRAINERS = ("reading", "grpo", "static_experience", "experience_only", "complementary")

from comprl_gym.envs.memory import DUNGEON_NAMES, dungeon  # noqa: E402
from comprl_gym.trainers.complementary import StaticExperienceTrainer  # noqa: E402
from comprl_gym.trainers.extractor import batch_advantages  # noqa: E402


class LessonReadingTrainer(StaticExperienceTrainer):
    """Static experience whose store is the benchmark's: the actor learns with the oracle
    lessons of the training dungeons, and nothing (no extractor) writes to the store."""

    algorithm = "lesson-reading"

    def experience_job(self, job: dict[str, Any]) -> None:
        """No distillation, credit or merging: the store stays the benchmark's."""


class AllLessonsTrainer(LessonReadingTrainer):
    """:class:`LessonReadingTrainer` whose every training episode is shown its lesson
    (``--all-with-lessons``): no without-experience half, so every group's advantages reward
    reading and none rewards a blind prior."""

    algorithm = "all-lessons"

    def rollouts(self, tasks: list[Any]) -> list[Any]:
        k = self.config.group_size
        jobs = [
            (self.make_env(task.env_id, True, group * k + i), task, group, True)
            for group, task in enumerate(tasks)
            for i in range(k)
        ]
        return self.play_jobs(jobs)


def lesson_text(kind: str, index: int, branch_length: int = 2, side: str | None = None) -> str:
    """The lesson about dungeon ``index`` in one format, written as if its stairs lay on
    ``side`` (default: the dungeon's own side): ``"oracle"`` (the benchmark's sentence),
    ``"inverted"`` (its opposite), ``"exemplar"`` (what the exemplar memory stores after a
    straight win: the task and the winning moves,
    :func:`~comprl_gym.experience.exemplar.exemplar_lesson`) or ``"lost_case"`` (what the
    case memory stores after a loss: the task and the one step into the wrong branch; the
    side to take is the other one)."""
    from comprl_gym.envs.memory import dungeon, inverted_lesson, oracle_lesson, other_side
    from comprl_gym.envs.memory.dungeons import task_text
    from comprl_gym.experience.exemplar import exemplar_lesson

    d = dungeon(index)
    side = side or d.side
    other = other_side(side)  # (a ConfigurationError, a ValueError, for a bad side)
    if kind == "exemplar":
        return exemplar_lesson(task_text("fork", d), [side] * branch_length, won=True)
    if kind == "lost_case":
        return exemplar_lesson(task_text("fork", d), [other], won=False, keep_losses=True)
    if kind in ("oracle", "inverted"):
        # The inverted lesson is the oracle's sentence with the other side.
        return (oracle_lesson if (kind == "oracle") == (side == d.side) else inverted_lesson)(index)
    raise ValueError(f"unknown lesson kind {kind!r}")


def neighbour(index: int) -> int:
    """The first dungeon after ``index`` in its pool (cyclically) whose name shares a word with
    its own: the kind of record a memory retrieves for a dungeon it holds none about."""
    from comprl_gym.envs.memory import dungeon, pool

    d = dungeon(index)
    indices = pool(d.split)
    words = set(d.name.split()) - {"the", "of"}
    start = indices.index(index)
    for step in range(1, len(indices)):
        other = indices[(start + step) % len(indices)]
        if words & set(dungeon(other).name.split()):
            return other
    raise ValueError(f"no dungeon of {d.split} shares a word with {d.name}")


def first_prompts(
    split: str,
    lesson: str,
    tokenizer: Any,
    branch_length: int = 2,
    moves: str = "open",
    sides: str = "true",
) -> list[dict[str, Any]]:
    """Every dungeon of ``split``: the token ids of the actor's first prompt with the
    ``lesson`` (a kind of :func:`lesson_text`) in its system message, the answer token of
    each side, the side the lesson points to (``named``: the other one for a lost case) and
    the side that wins. ``sides="true"``: one prompt per dungeon, its lesson about the
    dungeon's own side; ``"both"``: two, the lesson written for each side in turn, so that a
    dungeon's name says nothing about the side its lesson names. ``lesson="none"``: the
    prompt without a lesson, always once per side (``named`` each in turn), since without a
    lesson no side is more likely than the other; ``"mismatched"``: likewise, with the
    lesson of :func:`neighbour` (the oracle's sentence for even pool positions, the
    exemplar's moves for odd ones)."""
    import gymnasium as gym

    import comprl_gym  # noqa: F401  (registers the ids)
    from comprl_gym.agents.prompts import PromptConfig, answer_prefill, build_messages
    from comprl_gym.envs.memory import SIDES, other_side

    config = PromptConfig(conversation="multi_turn")
    env = gym.make(
        ENV_ID,
        split=split,
        moves=moves,
        observation_mode="compact",
        branch_length=branch_length,
    )
    examples = []
    if sides not in WARMUP_SIDES:
        raise ValueError(f"sides must be one of {WARMUP_SIDES}, not {sides!r}")
    for index in range(len(env.unwrapped.pool)):
        obs, info = env.reset(options={"task_id": index})
        d = env.unwrapped.dungeon
        admissible = info["admissible_actions"]
        prefill, _ = answer_prefill(admissible, config)
        answer = {
            side: tokenizer(str(admissible.index(side) + 1), add_special_tokens=False)["input_ids"][
                0
            ]
            for side in SIDES
        }
        for side in (d.side,) if sides == "true" and lesson not in COIN_LESSONS else SIDES:
            if lesson == "none":
                texts = []
            elif lesson == "mismatched":
                kind = ("oracle", "exemplar")[index % 2]
                texts = [lesson_text(kind, neighbour(d.index), branch_length)]
            else:
                texts = [lesson_text(lesson, d.index, branch_length, side)]
            messages = build_messages(
                "memory", env.unwrapped.task, [], obs, admissible, config, experiences=texts
            )
            prompt = (
                tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
                + prefill
            )
            named = other_side(side) if lesson == "inverted" else side
            examples.append(
                {
                    "ids": tokenizer(prompt, add_special_tokens=False)["input_ids"],
                    "answer": answer,
                    "named": named,
                    "wins": d.side,
                }
            )
    env.close()
    return examples


def reading_warmup(
    trainer: Any, args: argparse.Namespace
) -> tuple[list[float], dict[str, list[float | None]]]:
    """``--reading-warmup`` steps of supervised cross-entropy on the actor's first reply in
    the *training* dungeons, each shown its lesson in one of the ``--warmup-lessons`` formats
    (the oracle's sentence, the exemplar memory's winning moves; the label is the side it
    names; the prompts are the agent's, :func:`first_prompts`; ``--warmup-sides both``, the
    default since 2026-12-02, writes every training dungeon's lesson for each side, so that
    memorising the training dungeons' sides cannot lower the loss and only reading can; the
    format ``none``, no lesson labelled with each side in turn, keeps the actor's blind first
    move a coin rather than one side; ``mismatched``, a neighbour's lesson labelled likewise,
    teaches that a record about another dungeon is no evidence), with a fresh AdamW on the
    actor's LoRA. Not the library's training (the trainers learn from rewards): it makes an
    actor that reads, so that what lessons do to it can be measured. The held-out dungeons are
    never used. Returns the loss of every step, and per format the mean loss of its examples
    in each step (None in a step that drew none): a format the actor does not learn shows
    there, where the pooled loss hides it."""
    import random

    import torch
    from tqdm import tqdm

    actor = trainer.actor
    kinds = args.warmup_lessons.split(",")
    examples = [
        example | {"kind": kind}
        for kind in kinds
        for example in first_prompts(
            "train",
            kind,
            actor.tokenizer,
            branch_length=args.branch_length,
            moves=args.moves,
            sides=args.warmup_sides,
        )
    ]
    params = [p for p in actor.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.warmup_lr)
    device = next(actor.model.parameters()).device
    rng = random.Random(args.seed)
    end = actor.tokenizer.eos_token_id
    actor.model.train()
    losses: list[float] = []
    by_format: dict[str, list[float | None]] = {kind: [] for kind in kinds}
    for _ in tqdm(range(args.reading_warmup), desc="reading warm-up", disable=args.quick):
        loss = torch.zeros((), device=device)
        step: dict[str, list[float]] = {kind: [] for kind in kinds}
        for e in rng.sample(examples, 8):
            # The answer's number, then the end of the reply (without it the actor learnt to
            # start the right number and went on repeating its digit: an invalid action).
            answer = e["answer"][e["named"]]
            ids = torch.tensor([[*e["ids"], answer]], device=device)
            logp = actor.model(ids).logits[0, -2:].float().log_softmax(-1)
            term = -(logp[0, answer] + logp[1, end]) / 2  # the example's mean token loss
            loss = loss + term / 8
            step[e["kind"]].append(term.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(round(loss.item(), 4))
        for kind, terms in step.items():
            by_format[kind].append(round(sum(terms) / len(terms), 4) if terms else None)
    trainer.push_weights()
    return losses, by_format


def save_reader(trainer: Any, path: Path) -> None:
    """Write the actor's trained (LoRA) weights after the warm-up, atomically, so that other
    runs start from the same reader (``--load-reader``) without repeating it."""
    import io

    import torch

    from comprl_gym.utils import atomic_write_bytes

    state = {
        n: p.detach().cpu() for n, p in trainer.actor.model.named_parameters() if p.requires_grad
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, buffer.getvalue())


def load_reader(trainer: Any, path: Path) -> None:
    """Load :func:`save_reader`'s weights into the actor (the same model and LoRA settings,
    or a :class:`ValueError` naming what differs) and push them to the rollout engine."""
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True)
    params = {n: p for n, p in trainer.actor.model.named_parameters() if p.requires_grad}
    if set(state) != set(params):
        missing, extra = sorted(set(params) - set(state)), sorted(set(state) - set(params))
        raise ValueError(
            f"{path} does not fit this actor (same --lora-layers and model?): "
            f"{len(missing)} weights missing (e.g. {missing[:1]}), {len(extra)} unknown "
            f"(e.g. {extra[:1]})"
        )
    with torch.no_grad():
        for name, param in params.items():
            param.copy_(state[name].to(param.device, param.dtype))
    trainer.push_weights()


def env_kwargs(args: argparse.Namespace, split: str) -> dict[str, Any]:
    """The memory env's arguments: compact observations (a later turn is ~50 tokens), the
    branch length (2, the shortest that keeps the stairs out of sight: two steps the right
    way win, and the first step the wrong way loses) and the listed moves (``--moves``)."""
    return {
        "split": split,
        "observation_mode": "compact",
        "branch_length": args.branch_length,
        "moves": args.moves,
    }


def train_config(args: argparse.Namespace, out: Path, store: Path) -> dict[str, Any]:
    quick = args.quick
    model = "tiny" if quick else "smollm2"
    lora = {"enabled": True, "r": 16, "alpha": 32, "top_layers": 0 if quick else args.lora_layers}
    experience: dict[str, Any] = {
        "store_dir": str(store),
        "inject_top_k": 1,
        "search_and_ask_budget": 0,
        "extractor_format": args.extractor_format,
        "merge_interval_steps": args.merge_interval,
        "min_quality": 0.0,
        "async_extraction": False,
        "diversify": False,
    }
    if args.trainer == "reading":
        algorithm = f"{__name__}:" + (
            "AllLessonsTrainer" if args.all_with_lessons else "LessonReadingTrainer"
        )
    else:
        # The library's trainers, their store filled by their own extractor. A group's four
        # with-experience episodes each read one of the top 4 lessons, so each lesson's outcome
        # is measured apart (issue 30's per-episode sampling).
        algorithm = args.trainer
        experience.update(
            inject_sample_from=4, extractor_batch_size=8, extractor_baseline=args.credit
        )
    return {
        "algorithm": algorithm,
        "seed": args.seed,
        "env_ids": [ENV_ID],
        "env_kwargs": {ENV_ID: env_kwargs(args, "train")},
        "task_pool": args.train_tasks,
        "iterations": args.iterations,
        "groups_per_iteration": args.groups,
        "group_size": 8,
        "max_episode_steps": args.max_steps,
        "rollout_backend": "transformers" if quick else "vllm",
        "conversation": "multi_turn",
        "actor": {
            "model": model,
            "lr": args.lr,
            "micro_batch_size": 4,
            "max_new_tokens": 12,
            "temperature": args.temperature,
            "lora": lora,
        },
        "extractor": {
            "model": model,
            "lr": args.extractor_lr,
            "max_new_tokens": 32,
            "temperature": args.extractor_temperature,
            "lora": lora,
        },
        "experience": experience,
        "eval_tasks": 0,
        "output_dir": str(out / "run"),
        "resume": False,
        "progress": not quick,
        "tensorboard": False,
        "torch_threads": args.threads,
    }


def open_store(folder: Path) -> Any:
    """An arm's store. Diversification is off: it drops a recently shown top hit at random and
    penalises often-retrieved lessons, which would hide a dungeon's own lesson from its later
    visits; an arm should show the lesson its store ranks first."""
    from comprl_gym.experience import ExperienceConfig, ExperienceManager

    return ExperienceManager(str(folder), config=ExperienceConfig(diversify=False))


def fixed_store(folder: Path, lessons: list[str]) -> Any:
    """A store holding ``lessons`` (one per held-out dungeon) in the memory family."""
    manager = open_store(folder)
    manager.add(lessons, env_family="memory")
    return manager


def learning_arms(trainer: Any, root: Path) -> dict[str, Any]:
    """The arms whose stores start empty and learn between visits."""
    from comprl_gym.evaluation.streaming import Arm
    from comprl_gym.experience.exemplar import exemplar_lesson

    own, exemplar, cases = (open_store(root / name) for name in ("own", "exemplar", "cases"))
    extractor = trainer.extractor

    def distil(episode: Any) -> None:
        extractor.manager = own
        extractor.write(episode, actor_step=trainer.iteration)

    def case_memory(store: Any, keep_losses: bool) -> Any:
        """Store each episode's actions verbatim (wins only, or wins and losses)."""

        def learn(episode: Any) -> None:
            actions = [t.action for t in episode.turns]
            lesson = exemplar_lesson(episode.task, actions, episode.won, keep_losses=keep_losses)
            if lesson:
                store.add([lesson], env_family="memory")

        return learn

    return {
        "own": Arm("own", own, distil),
        "exemplar": Arm("exemplar", exemplar, case_memory(exemplar, keep_losses=False)),
        "cases": Arm("cases", cases, case_memory(cases, keep_losses=True)),
    }


def shown_own_dungeon(record: dict[str, Any]) -> bool:
    """Whether the episode was shown a lesson naming its own dungeon."""
    name = record["task"].split(",", 1)[0].removeprefix("You are in ")
    return any(
        name in " ".join(str(e.get(k) or "") for k in ("title", "description", "content"))
        for e in record["experiences"]
    )


@functools.cache
def _dungeon_names() -> re.Pattern[str]:
    # Longest first: no name is read as a shorter name it contains.
    return re.compile("|".join(re.escape(n) for n in sorted(DUNGEON_NAMES, key=len, reverse=True)))


def dungeon_named(text: str) -> Any:
    """The dungeon of the first dungeon name in ``text`` (``None``: it names none)."""
    found = _dungeon_names().search(text)
    return None if found is None else dungeon(found.group(0))


def sides_named(texts: list[str]) -> dict[str, int]:
    """What a store's lessons say about their dungeon's side, counted: ``right`` (they name
    the stairs' side only), ``wrong`` (the other side only), ``both``, ``neither`` (no side at
    all) and ``no_dungeon`` (they name no dungeon of the family). A side is the word east or
    west in the lesson's text (after the store's ``## Content:`` heading, where there is one);
    the dungeon is the first dungeon name in it. Whether an extractor writes the one fact a
    later visit needs, independent of whether the actor then reads it."""
    counts = dict.fromkeys(("right", "wrong", "both", "neither", "no_dungeon"), 0)
    for text in texts:
        named = dungeon_named(text)
        if named is None:
            counts["no_dungeon"] += 1
            continue
        said = set(re.findall(r"\b(east|west)\b", text.split("## Content:")[-1].lower()))
        side = named.side
        key = {frozenset(): "neither", frozenset({side}): "right"}.get(frozenset(said))
        counts[key or ("both" if len(said) == 2 else "wrong")] += 1
    return counts


def side_of(text: str) -> str:
    """What one lesson says about its dungeon's side (a :func:`sides_named` key)."""
    return next(key for key, n in sides_named([text]).items() if n)


def credit_agreement(batch_log: list[dict[str, Any]], sides: dict[int, str]) -> dict[str, Any]:
    """How often each credit rule's advantage has the sign the lesson deserves: + for a lesson
    that names its dungeon's right side, - for the wrong side (``sides``: lesson id ->
    :func:`side_of`). Each train_step's samples (``batch_log``, one ``actor_step`` per batch)
    get both rules' advantages: ``batch`` is r - mean(r over the batch), ``paired`` is the
    paired r itself. Samples whose lesson names no single side, and rules with no r yet, are
    left out. Per rule: the samples judged, those with a nonzero advantage, those whose sign
    agrees, and the batches in which some advantage is nonzero (a gradient)."""
    batches: dict[int, list[dict[str, Any]]] = {}
    for record in batch_log:
        batches.setdefault(int(record["actor_step"]), []).append(record)
    out: dict[str, Any] = {}
    for rule in ("batch", "paired"):
        judged = signed = agree = with_signal = 0
        for batch in batches.values():
            scored = [r for r in batch if r[f"r_{rule}"] is not None]
            rewards = [r[f"r_{rule}"] for r in scored]
            # The extractor's own advantages: r - mean(r) for the reference rule, r for paired.
            advantages = batch_advantages(rewards) if rule == "batch" else rewards
            signal = False
            for record, advantage in zip(scored, advantages):
                signal = signal or abs(advantage) > 1e-9
                side = [sides.get(int(i)) for i in record["ids"]]
                if (
                    record["kind"] != "extract"
                    or len(side) != 1
                    or side[0] not in ("right", "wrong")
                ):
                    continue
                judged += 1
                if abs(advantage) > 1e-9:
                    signed += 1
                    agree += (advantage > 0) == (side[0] == "right")
            with_signal += signal
        out[rule] = {
            "samples": judged,
            "nonzero": signed,
            "agree": agree,
            "agree_fraction": agree / signed if signed else None,
            "batches": len(batches),
            "batches_with_signal": with_signal,
        }
    return out


def own_lessons(result: dict[str, Any]) -> dict[int, tuple[str, int | None]]:
    """Per held-out dungeon (index) the ``own`` arm's store wrote about: what its lesson says
    (:func:`side_of`) and whether the visit-1 episode it was written from was won."""
    dungeons = result["held_out_dungeons"]
    won = {
        dungeons[e["task_index"]]: e["won"]
        for e in result["episodes"]
        if e["arm"] == "own" and e["visit"] == 1
    }
    lessons = {}
    for text in result.get("store_texts", {}).get("own", []):
        named = dungeon_named(text)
        if named is not None:
            lessons[named.index] = (side_of(text), won.get(named.index))
    return lessons


def compare_lessons(this: dict[str, Any], that: dict[str, Any]) -> dict[str, Any]:
    """Whether two runs' extractors name the stairs' right side, dungeon by dungeon: over the
    held-out dungeons both ``own`` stores wrote about after a visit-1 episode with the same
    outcome in both runs (all of them, those won, those lost), each run's count of lessons
    naming the right side and this run's rate minus that one's, paired (Newcombe's interval,
    McNemar's exact p). A difference here is the extractors' alone: same dungeons, same
    outcomes."""
    from comprl_gym.evaluation.stats import mcnemar_exact_p, paired_difference_interval

    mine, theirs = own_lessons(this), own_lessons(that)
    out: dict[str, Any] = {}
    for label, outcome in (("all", None), ("won", 1), ("lost", 0)):
        shared = [
            k
            for k in sorted(set(mine) & set(theirs))
            if mine[k][1] == theirs[k][1] and (outcome is None or mine[k][1] == outcome)
        ]
        a = [float(mine[k][0] == "right") for k in shared]
        b = [float(theirs[k][0] == "right") for k in shared]
        out[label] = {
            "dungeons": len(shared),
            "right_this": int(sum(a)),
            "right_that": int(sum(b)),
            "difference": paired_difference_interval(a, b).to_dict() if shared else None,
            "mcnemar_p": mcnemar_exact_p(a, b) if shared else None,
        }
    return out


def plot(summary: dict[str, Any], path: Path, visits: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    xs = list(range(1, visits + 1))
    for i, (arm, row) in enumerate(summary.items()):
        cells = [row["visits"][str(v)]["success"] for v in xs]
        shift = [x + (i - len(summary) / 2) * 0.03 for x in xs]
        ax.errorbar(
            shift,
            [c["mean"] for c in cells],
            yerr=[[c["mean"] - c["low"] for c in cells], [c["high"] - c["mean"] for c in cells]],
            marker="o",
            capsize=3,
            label=arm,
        )
    ax.set_xticks(xs)
    ax.set_xlabel("visit to the held-out dungeon")
    ax.set_ylabel("success (95% Wilson interval)")
    ax.set_ylim(-0.02, 1.02)
    ax.axhline(0.5, color="grey", lw=0.6, ls=":")
    ax.set_title("Memory-Fork held-out dungeons: success by visit, per lesson source")
    ax.legend(ncol=3, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=10, help="training iterations")
    parser.add_argument("--groups", type=int, default=4, help="task groups per iteration (K=8)")
    parser.add_argument(
        "--tasks", type=int, default=64, help="held-out dungeons (at most the pool's size)"
    )
    from comprl_gym.envs.memory import SPLITS, pool

    parser.add_argument(
        "--held-out",
        choices=[split for split in SPLITS if split != "train"],
        default="test",
        help="the held-out pool: test (64 dungeons, every run before 2026-12-03) or test_large "
        "(256 dungeons whose names share no word with the training pool's)",
    )
    parser.add_argument(
        "--untrained-tasks",
        type=int,
        default=None,
        help="held-out dungeons the untrained actor plays (default: --tasks; 0: skip, e.g. "
        "when a saved reader is loaded and the untrained rates are on record)",
    )
    parser.add_argument("--visits", type=int, default=3, help="visits to each held-out dungeon")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=5, help="step limit (family default 5)")
    parser.add_argument(
        "--branch-length",
        type=int,
        default=2,
        help="steps from the fork to the stairs (the family's default is 3; 2 is the shortest "
        "that hides them, and gives the untrained 135M actor more wins to learn from)",
    )
    parser.add_argument(
        "--moves",
        choices=("open", "all"),
        default="open",
        help="moves the prompt lists: open (east and west at the fork) or all eight compass "
        "moves (the runs before 2026-12-02; the untrained actor then answers a wall most times)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny model, a smoke run")
    parser.add_argument(
        "--trainer",
        choices=TRAINERS,
        default="reading",
        help="reading: the benchmark's lesson-reading trainer (oracle lessons of the training "
        "dungeons, no extractor); static_experience, experience_only or complementary: the "
        "library's trainers, the store filled by their extractor (frozen, or trained by CISPO "
        "beside a frozen or a GRPO actor), compared on the 'own' arm with --paired-with; grpo: "
        "the library's GRPO, no experience (no 'own' arm)",
    )
    parser.add_argument(
        "--train-tasks",
        type=int,
        default=192,
        help="training dungeons (task pool; at most 192). Fewer dungeons recur more often, so "
        "a lesson written about one is read on a later visit and credited",
    )
    parser.add_argument(
        "--credit",
        choices=("batch", "paired"),
        default="batch",
        help="the extractor's advantage baseline (experience.extractor_baseline)",
    )
    parser.add_argument("--extractor-lr", type=float, default=5.0e-5, help="its learning rate")
    parser.add_argument(
        "--extractor-format",
        choices=("plain", "stem", "exemplar"),
        default="plain",
        help="what the extractor writes (experience.extractor_format): plain (a sentence of its "
        "own), stem (the family's lesson with the side left blank: it chooses east or west) or "
        "exemplar (no model: a won episode's task and actions, the case-based baseline)",
    )
    parser.add_argument(
        "--extractor-temperature",
        type=float,
        default=0.7,
        help="its sampling temperature (a stem's side is drawn from the model's odds)",
    )
    parser.add_argument(
        "--merge-interval",
        type=int,
        default=5,
        help="the store merges its lessons every N iterations (experience.merge_interval_steps; "
        "0: never, which keeps stem lessons as the extractor chose them)",
    )
    parser.add_argument(
        "--arms",
        default=",".join(ARMS),
        help=f"arms to stream, comma-separated, from {', '.join(ARMS)} (none is always run)",
    )
    parser.add_argument(
        "--paired-with",
        default="",
        help="a result JSON of another run on the same tasks and seed: its 'own' arm is paired "
        "episode by episode with this run's (compare_runs)",
    )
    parser.add_argument(
        "--all-with-lessons",
        action="store_true",
        help="train every episode with its lesson (no without-experience half)",
    )
    parser.add_argument(
        "--temperature", type=float, default=1.0, help="the actor's training temperature"
    )
    parser.add_argument(
        "--reading-warmup",
        type=int,
        default=0,
        help="supervised steps (8 training dungeons each) teaching the actor to follow its "
        "dungeon's lesson (--warmup-lessons formats) before GRPO (0: none; see reading_warmup)",
    )
    parser.add_argument("--warmup-lr", type=float, default=1.0e-3, help="its learning rate")
    parser.add_argument(
        "--save-reader", default="", help="write the actor's LoRA weights after the warm-up here"
    )
    parser.add_argument(
        "--load-reader",
        default="",
        help="start from a --save-reader file (the same reader in every run); --reading-warmup "
        "then adds that many steps",
    )
    parser.add_argument(
        "--warmup-lessons",
        default="oracle,exemplar,none",
        help="lesson formats the warm-up shows, comma-separated, from "
        f"{', '.join(WARMUP_LESSONS)} (default: the mix that learnt to read and keeps a blind "
        "coin, experience_transfer_streaming_coin.json; with lost_case it stayed at a coin)",
    )
    parser.add_argument(
        "--warmup-sides",
        choices=WARMUP_SIDES,
        default="both",
        help="the sides the warm-up's lessons name: both (each training dungeon's lesson "
        "written for each side; a dungeon's name says nothing about the answer) or true (its "
        "own side only, the runs before 2026-12-02: the answer can be memorised per dungeon)",
    )
    parser.add_argument("--lr", type=float, default=4.0e-4, help="the actor's learning rate")
    parser.add_argument(
        "--lora-layers",
        type=int,
        default=8,
        help="LoRA on the top N transformer blocks of the actor (0: every block)",
    )
    parser.add_argument(
        "--threads", type=int, default=0, help="torch threads (0: one per core; 1 on a busy box)"
    )
    parser.add_argument("--out", default=str(RESULTS / "experience_transfer"), help="JSON/PNG stem")
    args = parser.parse_args()
    unknown = set(args.warmup_lessons.split(",")) - set(WARMUP_LESSONS)
    if unknown:
        parser.error(f"--warmup-lessons: unknown {sorted(unknown)}; choose from {WARMUP_LESSONS}")
    arm_names = ["none", *(a for a in ARMS if a != "none" and a in args.arms.split(","))]
    unknown = set(args.arms.split(",")) - set(ARMS)
    if unknown:
        parser.error(f"--arms: unknown {sorted(unknown)}; choose from {ARMS}")
    if not 1 <= args.tasks <= len(pool(args.held_out)):
        parser.error(
            f"--tasks: between 1 and {len(pool(args.held_out))} (the {args.held_out} pool)"
        )
    untrained_tasks = args.tasks if args.untrained_tasks is None else args.untrained_tasks
    if not 0 <= untrained_tasks <= args.tasks:
        parser.error("--untrained-tasks: between 0 and --tasks")
    if not 1 <= args.train_tasks <= 192:
        parser.error("--train-tasks: between 1 and 192 (the training split)")
    if args.trainer == "grpo" and "own" in arm_names:
        parser.error("--arms: grpo has no extractor to write the 'own' arm's lessons")
    if args.trainer != "reading" and args.all_with_lessons:
        parser.error("--all-with-lessons is the reading trainer's (the library's keep both halves)")
    for flag, path in (("--load-reader", args.load_reader), ("--paired-with", args.paired_with)):
        if path and not Path(path).is_file():
            parser.error(f"{flag}: no file {path}")
    other_result = json.loads(Path(args.paired_with).read_text()) if args.paired_with else None
    other = other_result["episodes"] if other_result is not None else None

    from comprl_gym.env_factory import EnvSpec
    from comprl_gym.envs.memory import inverted_lesson, oracle_lesson, placebo_lesson
    from comprl_gym.evaluation.streaming import (
        Arm,
        compare_runs,
        run_streaming,
        streaming_summary,
    )
    from comprl_gym.trainers import TrainConfig, make_trainer
    from comprl_gym.utils import atomic_write_bytes

    started = time.perf_counter()
    held_out = list(pool(args.held_out))[: args.tasks]
    tasks = list(range(len(held_out)))  # reset seed t plays held-out dungeon t
    spec = EnvSpec.of(ENV_ID, {**env_kwargs(args, args.held_out), "max_steps": args.max_steps})
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.trainer == "reading":
            # Training dungeon i's lesson in the i-th warm-up format, in turn: GRPO keeps
            # reading every format the warm-up taught (the coin formats teach not to).
            kinds = [k for k in args.warmup_lessons.split(",") if k not in COIN_LESSONS] or [
                "oracle"
            ]
            train_store = fixed_store(
                root / "train-store",
                [
                    lesson_text(kinds[n % len(kinds)], i, args.branch_length)
                    for n, i in enumerate(pool("train"))
                ],
            )
            train_store.close()
        # (The library's trainers start from an empty store that their extractor fills.)
        trainer = make_trainer(
            TrainConfig.from_dict(train_config(args, root, root / "train-store"))
        )

        try:
            stores = {
                name: fixed_store(root / name, [make(i) for i in held_out])
                for name, make in (
                    ("placebo", placebo_lesson),
                    ("inverted", inverted_lesson),
                    ("oracle", oracle_lesson),
                )
            }
            # 2. The untrained actor: does it read a lesson at all?
            before = (
                run_streaming(
                    spec,
                    tasks[:untrained_tasks],
                    1,
                    [Arm("none"), Arm("oracle", stores["oracle"])],
                    trainer.agent(seed=args.seed, temperature=1.0),
                    seed=args.seed,
                    agent_label="untrained",
                    progress=not args.quick,
                )
                if untrained_tasks
                else []
            )
            # 1. Train it to read.
            t0 = time.perf_counter()
            warmup_losses: list[float] = []
            warmup_by_format: dict[str, list[float | None]] = {}
            if args.load_reader:  # then --reading-warmup steps more, if any
                load_reader(trainer, Path(args.load_reader))
            if args.reading_warmup:
                warmup_losses, warmup_by_format = reading_warmup(trainer, args)
                if args.save_reader:
                    save_reader(trainer, Path(args.save_reader))
            trainer.train()
            train_s = time.perf_counter() - t0
            rows = trainer.metrics.read()
            curve = [
                {
                    "iteration": r["step"],
                    "success": r.get("success"),  # every rollout (GRPO has no halves)
                    "with_experience": r.get("with_experience/success"),
                    "without_experience": r.get("without_experience/success"),
                }
                for r in rows
            ]
            # The extractor's per-iteration metrics (its CISPO update's grad norm, samples and
            # rewards where it took one; counts of what it wrote), from the run's metrics log.
            extractor_metrics = [
                {"iteration": r["step"]}
                | {k: v for k, v in r.items() if k.startswith("extractor/") or k == "store_size"}
                for r in rows
                if any(k.startswith("extractor/") for k in r)
            ]
            run_store = [e.text for e in trainer.manager.experiences()] if trainer.manager else []
            # Each extractor sample it trained on, with both credit rules' r, judged against
            # what its lesson says (issue 30: which rule signs the lessons right).
            batch_log = trainer.extractor.batch_log if trainer.extractor is not None else []
            lesson_sides = {
                e.id: side_of(e.text)
                for e in (trainer.manager.experiences() if trainer.manager else [])
            }
            # 3. Stream the held-out dungeons with every arm.
            arms = {"none": Arm("none"), **learning_arms(trainer, root)}
            arms.update({name: Arm(name, manager) for name, manager in stores.items()})
            records = run_streaming(
                spec,
                tasks,
                args.visits,
                [arms[name] for name in arm_names],
                trainer.agent(seed=args.seed, temperature=1.0),
                seed=args.seed,
                agent_label=f"{trainer.algorithm}@{trainer.iteration}",
                progress=not args.quick,
            )
            store_texts = {
                name: [e.text for e in arms[name].manager.experiences()]
                for name in ("own", "exemplar", "cases")
                if name in arm_names
            }
            store_texts["training_run"] = run_store
        finally:
            trainer.close()
    summary = streaming_summary(records)
    # A lesson-shaped text alone moves the actor (the placebo is not none), so a memory's
    # information is its difference from the placebo at the same visit.
    placebo = streaming_summary(records, reference="placebo")
    minus_placebo = {
        arm: row["minus_placebo"] for arm, row in placebo.items() if "minus_placebo" in row
    }
    retrieval = {
        name: sum(shown_own_dungeon(r) for r in records if r["arm"] == name)
        / max(1, sum(1 for r in records if r["arm"] == name))
        for name in arm_names
        if name != "none"
    }
    out = {
        "benchmark": "experience_transfer",
        "env_id": ENV_ID,
        "held_out_pool": args.held_out,
        "held_out_dungeons": held_out,
        "visits": args.visits,
        "config": train_config(args, Path("."), Path("store")),
        "training_curve": curve,
        # Per iteration: the extractor's counts and, where it took a CISPO update, the
        # update's grad norm, samples and rewards (a frozen extractor takes none).
        "extractor_metrics": extractor_metrics,
        "reading_warmup": {
            "steps": args.reading_warmup,
            "lr": args.warmup_lr,
            "lessons": args.warmup_lessons.split(","),
            "sides": args.warmup_sides,
            "loaded_from": Path(args.load_reader).name if args.load_reader else None,
            "batch": 8,
            "losses": warmup_losses,
            "losses_by_format": warmup_by_format,
        },
        "train_time_s": train_s,
        "wall_time_s": time.perf_counter() - started,
        "untrained": streaming_summary(before) if before else None,
        "summary": summary,
        "minus_placebo": minus_placebo,
        "shown_own_dungeons_lesson": retrieval,
        # Per store, whether its lessons name their dungeon's side, the other or none.
        "store_sides": {name: sides_named(texts) for name, texts in store_texts.items()},
        "extractor_batches": [
            record | {"sides": [lesson_sides.get(int(i)) for i in record["ids"]]}
            for record in batch_log
        ],
        "credit_agreement": credit_agreement(batch_log, lesson_sides),
        "store_texts": store_texts,
        "episodes": [
            {
                k: r.get(k)
                for k in (
                    "arm",
                    "visit",
                    "task_index",
                    "task_id",
                    "reset_seed",
                    "sampling_seed",
                    "won",
                    "steps",
                    "experiences",
                )
            }
            | {"actions": [t["action"] for t in r["turns"]]}
            for r in before + records
        ],
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    if other is not None:
        # The other run's agent on the same episodes: common random numbers across runs.
        out["paired_with"] = {
            "file": Path(args.paired_with).name,
            "arm": "own",
            "this_minus_that": compare_runs(records, other, "own"),
            "lessons_right": compare_lessons(out, other_result),
        }
    stem = Path(args.out)
    stem.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(stem.with_suffix(".json"), (json.dumps(out, indent=1) + "\n").encode())
    plot(summary, stem.with_suffix(".png"), args.visits)
    for arm, row in summary.items():
        visits = ", ".join(f"{v}: {row['visits'][v]['success']['mean']:.2f}" for v in row["visits"])
        diff = row.get("minus_none", {}).get("all")
        extra = ""
        if diff:
            d = diff["difference"]
            extra = f"  minus none {d['mean']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}] p={diff['mcnemar_p']:.3f}"
        for visit, learnt in row.get("minus_visit_1", {}).items():
            d = learnt["difference"]
            extra += f"  v{visit}-v1 {d['mean']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}]"
        print(f"{arm:9s} {visits}{extra}")
    for visit, cell in out.get("paired_with", {}).get("this_minus_that", {}).items():
        d = cell["difference"]
        print(
            f"own minus {args.paired_with} own, visit {visit}: {d['mean']:+.2f} "
            f"[{d['low']:+.2f}, {d['high']:+.2f}] p={cell['mcnemar_p']:.3f}"
        )
    print(f"wrote {stem.with_suffix('.json')} and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
