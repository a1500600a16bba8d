"""The rollout layer: THE episode loop and THE episode record, shared by every caller.

``comprl-gym run`` (:func:`run_episode`), evaluation (:mod:`comprl_gym.evaluation.eval`) and
the trainers (:mod:`comprl_gym.trainers.playing`) all play episodes here and get
:class:`Trajectory` records back.

:func:`collect_rollouts` keeps up to ``len(envs)`` episodes alive; each round, ONE batched
``act_batch`` call decides an action for every live episode (one generation call for the
model), then ONE stepper call steps every live env (:class:`LocalStepper` in this process, one
after another; :class:`comprl_gym.distributed.env_pool.EnvPool` on Ray workers, in parallel).
A finished env immediately starts the next queued episode. Agents
without ``act_batch`` (scripted ones) work too: each episode gets its own agent from
``agent_factory``.

Every model call becomes a :class:`Turn` with the prompt and completion token ids, the
completion logprobs and a loss mask (prompt and env text 0, model tokens 1), so a trainer can
rebuild exactly what was sampled. A multi-turn agent's turns share a context ``segment``:
:meth:`Trajectory.training_sequences` turns each segment into ONE training sequence (the
reference's one sequence per trajectory). Trajectories round-trip through JSONL. Callers attach their
own per-episode fields in ``Trajectory.meta`` (evaluation its result key, trainers the task
group and the experience half).

Example:
    >>> import gymnasium as gym, comprl_gym
    >>> from comprl_gym.agents.llm_agent import agent_from_spec
    >>> envs = [gym.make("comprl/MiniHack-Room-5x5-v0", max_steps=2) for _ in range(2)]
    >>> agent = agent_from_spec("hf:tiny?max_tokens=4")
    >>> trajs = collect_rollouts(envs, agent, seeds=[0, 1, 2])
    >>> [len(t.turns) for t in trajs]
    [2, 2, 2]
    >>> sum(trajs[0].turns[0].loss_mask()) == len(trajs[0].turns[0].completion_token_ids)
    True

One episode with a scripted agent (what ``comprl-gym run`` plays):
    >>> from comprl_gym.agents import make_agent
    >>> env = gym.make("comprl/MiniHack-Room-5x5-v0")
    >>> result = run_episode(env, make_agent("expert", env), seed=0)
    >>> result.won, result.steps == len(result.turns)
    (True, True)
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

from comprl_gym.core import ComprlGymError, ConfigurationError, DataError
from comprl_gym.llm.base import BackendError

logger = logging.getLogger(__name__)


@dataclass
class Turn:
    """One agent step: the model call and what the env answered.

    ``observation`` is what the agent saw before acting; ``next_observation`` the env's answer.
    Token fields are empty for agents without a model.
    """

    step: int
    observation: str
    action: str
    next_observation: str = ""
    text: str = ""
    format_error: bool = False
    method: str = ""
    prompt_token_ids: list[int] = field(default_factory=list)
    completion_token_ids: list[int] = field(default_factory=list)
    completion_logprobs: list[float] | None = None
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    invalid_action: bool = False
    gen_time_s: float = 0.0
    env_time_s: float = 0.0
    #: The multi-turn context segment of this turn's prompt (``None``: a stand-alone prompt).
    segment: int | None = None
    #: The only tokens the reply could be sampled from (an agent's ``choose_listed``: the
    #: listed actions' numbers); ``None``: any token.
    allowed_token_ids: list[int] | None = None

    def loss_mask(self) -> list[int]:
        """1 for each token the model produced, 0 for the prompt (env text is never trained)."""
        return [0] * len(self.prompt_token_ids) + [1] * len(self.completion_token_ids)

    def input_ids(self) -> list[int]:
        return self.prompt_token_ids + self.completion_token_ids


@dataclass
class TrainingSequence:
    """One sequence to train on: token ids, a loss mask that is 1 exactly on the tokens the
    model sampled, and the sampler's log-probs aligned with the ids (0.0 under mask 0;
    ``None`` when the sampler gave none), and the tokens its replies were restricted to
    (``None``: any; turns restricted to different sets give their union)."""

    input_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float] | None
    turns: int
    allowed_token_ids: tuple[int, ...] | None = None


@dataclass
class Trajectory:
    """One episode, ready for JSONL, for evaluation and for a trainer.

    ``meta`` carries what a caller attached to the episode: a trainer's task ``group`` and
    whether it was played ``with_experience`` (see the properties of those names).
    ``critique`` is the actor's critique of the experiences retrieved for the episode
    (:meth:`comprl_gym.agents.critique.Critique.to_dict`), ``None`` when there was none.
    """

    episode_id: str
    env_id: str
    env_family: str
    task_id: str
    task: str
    seed: int
    turns: list[Turn] = field(default_factory=list)
    total_reward: float = 0.0
    won: bool = False
    score: float = 0.0
    steps: int = 0
    terminated: bool = False
    truncated: bool = False
    invalid_actions: int = 0
    format_errors: int = 0
    experience_ids: list[Any] = field(default_factory=list)
    search_and_ask_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_time_s: float = 0.0
    gen_time_s: float = 0.0
    env_time_s: float = 0.0
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    critique: dict[str, Any] | None = None
    #: Times the episode was played again from its reset because its env was lost (a remote
    #: env worker died); this record is the attempt that finished.
    reruns: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        data = dict(data)
        data["turns"] = [Turn(**t) for t in data.get("turns", [])]
        return cls(**data)

    @property
    def group(self) -> int:
        """The trainer's task group of this episode (``meta["group"]``, 0 when unset)."""
        return int(self.meta.get("group", 0))

    @property
    def with_experience(self) -> bool:
        """Whether a trainer played this episode in its with-experience half."""
        return bool(self.meta.get("with_experience", False))

    @property
    def shown_experience_ids(self) -> list[int]:
        """The experiences the actor actually read, in the order shown: those injected, less
        the ones an unreadable critique dropped from its prompt (reference
        ``hook_on_episode_start``). Only these count as uses of a lesson.

        Example:
            >>> t = Trajectory("e", "id", "f", "0", "", 0, experience_ids=[4, 7, 4])
            >>> t.shown_experience_ids
            [4, 7]
            >>> t.critique = {"decision": "unparsed", "score": None, "ids": [7]}
            >>> t.shown_experience_ids
            [4]
        """
        ids = [int(i) for i in dict.fromkeys(self.experience_ids)]
        critique = self.critique
        if critique is not None and critique.get("score") is None:
            dropped = {int(i) for i in critique.get("ids", [])}
            ids = [i for i in ids if i not in dropped]
        return ids

    def transcript(self, max_chars: int = 1500) -> str:
        """What happened, for a reader such as the experience extractor.

        Each action is followed by the observation it produced, and the last line is the
        outcome. A long transcript keeps its end (where the outcome was decided).

        Example:
            >>> t = Trajectory("e", "id", "minihack", "0", "find the stairs", 0, won=True,
            ...     score=1.0, steps=2, turns=[Turn(0, "start", "north", "a wall"),
            ...     Turn(1, "a wall", "east", "You reach the stairs.")])
            >>> print(t.transcript())
            > north
            a wall
            > east
            You reach the stairs.
            Outcome: success (score 1.00) after 2 steps.
        """
        lines = [f"> {t.action}\n{t.next_observation}" for t in self.turns]
        outcome = "success" if self.won else "failure"
        lines.append(f"Outcome: {outcome} (score {self.score:.2f}) after {self.steps} steps.")
        text = "\n".join(lines)
        return text if len(text) <= max_chars else "...\n" + text[-max_chars:]

    @property
    def num_segments(self) -> int:
        """Training sequences this episode yields in trajectory mode (context segments, each
        stand-alone turn counting as one)."""
        return len(self._segment_runs())

    def _segment_runs(self) -> list[list[Turn]]:
        runs: list[list[Turn]] = []
        for turn in self.turns:
            if not turn.completion_token_ids:
                continue  # a scripted step: no model tokens
            if runs and turn.segment is not None and runs[-1][-1].segment == turn.segment:
                runs[-1].append(turn)
            else:
                runs.append([turn])
        return runs

    def training_sequences(self, mode: str = "trajectory") -> list[TrainingSequence]:
        """The sequences a trainer learns from.

        ``trajectory``: one sequence per context segment (one per episode unless the context
        budget folded it): the last turn's prompt and completion, which contain every earlier
        turn of the segment token for token; the mask is 1 on each turn's completion and 0 on
        system, user, tool and end-of-turn tokens. Reference:
        ``roll/pipeline/agentic/env_manager/traj_env_manager.py::formulate_rollouts``.
        ``turn``: one sequence per model call (its prompt masked).

        Example:
            >>> t = Trajectory("e", "id", "f", "0", "", 0, turns=[
            ...     Turn(0, "", "a", prompt_token_ids=[1, 2], completion_token_ids=[3],
            ...          completion_logprobs=[-0.5], segment=0),
            ...     Turn(1, "", "b", prompt_token_ids=[1, 2, 3, 9, 4], completion_token_ids=[5, 6],
            ...          completion_logprobs=[-0.1, -0.2], segment=0)])
            >>> [seq] = t.training_sequences()
            >>> seq.input_ids, seq.loss_mask
            ([1, 2, 3, 9, 4, 5, 6], [0, 0, 1, 0, 0, 1, 1])
            >>> seq.logprobs
            [0.0, 0.0, -0.5, 0.0, 0.0, -0.1, -0.2]
            >>> len(t.training_sequences("turn"))
            2
        """
        if mode == "turn":
            runs = [[t] for t in self.turns if t.completion_token_ids]
        elif mode == "trajectory":
            runs = self._segment_runs()
        else:
            raise ComprlGymError(f"mode must be 'trajectory' or 'turn', got {mode!r}")
        return [self._sequence(run) for run in runs]

    def _sequence(self, run: list[Turn]) -> TrainingSequence:
        last = run[-1]
        ids = last.prompt_token_ids + last.completion_token_ids
        mask = [0] * len(ids)
        logprobs: list[float] | None = [0.0] * len(ids)
        previous_end = 0
        for turn in run:
            start = len(turn.prompt_token_ids)
            if ids[:start] != turn.prompt_token_ids or start < previous_end:
                raise DataError(
                    f"episode {self.episode_id}",
                    f"turn {turn.step}'s prompt does not extend the earlier turns of segment "
                    f"{turn.segment}: not a token-in/token-out conversation",
                )
            end = start + len(turn.completion_token_ids)
            if ids[start:end] != turn.completion_token_ids:
                raise DataError(
                    f"episode {self.episode_id}", f"turn {turn.step}'s completion was changed"
                )
            mask[start:end] = [1] * (end - start)
            lps = turn.completion_logprobs
            if logprobs is not None and lps is not None and len(lps) == end - start:
                logprobs[start:end] = list(lps)
            else:
                logprobs = None
            previous_end = end
        restricted = [t.allowed_token_ids for t in run if t.completion_token_ids]
        allowed = None
        if restricted and all(r is not None for r in restricted):
            allowed = tuple(sorted({t for r in restricted for t in r or ()}))
        return TrainingSequence(ids, mask, logprobs, len(run), allowed)


