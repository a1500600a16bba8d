"""The known-answer ladder: can this learner, with these settings, learn what a run asks of it?

A negative result about a method counts only once its learner has passed a check whose answer
is known. The ladder gives the extractor's learner three rungs of rising difficulty on the
memory family, each with a **perfect reward** (+1 when the lesson names the rung's target side,
-1 otherwise), trained by the library's own parts: the
:class:`~comprl_gym.trainers.extractor.ExperienceExtractor` writes stem lessons about scripted
``train`` episodes (every dungeon walked both ways), the store credits each lesson with the
reward, and :meth:`~comprl_gym.trainers.extractor.ExperienceExtractor.update` takes the CISPO
step with the extractor settings' credit baseline; the supervised control trains the same
model, prompts and LoRA by cross-entropy on the target choice.

* ``constant``: always the east branch (no input needed);
* ``outcome``: east after a win, west after a loss (one bit of the episode);
* ``rule``: the memory family's rule, the side walked if the episode was won, else the other
  (the stairs' side: two bits, combined).

A rung is scored every ``eval_every`` updates on the 32 held-out probe episodes by the model's
own choice probabilities (no draw): how many it answers right greedily, the mean probability
of the target and the mean entropy of its choice between the two sides. It is **solved** at the
first evaluation where the greedy choice is right on every probe episode.

Example (the tiny random model, two supervised updates of the constant rung):
    >>> from comprl_gym.trainers.config import ExperienceSettings, ModelSettings
    >>> result = climb(
    ...     "constant", "supervised", ModelSettings(model="tiny", lr=1e-2),
    ...     ExperienceSettings(extractor_format="stem"), max_updates=2, eval_every=2,
    ...     batch_size=4)
    >>> [point.updates for point in result.curve], result.learner
    ([0, 2], 'supervised')
"""

from __future__ import annotations

import dataclasses
import math
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import torch

from comprl_gym.core import ConfigurationError
from comprl_gym.families import family_spec
from comprl_gym.lessons.core import LessonStem
from comprl_gym.lessons.formats import stem_choice_logprobs, stem_prompt
from comprl_gym.lessons.probe import load_probe_episodes, walked
from comprl_gym.rollouts import Trajectory
from comprl_gym.trainers.config import ExperienceSettings, ModelSettings
from comprl_gym.trainers.losses import CISPO, CrossEntropy
from comprl_gym.trainers.policy import PolicyOptimizer, TrainSample

#: The extractor's learners (:func:`climb`).
Learner = Literal["rl", "supervised"]
#: The actor's learners (:func:`climb_actor`): also a supervised control of every fork.
ActorLearner = Literal["rl", "supervised", "supervised_every_fork"]


def stairs_side(episode: Trajectory) -> str:
    """The side of a memory episode's stairs: the one walked if it was won, else the other.

    Example:
        >>> episode = load_probe_episodes("memory")[1]
        >>> walked(episode), episode.won, stairs_side(episode)
        ('west', False, 'east')
    """
    side = walked(episode)
    return side if episode.won else {"east": "west", "west": "east"}[side]


@dataclass(frozen=True)
class Rung:
    """One rung: its name, what it asks in words, and the side a right lesson names."""

    name: str
    asks: str
    target: Callable[[Trajectory], str]


#: The extractor's rungs, easiest first.
EXTRACTOR_RUNGS: dict[str, Rung] = {
    rung.name: rung
    for rung in (
        Rung("constant", "always the east branch", lambda e: "east"),
        Rung(
            "outcome", "east after a win, west after a loss", lambda e: "east" if e.won else "west"
        ),
        Rung("rule", "the side walked if won, else the other (the stairs' side)", stairs_side),
    )
}


