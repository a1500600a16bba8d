"""The visits played: every arm's episodes of every (task, visit), one record each.

:func:`run_streaming` plays each :class:`Arm` (a source of lessons) on the same tasks, visit
after visit, every (task, visit) episode on the reset and sampling seeds of
:func:`episode_seeds`, the same in every arm (common random numbers); an arm's store learns
between visits.

Example (scripted agents, a store that learns nothing, so both curves are flat):
    >>> from comprl_gym.agents import make_agent
    >>> from comprl_gym.env_factory import EnvSpec
    >>> spec = EnvSpec.of("comprl/Memory-Fork-v0", {"split": "test"})
    >>> agent = lambda env, seed: make_agent("random", env, seed=seed)
    >>> records = run_streaming(spec, tasks=[0, 1], visits=2, arms=[Arm("none")],
    ...                         agent=agent, progress=False)
    >>> [(r["arm"], r["visit"], r["task_index"]) for r in records]
    [('none', 1, 0), ('none', 1, 1), ('none', 2, 0), ('none', 2, 1)]
    >>> records[0]["sampling_seed"] != records[2]["sampling_seed"]  # a new draw per visit
    True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from comprl_gym.env_factory import EnvSpec, ExperienceSpec, make_env
from comprl_gym.evaluation.eval import EpisodeKey, episode_record
from comprl_gym.rollouts import RolloutConfig, RolloutWorker, Trajectory, run_episode


@dataclass
class Arm:
    """One source of lessons.

    Attributes:
        name: the arm's label in the records (``none``, ``oracle``, ``own``, ...).
        manager: the store its episodes read (``None``: no lessons, no experience wrapper).
        learn: called with every finished episode of the arm, before the next one starts: the
            store's online learning (``None``: the store stays as it is).
    """

    name: str
    manager: Any = None
    learn: Callable[[Trajectory], None] | None = None


def episode_seeds(task: int, visit: int, base: int = 0) -> tuple[int, int]:
    """The (reset seed, sampling seed) of visit ``visit`` to task ``task``: the reset seed is
    the task's (every visit plays the same task), the sampling seed a new draw per visit;
    neither depends on the arm.

    Example:
        >>> episode_seeds(3, 1), episode_seeds(3, 2)
        ((3, 1003001), (3, 2003001))
    """
    return task, (base * 7919 + visit * 1_000_000 + task * 1000 + 1) % 2**31


def run_streaming(
    spec: EnvSpec,
    tasks: Sequence[int],
    visits: int,
    arms: Sequence[Arm],
    agent: Any,
    inject_top_k: int = 1,
    seed: int = 0,
    agent_label: str = "",
    progress: bool = True,
    parallel: int = 32,
    on_visit: Callable[[list[dict[str, Any]]], None] | None = None,
) -> list[dict[str, Any]]:
    """Play every arm's visits; one record per episode (:func:`~comprl_gym.evaluation.eval.
    episode_record`'s, its ``condition`` the arm and its ``agent_seed`` ``seed``, plus
    ``arm``, ``visit``, ``reset_seed``, ``sampling_seed``).

    ``agent`` is a batched LLM agent (an :class:`~comprl_gym.agents.llm_agent.LLMAgent`:
    a visit's episodes are played ``parallel`` at once, each drawing from its own sampling
    seed) or ``agent(env, sampling_seed) -> Agent``, a factory of one agent per episode
    (played one at a time). ``tasks`` are reset seeds of ``spec``'s env (its held-out split).
    The arms' envs read their store with ``inject_top_k`` lessons and never report outcomes;
    an arm's ``learn`` sees a visit's episodes after the visit, in task order (not after the
    last visit, which nothing reads). ``on_visit`` gets each arm's visit's records as soon as
    they are played (a caller saves them, so an interrupted stream keeps what it played).
    """
    from tqdm import tqdm

    if visits < 1 or not tasks or not arms:
        raise ValueError("streaming needs at least one task, one visit and one arm")
    bar = tqdm(
        total=len(arms) * visits * len(tasks), desc="streaming", unit="ep", disable=not progress
    )
    records: list[dict[str, Any]] = []
    try:
        for arm in arms:
            experience = None
            if arm.manager is not None:
                experience = ExperienceSpec(inject_top_k, 0, report_outcomes=False)
            arm_spec = spec.with_experience(experience)
            envs = [
                make_env(arm_spec, manager=arm.manager)
                for _ in range(max(1, min(parallel, len(tasks))))
            ]
            try:
                for visit in range(1, visits + 1):
                    bar.set_postfix_str(f"{arm.name} visit {visit}")
                    pairs = [episode_seeds(task, visit, seed) for task in tasks]
                    trajectories = _play_visit(envs, agent, pairs, bar)
                    for task, (reset_seed, sampling_seed), trajectory in zip(
                        tasks, pairs, trajectories
                    ):
                        # The extractor reads with-experience episodes (``distill``'s mode).
                        trajectory.meta.update(with_experience=arm.manager is not None, group=task)
                        record = episode_record(
                            trajectory,
                            EpisodeKey(spec.env_id, task, sampling_seed, arm.name),
                            agent_label,
                            arm.manager,
                        )
                        # The key names the episode by its sampling seed (one per visit);
                        # the agent's seed is the stream's, as an eval's summary counts seeds.
                        record.update(
                            arm=arm.name,
                            visit=visit,
                            reset_seed=reset_seed,
                            sampling_seed=sampling_seed,
                            agent_seed=seed,
                        )
                        record.setdefault("experiences", [])
                        records.append(record)
                    if on_visit is not None:
                        on_visit(records[-len(tasks) :])
                    # The store learns between visits; after the last, nothing reads it (the
                    # own arm's extractor would distil a whole visit for nobody).
                    if arm.learn is not None and visit < visits:
                        for trajectory in trajectories:
                            if not trajectory.error:
                                arm.learn(trajectory)
            finally:
                for env in envs:
                    env.close()
    finally:
        bar.close()
    return records


def _play_visit(
    envs: list[Any], agent: Any, pairs: list[tuple[int, int]], bar: Any
) -> list[Trajectory]:
    """One visit's episodes, in task order, each on its own (reset seed, sampling seed)."""
    resets = [reset for reset, _ in pairs]
    if hasattr(agent, "act_batch"):
        worker = RolloutWorker(envs, agent=agent, config=RolloutConfig(max_turns=None))
        return worker.run(
            resets, sampling_seeds=[s for _, s in pairs], on_episode=lambda _: bar.update()
        )
    played = []
    for reset, sampling in pairs:
        played.append(run_episode(envs[0], agent(envs[0], sampling), reset))
        bar.update()
    return played