def append_jsonl(path: str | os.PathLike[str], records: Iterable[dict[str, Any]]) -> None:
    """Append one JSON object per line and fsync, so a crash loses at most a partial last line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def write_jsonl(path: str | os.PathLike[str], trajectories: Iterable[Trajectory]) -> None:
    """Append trajectories to a JSONL file."""
    append_jsonl(path, (t.to_dict() for t in trajectories))


def read_jsonl(path: str | os.PathLike[str]) -> list[Trajectory]:
    """Read trajectories written by :func:`write_jsonl` (a bad line raises :class:`DataError`)."""
    out = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                out.append(Trajectory.from_dict(json.loads(line)))
            except (json.JSONDecodeError, TypeError) as exc:
                raise DataError(path, f"line {number} is not a trajectory: {exc}") from exc
    return out


@dataclass
class RolloutConfig:
    """Settings of :func:`collect_rollouts`.

    Attributes:
        max_turns: safety cap on model calls per episode (the env's own step limit normally
            ends episodes first; search steps of an experience wrapper do not count there);
            ``None`` for no cap.
        keep_text: store observations and replies in turns (off saves space for training).
        split_on_oom: when the backend runs out of memory, retry the batch in halves.
        progress: show a tqdm bar over finished episodes.
        progress_label: the bar's description.
        max_episode_retries: times an episode whose env was lost (:class:`EnvLost`: its remote
            worker died) is played again from its reset before the run fails.
    """

    max_turns: int | None = 200
    keep_text: bool = True
    split_on_oom: bool = True
    progress: bool = False
    progress_label: str = "episodes"
    max_episode_retries: int = 0


@dataclass
class _Slot:
    env: gym.Env
    trajectory: Trajectory | None = None
    state: Any = None
    agent: Any = None
    observation: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    started: float = 0.0


def _env_id(env: gym.Env) -> str:
    # A client of a served env (comprl/Remote-v0) names the id it plays in ``served_env_id``.
    served = getattr(env.unwrapped, "served_env_id", None)
    if served:
        return served
    return env.spec.id if env.spec is not None else type(env.unwrapped).__name__


#: What a reset answers: observation, info and the seconds the env took.
ResetResult = tuple[Any, dict[str, Any], float]
#: What a step answers: observation, reward, terminated, truncated, info and the env's seconds.
StepResult = tuple[Any, float, bool, bool, dict[str, Any], float]


@dataclass
class EnvLost:
    """A stepper's answer for an env that is gone with its episode (a remote worker died):
    the episode loop plays that episode again from its reset."""

    reason: str


class LocalStepper:
    """Resets and steps the envs of this process, one after another (the default stepper).

    A stepper answers for a batch of envs at once, so a remote one
    (:class:`comprl_gym.distributed.env_pool.EnvPool`) can step them in parallel.
    """

    def env_id(self, env: gym.Env) -> str:
        return _env_id(env)

    def reset(
        self, envs: list[gym.Env], seeds: list[int], options: list[dict[str, Any] | None]
    ) -> list[ResetResult | EnvLost]:
        out: list[ResetResult | EnvLost] = []
        for env, seed, opts in zip(envs, seeds, options):
            t0 = time.perf_counter()
            observation, info = env.reset(seed=seed, options=opts)
            out.append((observation, info, time.perf_counter() - t0))
        return out

    def step(self, envs: list[gym.Env], actions: list[str]) -> list[StepResult | EnvLost]:
        out: list[StepResult | EnvLost] = []
        for env, action in zip(envs, actions):
            t0 = time.perf_counter()
            observation, reward, terminated, truncated, info = env.step(action)
            out.append((observation, reward, terminated, truncated, info, time.perf_counter() - t0))
        return out


class RolloutWorker:
    """Runs episodes on a fixed pool of envs with one batched agent (see module docstring).

    ``stepper`` reaches the envs: :class:`LocalStepper` (the default) steps envs of this
    process; :class:`comprl_gym.distributed.env_pool.EnvPool` steps envs held by Ray actors,
    all live episodes' steps in one parallel round.
    """

    def __init__(
        self,
        envs: list[Any],
        agent: Any = None,
        agent_factory: Callable[[Any, int], Any] | None = None,
        config: RolloutConfig | None = None,
        stepper: Any = None,
    ):
        if not envs:
            raise ComprlGymError("collect_rollouts needs at least one env")
        if agent is None and agent_factory is None:
            raise ComprlGymError("give an agent (with act_batch) or an agent_factory")
        if stepper is None and len({id(env) for env in envs}) < len(envs):
            # Two slots on one env object would play two episodes on one game at once: the
            # second reset silently replaces the first episode's task.
            raise ConfigurationError(
                "the same env object is listed twice: episodes played at once need one env each"
            )
        self.envs = envs
        self.agent = agent
        self.agent_factory = agent_factory
        self.config = config or RolloutConfig()
        self.stepper = stepper or LocalStepper()
        self.batched = agent is not None and hasattr(agent, "act_batch")

    def run(
        self,
        seeds: list[int],
        options: list[dict[str, Any] | None] | None = None,
        meta: list[dict[str, Any]] | None = None,
        on_episode: Callable[[Trajectory], None] | None = None,
        sampling_seeds: list[int] | None = None,
    ) -> list[Trajectory]:
        """Play one episode per seed; results in the order of ``seeds``.

        ``on_episode`` is called as each episode ends (to persist it at once). An episode whose
        env is lost (:class:`EnvLost`) is played again from its reset, up to
        ``config.max_episode_retries`` times; then the run fails. ``sampling_seeds`` gives each
        episode its own sampling seed (a batched LLM agent then draws each episode's replies
        from it alone, whatever else shares the batch: common random numbers across runs).
        """
        if sampling_seeds is not None and len(sampling_seeds) != len(seeds):
            raise ConfigurationError("sampling_seeds needs one seed per episode")
        options = options or [None] * len(seeds)
        meta = meta or [{} for _ in seeds]
        queue = list(range(len(seeds)))[::-1]
        results: list[Trajectory | None] = [None] * len(seeds)
        reruns = [0] * len(seeds)
        slots = [_Slot(env) for env in self.envs]
        index_of: dict[int, int] = {}
        bar = None
        if self.config.progress:
            from tqdm import tqdm

            bar = tqdm(total=len(seeds), desc=self.config.progress_label, unit="ep")

        def requeue(slot_id: int, lost: EnvLost) -> None:
            i = index_of.pop(slot_id)
            slots[slot_id].trajectory = None
            reruns[i] += 1
            if reruns[i] > self.config.max_episode_retries:
                raise ComprlGymError(
                    f"episode {i} (seed {seeds[i]}) lost its env {reruns[i]} times "
                    f"(max_episode_retries={self.config.max_episode_retries}): {lost.reason}"
                )
            logger.warning("episode %d (seed %d) lost: %s; playing it again", i, seeds[i], lost)
            queue.append(i)  # next to start

        def start(slot_ids: list[int]) -> None:
            """Reset the free slots onto the next queued episodes, all in one stepper call."""
            while slot_ids:
                chosen = [(k, queue.pop()) for k in slot_ids[: len(queue)]]
                for k in slot_ids[len(chosen) :]:
                    slots[k].trajectory = None
                if not chosen:
                    return
                answers = self.stepper.reset(
                    [slots[k].env for k, _ in chosen],
                    [seeds[i] for _, i in chosen],
                    [options[i] for _, i in chosen],
                )
                lost_slots = []
                for (k, i), answer in zip(chosen, answers):
                    index_of[k] = i
                    if isinstance(answer, EnvLost):
                        requeue(k, answer)
                        lost_slots.append(k)
                    else:
                        begin(k, i, answer)
                slot_ids = lost_slots

        def begin(slot_id: int, i: int, answer: ResetResult) -> None:
            slot = slots[slot_id]
            observation, info, reset_time = answer
            slot.started = time.perf_counter() - reset_time
            slot.observation, slot.info = observation, info
            slot.trajectory = Trajectory(
                episode_id=uuid.uuid4().hex[:16],
                env_id=self.stepper.env_id(slot.env),
                env_family=str(info.get("env_family", "")),
                task_id=str(info.get("task_id", "")),
                task=str(info.get("task", "")),
                seed=int(seeds[i]),
                env_time_s=reset_time,
                meta=dict(meta[i]),
                experience_ids=list(info.get("experience_ids", []) or []),
                reruns=reruns[i],
            )
            if self.batched:
                episode_seed = None if sampling_seeds is None else int(sampling_seeds[i])
                slot.state = self.agent.start_episode(slot.trajectory.task, info, seed=episode_seed)
            else:
                slot.agent = (
                    self.agent
                    if self.agent_factory is None
                    else self.agent_factory(slot.env, seeds[i])
                )
                slot.agent.reset(slot.trajectory.task, info)

        def finish(slot_id: int, error: str | None = None) -> None:
            slot = slots[slot_id]
            traj = slot.trajectory
            assert traj is not None
            info = slot.info
            traj.won = bool(info.get("won", False))
            traj.score = float(info.get("score", 0.0))
            traj.steps = int(info.get("step", len(traj.turns)))
            traj.experience_ids = list(info.get("experience_ids", traj.experience_ids) or [])
            traj.search_and_ask_calls = int(info.get("search_and_ask_calls", 0) or 0)
            traj.wall_time_s = time.perf_counter() - slot.started
            traj.error = error
            results[index_of.pop(slot_id)] = traj
            slot.trajectory = None
            if on_episode is not None:
                on_episode(traj)
            if bar is not None:
                bar.update()

        try:
            start(list(range(len(slots))))
            while True:
                live = [k for k, s in enumerate(slots) if s.trajectory is not None]
                if not live:
                    break
                decisions = self._decide([slots[k] for k in live])
                answers = self.stepper.step(
                    [slots[k].env for k in live], [action for action, _, _ in decisions]
                )
                free: list[int] = []
                for k, (action, decision, gen_time), answer in zip(live, decisions, answers):
                    if isinstance(answer, EnvLost):
                        requeue(k, answer)
                        free.append(k)
                        continue
                    self._record(slots[k], action, decision, gen_time, answer)
                    traj = slots[k].trajectory
                    assert traj is not None
                    last = traj.turns[-1]
                    if last.terminated or last.truncated:
                        finish(k)
                        free.append(k)
                    elif (
                        self.config.max_turns is not None
                        and len(traj.turns) >= self.config.max_turns
                    ):
                        traj.truncated = True
                        finish(
                            k, error=f"stopped after max_turns={self.config.max_turns} model calls"
                        )
                        free.append(k)
                start(free)
        finally:
            if bar is not None:
                bar.close()
        return [r for r in results if r is not None]

    def _decide(self, slots: list[_Slot]) -> list[tuple[str, Any, float]]:
        if not self.batched:
            out = []
            for slot in slots:
                t0 = time.perf_counter()
                action = slot.agent.act(slot.observation, slot.info)
                out.append(
                    (action, getattr(slot.agent, "last_decision", None), time.perf_counter() - t0)
                )
            return out
        t0 = time.perf_counter()
        decisions = self._act_batch(
            [s.state for s in slots], [s.observation for s in slots], [s.info for s in slots]
        )
        elapsed = time.perf_counter() - t0
        return [(d.action, d, elapsed) for d in decisions]

    def _act_batch(
        self, states: list[Any], observations: list[str], infos: list[dict[str, Any]]
    ) -> list[Any]:
        try:
            return self.agent.act_batch(states, observations, infos)
        except BackendError as exc:
            if not (
                exc.retryable
                and self.config.split_on_oom
                and len(states) > 1
                and "memory" in str(exc)
            ):
                raise
            half = len(states) // 2
            logger.warning("backend out of memory on %d prompts; retrying in halves", len(states))
            return self._act_batch(
                states[:half], observations[:half], infos[:half]
            ) + self._act_batch(states[half:], observations[half:], infos[half:])

    def _record(
        self, slot: _Slot, action: str, decision: Any, gen_time: float, answer: StepResult
    ) -> None:
        """Append the turn of ``action`` and the env's ``answer`` to the slot's episode."""
        traj = slot.trajectory
        assert traj is not None
        observation, reward, terminated, truncated, info, env_time = answer
        generation = getattr(decision, "generation", None)
        keep = self.config.keep_text
        turn = Turn(
            step=len(traj.turns),
            observation=slot.observation if keep else "",
            action=action,
            next_observation=observation if keep else "",
            text=getattr(decision, "text", "") if keep else "",
            format_error=bool(getattr(decision, "format_error", False)),
            method=str(getattr(decision, "method", "")),
            reward=float(reward),
            terminated=bool(terminated),
            truncated=bool(truncated),
            invalid_action=bool(info.get("invalid_action", False)),
            gen_time_s=gen_time,
            env_time_s=env_time,
        )
        critique = getattr(decision, "critique", None)
        if critique is not None:
            traj.critique = critique.to_dict()
        if generation is not None:
            turn.prompt_token_ids = list(generation.prompt_token_ids)
            turn.completion_token_ids = list(generation.completion_token_ids)
            turn.completion_logprobs = (
                list(generation.completion_logprobs)
                if generation.completion_logprobs is not None
                else None
            )
            turn.segment = getattr(decision, "segment", None)
            allowed = generation.extra.get("allowed_token_ids")
            turn.allowed_token_ids = None if allowed is None else list(allowed)
            traj.prompt_tokens += generation.num_prompt_tokens or _estimate(decision, "prompt")
            traj.completion_tokens += generation.num_completion_tokens or _estimate(
                decision, "completion"
            )
        traj.turns.append(turn)
        traj.total_reward += float(reward)
        traj.invalid_actions += int(turn.invalid_action)
        traj.format_errors += int(turn.format_error)
        traj.gen_time_s += gen_time
        traj.env_time_s += env_time
        traj.terminated, traj.truncated = bool(terminated), bool(truncated)
        slot.observation, slot.info = observation, info


def _estimate(decision: Any, part: str) -> int:
    """Token estimate (~4 characters a token) for servers that return no token ids."""
    if part == "prompt":
        text = "".join(m.get("content", "") for m in getattr(decision, "messages", []) or [])
    else:
        text = getattr(decision, "text", "") or ""
    return (len(text) + 3) // 4


def collect_rollouts(
    envs: list[gym.Env],
    agent: Any,
    seeds: list[int],
    options: list[dict[str, Any] | None] | None = None,
    config: RolloutConfig | None = None,
    jsonl_path: str | os.PathLike[str] | None = None,
    meta: list[dict[str, Any]] | None = None,
    stepper: Any = None,
    sampling_seeds: list[int] | None = None,
) -> list[Trajectory]:
    """Play one episode per seed with up to ``len(envs)`` at once; optionally append JSONL.

    Results come back in the order of ``seeds``. Episodes start in seed order on the free envs,
    so with ``len(envs) == len(seeds)`` episode ``i`` runs on ``envs[i]`` (callers may prepare
    each env for its episode, e.g. wrap some in an experience wrapper).

    ``agent`` is an :class:`~comprl_gym.agents.llm_agent.LLMAgent` (batched) or any agent (then
    ``envs`` should hold one env, or use :class:`RolloutWorker` with an ``agent_factory``).
    ``stepper`` reaches remote envs (see :class:`RolloutWorker`).
    """
    worker = RolloutWorker(envs, agent=agent, config=config, stepper=stepper)
    on_episode = (lambda t: write_jsonl(jsonl_path, [t])) if jsonl_path is not None else None
    return worker.run(
        seeds, options=options, meta=meta, on_episode=on_episode, sampling_seeds=sampling_seeds
    )


def run_episode(
    env: gym.Env, agent: Any, seed: int, options: dict[str, Any] | None = None
) -> Trajectory:
    """Play one episode of ``env`` from ``reset(seed=seed)`` until it ends (no turn cap).

    A plain agent keeps its state across calls (``reset`` starts each episode); an LLM agent
    plays through its batched interface.
    """
    worker = RolloutWorker([env], agent=agent, config=RolloutConfig(max_turns=None))
    [trajectory] = worker.run([seed], options=[options])
    return trajectory