def noisy_teacher(rung: Rung, label_noise: float, seed: int = 0) -> Rung:
    """``rung`` taught by a teacher that is wrong ``label_noise`` of the time: each time a
    target is asked for, it is the other side with that probability (its own draws, seeded by
    ``seed``). Cross-entropy on such labels is least when the model names the right side with
    probability ``1 - label_noise``: a writer right well above chance but not always.

    Example:
        >>> episodes = load_probe_episodes("memory")
        >>> taught = noisy_teacher(EXTRACTOR_RUNGS["rule"], 0.25, seed=0)
        >>> labels = [taught.target(e) == stairs_side(e) for e in episodes * 50]
        >>> round(sum(labels) / len(labels), 2)
        0.74
    """
    if not 0.0 <= label_noise < 0.5:
        raise ConfigurationError(f"label_noise must be in [0, 0.5), got {label_noise}")
    if not label_noise:
        return rung
    draws = random.Random(f"label-noise/{seed}")
    other = {"east": "west", "west": "east"}

    def target(episode: Trajectory) -> str:
        side = rung.target(episode)
        return other[side] if draws.random() < label_noise else side

    return Rung(rung.name, f"{rung.asks}, with {label_noise:.0%} of the labels flipped", target)


@dataclass
class LadderPoint:
    """A rung's evaluation after ``updates`` updates, on the probe episodes."""

    updates: int
    greedy_right: int
    episodes: int
    mean_p_target: float
    mean_choice_entropy: float
    #: The mean entropy (nats) the last update logged at its trained tokens (``None`` before
    #: any update, or for the supervised control).
    update_entropy: float | None = None
    reward_mean: float | None = None
    #: Greedy right per kind of probe episode (``"east won"``: walked east and won, ...): a
    #: learner stuck at half tells copying the walked side from naming one side everywhere.
    greedy_right_by_kind: dict[str, int] = field(default_factory=dict)


@dataclass
class RungResult:
    """One learner's climb of one rung."""

    rung: str
    learner: str
    settings: dict[str, Any]
    curve: list[LadderPoint] = field(default_factory=list)
    time_s: float = 0.0
    seed: int = 0
    #: The trained weights' sha256 when :func:`climb` saved them (``save_weights``).
    weights_sha256: str = ""

    @property
    def solved_at(self) -> int | None:
        """Updates at the first evaluation where every probe episode's greedy choice was right."""
        return next((p.updates for p in self.curve if p.greedy_right == p.episodes), None)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RungResult:
        """A result as :meth:`to_dict` wrote it, labelled by its variant where it has one."""
        return cls(
            data["rung"],
            data["settings"].get("variant", data["learner"]),
            data["settings"],
            [LadderPoint(**point) for point in data["curve"]],
            data["time_s"],
            data.get("seed", 0),
            data.get("weights_sha256", ""),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "rung": self.rung,
            "learner": self.learner,
            "settings": self.settings,
            "solved_at": self.solved_at,
            "time_s": self.time_s,
            "seed": self.seed,
            **({"weights_sha256": self.weights_sha256} if self.weights_sha256 else {}),
            "curve": [dataclasses.asdict(p) for p in self.curve],
        }


def _stem(episode: Trajectory) -> LessonStem:
    stem = family_spec(episode.env_family).stem_for(episode.task_id)  # type: ignore[union-attr]
    if stem is None:
        raise ConfigurationError(f"no lesson stem for {episode.task_id!r}")
    return stem


def choice_scores(
    backend: Any, extractor_format: Any, episodes: list[Trajectory]
) -> list[dict[str, float]]:
    """Per episode, the model's probability of each side where the stem extractor samples
    (temperature 1, restricted to the stem's choices): the probe's read-out,
    :func:`~comprl_gym.lessons.formats.stem_choice_logprobs`, with no draw."""
    out = []
    for episode in episodes:
        stem = _stem(episode)
        logprobs = stem_choice_logprobs(backend, extractor_format.messages(episode), stem)
        probs = torch.softmax(torch.tensor(logprobs, dtype=torch.float64), -1).tolist()
        out.append({c.split()[0]: p for c, p in zip(stem.choices, probs)})
    return out


