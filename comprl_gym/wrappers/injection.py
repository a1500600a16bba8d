"""ExperienceInjection: the top-k experiences for the task, shown above the first observation.

``info`` gains ``experience_ids`` (the injected ids) and ``experiences``
(``[{"id": ..., "text": ...}]``, so an agent may put them in its system prompt instead). An agent
that does so (:class:`~comprl_gym.agents.llm_agent.LLMAgent`, as the trainers use it) turns
``experiences_in_observation`` off, so the actor does not read them twice; the reference
appends retrieved memories to the system prompt only
(``roll/pipeline/agentic/env_manager/traj_env_manager.py::format_messages``).

Example:
    >>> import tempfile, gymnasium as gym, comprl_gym
    >>> from comprl_gym.experience import ExperienceManager
    >>> from comprl_gym.wrappers import ExperienceInjection
    >>> manager = ExperienceManager(tempfile.mkdtemp())
    >>> [eid] = manager.add(["## Title: Stairs\\n## Description: rooms\\n## Content: walk to the '>'"], env_family="minihack")
    >>> env = ExperienceInjection(gym.make("comprl/MiniHack-Room-5x5-v0"), manager, top_k=2)
    >>> obs, info = env.reset(seed=0)
    >>> obs.startswith("Lessons from past experience"), info["experience_ids"] == [eid]
    (True, True)
    >>> info["experiences"][0]["text"].splitlines()[0]
    '## Title: Stairs'
    >>> env.close(); manager.close()
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from comprl_gym.core import ConfigurationError, printable_text
from comprl_gym.experience import prompts
from comprl_gym.experience.access import ExperienceAccess


def default_query(observation: str, info: dict[str, Any]) -> str:
    """The injection query: the task and the start of the first observation."""
    return f"{info.get('task', '')}\n{observation[:1000]}".strip()


#: With ``same_task_only`` the query asks for this many times the candidates it shows: the
#: lessons about the same task are the nearest to its query (they are written about it), so
#: a store of a few hundred lessons needs no exact filter.
SAME_TASK_WIDTH = 16


class ExperienceInjection(gym.Wrapper):
    """Retrieve experiences at reset and prepend them to the first observation.

    Args:
        env: any comprl env.
        manager: where the experiences come from.
        top_k: experiences injected (0 = none; the info keys are still set).
        same_family_only: retrieve only the env's family (and family-less experiences).
        query_fn: ``query_fn(observation, info) -> str`` (default :func:`default_query`).
        experiences_in_observation: also prepend them to the first observation (off when the
            agent puts ``info["experiences"]`` in its system prompt).
        sample_from: retrieve this many candidates and show ``top_k`` of them (0: the top
            ``top_k``), chosen by ``order``.
        sample_salt: this env's place among the envs that send the same query (the trainer
            gives each env of a task group its slot).
        order: ``random`` (each reset draws ``top_k`` of the candidates, seeded by the reset
            seed and the salt) or ``rotate`` (the envs of one query read the candidates in
            turn from one offset the reset seed draws: env ``s`` reads candidates ``s * top_k``
            onwards, so ``sample_from / top_k`` consecutive salts read every candidate once).
        same_task_only: show only experiences written about this reset's task (their
            provenance names ``info["task_id"]``); a task nothing was written about shows none.
            The query then asks for :data:`SAME_TASK_WIDTH` times as many candidates, of which
            those of other tasks are dropped.
    """

    def __init__(
        self,
        env: gym.Env,
        manager: ExperienceAccess,
        top_k: int = 3,
        same_family_only: bool = True,
        query_fn: Callable[[str, dict[str, Any]], str] | None = None,
        experiences_in_observation: bool = True,
        sample_from: int = 0,
        sample_salt: int = 0,
        order: str = "random",
        same_task_only: bool = False,
    ):
        super().__init__(env)
        self.experiences_in_observation = experiences_in_observation
        if top_k < 0:
            raise ConfigurationError(f"top_k must be >= 0, got {top_k}")
        if sample_from and sample_from < top_k:
            raise ConfigurationError(
                f"sample_from ({sample_from}) must be 0 (off) or at least top_k ({top_k})"
            )
        #: Retrieve this many candidates and show ``top_k`` of them drawn at random (0: the
        #: top ``top_k``): the episodes of one task group, which send the same query, then see
        #: different lessons, so each lesson's outcome is measured apart from the others'.
        self.sample_from = sample_from
        #: Mixed into each reset's draw with the reset seed: envs of one group (the trainer
        #: gives each its slot) draw differently, and a replay draws the same.
        self.sample_salt = sample_salt
        if order not in ("random", "rotate"):
            raise ConfigurationError(f"order must be 'random' or 'rotate', got {order!r}")
        self.order = order
        self.same_task_only = same_task_only
        self.manager = manager
        self.top_k = top_k
        self.same_family_only = same_family_only
        self.query_fn = query_fn or default_query
        self.injected: list[dict[str, Any]] = []

    def _augment(self, info: dict[str, Any]) -> dict[str, Any]:
        info = dict(info)
        info["experience_ids"] = [e["id"] for e in self.injected]
        info["experiences"] = [dict(e) for e in self.injected]
        return info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed, options=options)
        self.injected = []
        if self.top_k > 0:
            family = info.get("env_family") if self.same_family_only else None
            k = max(self.top_k, self.sample_from)
            query = self.query_fn(observation, info)
            if self.same_task_only:
                task_id = str(info.get("task_id", ""))
                hits = self.manager.retrieve(query, k * SAME_TASK_WIDTH, family)
                hits = [h for h in hits if task_id in h.experience.source_task_ids][:k]
            else:
                hits = self.manager.retrieve(query, k, family)
            hits = self._shown(hits, seed)
            if hits:
                # Stored text was written by a model: keep the contract's printable text.
                self.injected = [
                    {"id": h.id, "text": printable_text(h.experience.text)} for h in hits
                ]
                if self.experiences_in_observation:
                    block = prompts.format_injection([h.experience for h in hits])
                    observation = printable_text(f"{block}\n\n{observation}")
        return observation, self._augment(info)

    def _shown(self, hits: list[Any], seed: int | None) -> list[Any]:
        """The ``top_k`` of the retrieved ``hits`` this reset shows, in rank order."""
        if len(hits) <= self.top_k:
            return hits
        if self.order == "rotate":
            start = random.Random(f"{seed}").randrange(len(hits)) + self.sample_salt * self.top_k
            keep = sorted({(start + j) % len(hits) for j in range(self.top_k)})
        else:
            draw = random.Random(f"{seed}/{self.sample_salt}")
            keep = sorted(draw.sample(range(len(hits)), self.top_k))
        return [hits[i] for i in keep]

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        return observation, reward, terminated, truncated, self._augment(info)