def evaluate(
    backend: Any,
    extractor_format: Any,
    rung: Rung,
    episodes: list[Trajectory],
    updates: int,
) -> LadderPoint:
    """The rung's :class:`LadderPoint` on ``episodes`` after ``updates`` updates."""
    scores = choice_scores(backend, extractor_format, episodes)
    right = p_target = entropy = 0.0
    by_kind: dict[str, int] = {}
    for episode, probs in zip(episodes, scores):
        target = rung.target(episode)
        kind = f"{walked(episode)} {'won' if episode.won else 'lost'}"
        is_right = max(probs, key=probs.get) == target
        by_kind[kind] = by_kind.get(kind, 0) + is_right
        right += is_right
        p_target += probs[target]
        entropy -= sum(p * math.log(p) for p in probs.values() if p > 0)
    n = len(episodes)
    return LadderPoint(
        updates,
        int(right),
        n,
        p_target / n,
        entropy / n,
        greedy_right_by_kind=dict(sorted(by_kind.items())),
    )


def climb(
    rung: str | Rung,
    learner: Learner,
    model: ModelSettings,
    experience: ExperienceSettings,
    *,
    max_updates: int = 60,
    eval_every: int = 5,
    batch_size: int = 16,
    seed: int = 0,
    stop_when_solved: bool = True,
    train_episodes: list[Trajectory] | None = None,
    eval_episodes: list[Trajectory] | None = None,
    progress: Callable[[RungResult], None] | None = None,
    label_noise: float = 0.0,
    save_weights: str | Path | None = None,
) -> RungResult:
    """Train a fresh extractor (``model``, ``experience``) on ``rung`` with ``learner`` for at
    most ``max_updates`` updates of ``batch_size`` lessons (about ``batch_size //
    experience.extractor_samples`` episodes, half won, half lost), evaluating
    every ``eval_every`` updates on ``eval_episodes`` (default: the memory family's probe
    episodes) and stopping at the first solved evaluation unless told otherwise.

    ``rl`` is the extractor's own path: it writes each batch episode's lesson (sampling at
    ``model.temperature``), the store credits it +1 or -1 by the rung's target, and
    :meth:`~comprl_gym.trainers.extractor.ExperienceExtractor.update` takes its CISPO step.
    ``supervised`` takes a cross-entropy step on the target choice of the same episodes.

    ``label_noise``: training is taught by :func:`noisy_teacher` (the reward or the label is
    the wrong side that often); evaluation is always against the rung's true target.
    ``save_weights``: write the trained weights there at the end
    (:meth:`~comprl_gym.trainers.policy.PolicyOptimizer.save_weights`; a file
    ``extractor.init_weights`` starts a run from), their sha256 in the result.
    """
    from comprl_gym.experience import ExperienceConfig, ExperienceManager
    from comprl_gym.lessons.probe import walked_both_ways
    from comprl_gym.seeding import seed_everything
    from comprl_gym.trainers.run import build_extractor

    rung = EXTRACTOR_RUNGS[rung] if isinstance(rung, str) else rung
    teacher = noisy_teacher(rung, label_noise, seed)
    if learner not in get_args(Learner):
        raise ConfigurationError(f"learner must be one of {get_args(Learner)}, got {learner!r}")
    if experience.extractor_format != "stem":
        experience = dataclasses.replace(experience, extractor_format="stem")
    seed_everything(seed)
    train = train_episodes if train_episodes is not None else walked_both_ways("train")
    held_out = eval_episodes if eval_episodes is not None else load_probe_episodes("memory")
    won = [e for e in train if e.won]
    lost = [e for e in train if not e.won]
    rng = random.Random(seed)
    # The extractor's CISPO as the Complementary RL trainer builds it (its extractor_loss).
    loss = CISPO.of_extractor(experience) if learner == "rl" else CrossEntropy()
    extractor = build_extractor(
        model,
        dataclasses.replace(experience, extractor_batch_size=batch_size, min_quality=0.0),
        seed,
        loss=loss,
        trainable=True,
    )
    optimizer, backend = extractor.optimizer, extractor.backend
    settings = {**dataclasses.asdict(model), "extractor_baseline": experience.extractor_baseline}
    result = RungResult(rung.name, learner, settings, seed=seed)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="comprl-ladder-") as folder:
        manager = ExperienceManager(folder, ExperienceConfig(diversify=False, max_entries=256))
        extractor.manager = manager
        try:
            result.curve.append(evaluate(backend, extractor.format, rung, held_out, 0))
            # RL writes ``extractor_samples`` lessons about each episode; the supervised
            # control has one label per episode and sees ``batch_size`` of them.
            per_episode = experience.extractor_samples if learner == "rl" else 1
            episodes = max(1, batch_size // per_episode)
            for update in range(1, max_updates + 1):
                batch = rng.sample(won, episodes // 2) + rng.sample(lost, episodes - episodes // 2)
                if learner == "rl":
                    stats = _reinforced_step(extractor, manager, teacher, batch, update)
                else:
                    stats = _supervised_step(optimizer, backend, extractor.format, teacher, batch)
                if update % eval_every == 0 or update == max_updates:
                    point = evaluate(backend, extractor.format, rung, held_out, update)
                    if _record(result, point, stats, start, progress) and stop_when_solved:
                        break
        finally:
            manager.close()
    result.time_s = time.perf_counter() - start
    if save_weights is not None:
        result.weights_sha256 = optimizer.save_weights(save_weights)
    return result


def _record(
    result: RungResult,
    point: LadderPoint,
    stats: dict[str, Any],
    start: float,
    progress: Callable[[RungResult], None] | None,
) -> bool:
    """Add an evaluation to ``result`` with the last update's entropy and mean reward (from
    its ``stats``), report it, and say whether it solved the rung."""
    point.update_entropy = stats.get("entropy")
    point.reward_mean = stats.get("reward_mean")
    result.curve.append(point)
    result.time_s = time.perf_counter() - start
    if progress is not None:
        progress(result)
    return point.greedy_right == point.episodes


def _reinforced_step(
    extractor: Any, manager: Any, rung: Rung, batch: list[Trajectory], update: int
) -> dict[str, Any]:
    """The extractor writes its lessons about each episode (``experience.extractor_samples``
    of them, as :meth:`~comprl_gym.trainers.extractor.ExperienceExtractor.distill` writes),
    each is credited by the rung (one use, won when it names the target side), and the
    extractor takes its update."""
    written = [
        (episode, lesson_id)
        for episode in batch
        for _ in range(extractor.settings.extractor_samples)
        for lesson_id in extractor.write(episode, update)
    ]
    for episode, lesson_id in written:
        named_choice = family_spec(episode.env_family).lessons.named_choice  # type: ignore[union-attr]
        named = named_choice(manager.get_one(lesson_id).text)
        manager.report_outcome([lesson_id], won=named == rung.target(episode))
    ready = extractor.ready_samples(update)
    return extractor.update(ready, update) if ready else {}


def _supervised_step(
    optimizer: PolicyOptimizer, backend: Any, extractor_format: Any, rung: Rung, batch: list
) -> dict[str, Any]:
    """One cross-entropy step on the first token of each episode's target choice."""
    samples = []
    for episode in batch:
        stem = _stem(episode)
        prompt, firsts = stem_prompt(backend, extractor_format.messages(episode), stem)
        sides = [c.split()[0] for c in stem.choices]
        prompt_ids = optimizer.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        target = firsts[sides.index(rung.target(episode))]
        samples.append(TrainSample.from_generation(prompt_ids, [target], advantage=1.0))
    return optimizer.update(samples)


# ---------------------------------------------------------------------------------- the actor
#: The actor's rungs (the ``comprl/Ladder-v0`` env's ``rung``), easiest first.
ACTOR_ENV = "comprl/Ladder-v0"


def actor_rungs() -> tuple[str, ...]:
    """The actor's rungs: :data:`comprl_gym.envs.ladder.env.RUNGS`."""
    from comprl_gym.envs.ladder.env import RUNGS

    return RUNGS


def _answer_labels(config: Any, split: str) -> Any:
    """``config`` with the ladder family's reading examples of ``split`` (format ``answer``:
    each task labelled with its first right branch)."""
    warmup = dataclasses.replace(config.warmup, formats=["answer"], sides="true", split=split)
    return dataclasses.replace(config, warmup=warmup)


def actor_choice_scores(trainer: Any, split: str = "test") -> list[tuple[str, dict[str, float]]]:
    """Per task of ``split``, its first right branch and the actor's probability of each
    branch at its first reply (the action's number token after the prompt's prefill, at
    temperature 1 restricted to the two branches): no draw, the actor's own choice."""
    from comprl_gym.agents.llm_agent import listed_number_tokens
    from comprl_gym.envs.ladder.env import SIDES
    from comprl_gym.trainers.warmup import next_token_logits, reading_examples, reading_samples

    config = _answer_labels(trainer.config, split)
    examples = reading_examples(config)
    tokenizer = trainer.actor.tokenizer
    samples = reading_samples(config, examples, tokenizer, trainer.agent(0).config.prompt)
    # The admissible actions are listed in SIDES' order, numbered from 1.
    numbers = list(listed_number_tokens(tokenizer, len(SIDES)))
    prompts = [sample.input_ids[: sample.action_mask.index(1)] for sample in samples]
    logits = next_token_logits(trainer.actor.model, prompts)[:, numbers].double()
    probs = torch.softmax(logits, -1).tolist()
    return [(example.answer, dict(zip(SIDES, p))) for (_, example), p in zip(examples, probs)]


def every_fork_samples(trainer: Any, split: str = "train") -> list[TrainSample]:
    """Each task of ``split`` played through the actor's own conversation (its prompts, its
    multi-turn token ids) with every reply forced to the right branch's number (the env's
    ``right_branches``, privileged): one cross-entropy sample per task, its mask on every
    fork's reply and the end-of-reply token after it. The supervised control of a rung with
    more than one fork (``two_step``), whose second prompt exists only after the first
    reply."""
    from comprl_gym.agents.llm_agent import LLMAgent
    from comprl_gym.agents.prompts import listed_actions
    from comprl_gym.env_factory import EnvSpec, make_env
    from comprl_gym.envs.ladder.env import SPLITS
    from comprl_gym.rollouts import collect_rollouts

    class RightBranchAgent(LLMAgent):
        def act_batch(self, states: list[Any], observations: list[str], infos: list[Any]):
            infos = [
                {**info, "right_branch": rights[id(state)][state.steps]}
                for state, info in zip(states, infos)
            ]
            return super().act_batch(states, observations, infos)

        def start_episode(self, task: str, info: dict[str, Any], seed: int | None = None):
            state = super().start_episode(task, info, seed)
            rights[id(state)] = list(info["right_branches"])
            return state

        def _listed_numbers(self, info: dict[str, Any]) -> tuple[int, ...] | None:
            numbers = super()._listed_numbers(info)
            assert numbers is not None
            listed = listed_actions(info["admissible_actions"], self.config.prompt)
            return (numbers[listed.index(info["right_branch"])],)

    rights: dict[int, list[str]] = {}
    actor = trainer.agent(0, temperature=0.0).config
    agent = RightBranchAgent(trainer.actor_backend, dataclasses.replace(actor, choose_listed=True))
    cfg = trainer.config
    kwargs = {"max_steps": cfg.max_episode_steps, **cfg.env_kwargs[ACTOR_ENV], "split": split}
    envs = [make_env(EnvSpec.of(ACTOR_ENV, kwargs)) for _ in range(32)]
    try:
        episodes = collect_rollouts(envs, agent, seeds=list(range(len(SPLITS[split]))))
    finally:
        for env in envs:
            env.close()
    # Each reply is trained with the end-of-reply token after it, as the reading warm-up's
    # samples are: without it the control learnt the right first digit and went on writing
    # digits ("21", an invalid action) when it played freely.
    end = trainer.actor.tokenizer.eos_token_id
    samples = []
    for episode in episodes:
        if not episode.won:
            raise ConfigurationError(f"{episode.task_id}: the forced right branches lost")
        for sequence in episode.training_sequences():
            ids, mask = list(sequence.input_ids), list(sequence.loss_mask)
            if mask[-1]:
                ids, mask = [*ids, end], [*mask, 0]
            for i in [i for i, m in enumerate(mask) if m]:
                if ids[i + 1] != end:
                    raise ConfigurationError(f"{episode.task_id}: a reply not ended by {end}")
                mask[i + 1] = 1
            samples.append(TrainSample(ids, mask, 1.0, meta={"task": episode.task_id}))
    return samples


def evaluate_actor(trainer: Any, updates: int, tasks: int = 32) -> LadderPoint:
    """The actor's :class:`LadderPoint` after ``updates`` updates: ``tasks`` held-out tasks
    played greedily to the end by the trainer's own agent (greedy right = episodes won, by
    the first right branch), and its first choice's mean P(right) and entropy."""
    from comprl_gym.env_factory import EnvSpec, make_env
    from comprl_gym.trainers.tasks import TaskRef

    cfg = trainer.config
    env_id = cfg.env_ids[0]
    kwargs = {"max_steps": cfg.max_episode_steps, **cfg.env_kwargs[env_id], "split": "test"}
    envs = [make_env(EnvSpec.of(env_id, kwargs)) for _ in range(tasks)]
    try:
        trainer._play_calls = 0
        jobs = [(env, TaskRef(env_id, t), t, False) for t, env in enumerate(envs)]
        episodes = trainer.play_jobs(jobs, temperature=0.0)
    finally:
        for env in envs:
            env.close()
    scores = actor_choice_scores(trainer)[:tasks]
    by_kind: dict[str, int] = {}
    for (answer, _), episode in zip(scores, episodes):
        by_kind[answer] = by_kind.get(answer, 0) + int(episode.won)
    entropy = -sum(p * math.log(p) for _, probs in scores for p in probs.values() if p > 0)
    return LadderPoint(
        updates,
        sum(int(e.won) for e in episodes),
        tasks,
        sum(probs[answer] for answer, probs in scores) / tasks,
        entropy / tasks,
        greedy_right_by_kind=dict(sorted(by_kind.items())),
    )


def climb_actor(
    rung: str,
    learner: ActorLearner,
    config: Any,
    *,
    max_updates: int = 20,
    eval_every: int = 2,
    seed: int = 0,
    supervised_lr: float = 2e-3,
    batch_size: int = 16,
    eval_tasks: int = 32,
    stop_when_solved: bool = True,
    progress: Callable[[RungResult], None] | None = None,
) -> RungResult:
    """Train a fresh actor on ``rung`` of ``comprl/Ladder-v0`` with ``learner`` for at most
    ``max_updates`` updates, evaluating every ``eval_every`` updates on ``eval_tasks`` of the
    32 held-out tasks
    (:func:`evaluate_actor`) and stopping at the first evaluation that wins all of them.

    ``rl`` is the library's own trainer for ``config.algorithm`` (GRPO in
    ``configs/actor-ladder.yaml``): each update is one
    :meth:`~comprl_gym.trainers.base.Trainer.train_iteration` (rollouts of the training
    tasks, the env's perfect reward, grouped advantages, the actor's update). ``supervised``
    is the reading warm-up's step (:func:`~comprl_gym.trainers.warmup.reading_samples`, a
    fresh AdamW at ``supervised_lr``): cross-entropy on the first right branch of
    ``batch_size`` training tasks, the same prompts and LoRA. ``supervised_every_fork`` is
    the same step on :func:`every_fork_samples`: every fork's right branch, each in the
    conversation the actor would be in after the right replies before it.
    """
    from comprl_gym.trainers import make_trainer
    from comprl_gym.trainers.warmup import reading_examples, reading_samples, warmup_optimizer

    if learner not in get_args(ActorLearner):
        raise ConfigurationError(
            f"learner must be one of {get_args(ActorLearner)}, got {learner!r}"
        )
    if rung not in actor_rungs():
        raise ConfigurationError(f"rung must be one of {actor_rungs()}, got {rung!r}")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="comprl-actor-ladder-") as folder:
        config = dataclasses.replace(
            config,
            seed=seed,
            env_ids=[ACTOR_ENV],
            env_kwargs={ACTOR_ENV: {**config.env_kwargs.get(ACTOR_ENV, {}), "rung": rung}},
            eval_tasks=0,
            output_dir=folder,
            progress=False,
            resume=False,
        )
        trainer = make_trainer(config)
        settings = {**dataclasses.asdict(config.actor), "algorithm": config.algorithm}
        if learner != "rl":
            settings["lr"] = supervised_lr
        result = RungResult(rung, learner, settings, seed=seed)
        try:
            result.curve.append(evaluate_actor(trainer, 0, eval_tasks))
            if learner == "supervised":
                warm = _answer_labels(config, "train")
                samples = reading_samples(
                    warm, reading_examples(warm), trainer.actor.tokenizer,
                    trainer.agent(0).config.prompt,
                )  # fmt: skip
            elif learner == "supervised_every_fork":
                samples = every_fork_samples(trainer)
            if learner != "rl":
                optimizer = warmup_optimizer(trainer.actor, supervised_lr)
                rng = random.Random(seed)
            for update in range(1, max_updates + 1):
                if learner == "rl":
                    record = trainer.train_iteration()
                    stats = {
                        "entropy": record.get("actor/entropy"),
                        "reward_mean": record.get("reward"),
                    }
                else:
                    stats = optimizer.update(rng.sample(samples, batch_size))
                    trainer.push_weights()
                    trainer.actor.model.eval()
                if update % eval_every == 0 or update == max_updates:
                    point = evaluate_actor(trainer, update, eval_tasks)
                    if _record(result, point, stats, start, progress) and stop_when_solved:
                        break
        finally:
            trainer.close()
    result.time_s = time.perf_counter() - start
    return result


def ladder_table(results: list[RungResult]) -> str:
    """A markdown table: per rung and learner, updates to solve, the final evaluation and time.

    Example:
        >>> r = RungResult("rule", "rl", {}, [LadderPoint(0, 16, 32, 0.5, 0.69),
        ...                                    LadderPoint(5, 32, 32, 0.9, 0.3)], 12.0)
        >>> print(ladder_table([r]))
        | rung | learner | seed | solved at (updates) | greedy right (last) | P(target) (last) | choice entropy (first → last) | time |
        | --- | --- | --- | --- | --- | --- | --- | --- |
        | rule | rl | 0 | 5 | 32/32 | 0.90 | 0.69 → 0.30 | 12 s |
    """
    lines = [
        "| rung | learner | seed | solved at (updates) | greedy right (last) | P(target) (last) "
        "| choice entropy (first → last) | time |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        first, last = r.curve[0], r.curve[-1]
        solved = "-" if r.solved_at is None else str(r.solved_at)
        lines.append(
            f"| {r.rung} | {r.learner} | {r.seed} | {solved} | {last.greedy_right}/{last.episodes} "
            f"| {last.mean_p_target:.2f} | {first.mean_choice_entropy:.2f} → "
            f"{last.mean_choice_entropy:.2f} | {r.time_s:.0f} s |"
        )
    return "\n".join(lines)


__all__ = [
    "ACTOR_ENV",
    "EXTRACTOR_RUNGS",
    "LadderPoint",
    "Rung",
    "RungResult",
    "actor_choice_scores",
    "actor_rungs",
    "choice_scores",
    "climb",
    "climb_actor",
    "evaluate",
    "evaluate_actor",
    "ladder_table",
    "stairs_side",
]
