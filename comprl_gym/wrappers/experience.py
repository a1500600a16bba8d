"""ExperienceAugmentedEnv: give any comprl env access to the experience store.

It composes three single-purpose wrappers, innermost first:

* :class:`~comprl_gym.wrappers.ExperienceInjection`: the top-k experiences for the task above
  the first observation (``info["experience_ids"]``, ``info["experiences"]``);
* :class:`~comprl_gym.wrappers.SearchAndAskAction`: the ``search_and_ask[<question>]`` action
  (or the ``<knowledge_search_and_ask>`` tag), answered by the knowledge base without moving
  the inner env, within a per-episode budget (``info["search_and_ask_calls"]``);
* :class:`~comprl_gym.wrappers.OutcomeReporting`: at the end of the episode each experience
  shown is credited with one use and, when won, one win.

Example:
    >>> import tempfile, gymnasium as gym, comprl_gym
    >>> from comprl_gym.experience import ExperienceManager
    >>> from comprl_gym.wrappers import ExperienceAugmentedEnv
    >>> manager = ExperienceManager(tempfile.mkdtemp())
    >>> _ = manager.add(["## Title: Stairs\\n## Description: rooms\\n## Content: walk to the '>'"], env_family="minihack")
    >>> env = ExperienceAugmentedEnv(gym.make("comprl/MiniHack-Room-5x5-v0"), manager)
    >>> obs, info = env.reset(seed=0)
    >>> len(info["experience_ids"]), info["search_and_ask_calls"]
    (1, 0)
    >>> obs, reward, terminated, truncated, info = env.step("search_and_ask[where is the exit?]")
    >>> info["search_and_ask_calls"], info["step"]
    (1, 0)
    >>> env.close(); manager.close()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from comprl_gym.experience import prompts
from comprl_gym.experience import search_and_ask as protocol
from comprl_gym.experience.access import ExperienceAccess
from comprl_gym.wrappers.injection import ExperienceInjection
from comprl_gym.wrappers.outcomes import OutcomeReporting
from comprl_gym.wrappers.search import SearchAndAskAction


class ExperienceAugmentedEnv(gym.Wrapper):
    """Experience injection, the ``search_and_ask`` action and outcome reporting, together.

    Args:
        env: any comprl env (the :class:`~comprl_gym.core.TextEnv` contract).
        manager: the store to read from and report outcomes to: an in-process
            :class:`~comprl_gym.experience.ExperienceManager`, or a client of the shared
            experience service (:mod:`comprl_gym.distributed.experience_service`) when several
            processes share one store.
        inject_top_k: experiences injected into the first observation (0 = none).
        search_budget: ``search_and_ask`` calls allowed per episode (0 disables the action).
        search_top_k: experiences retrieved per question.
        refiner: ``refiner(question, experiences, context) -> str`` (e.g. the extractor via
            :func:`comprl_gym.experience.prompts.make_llm_refiner`); without one the answer
            lists the retrieved experiences.
        report_outcomes: report won/lost to the manager at the end of each episode.
        same_family_only: retrieve only experiences of the env's family (and family-less ones).
        tool_instructions: explain the search action in the first observation.
        action_name: the bracket action's name.
        query_fn: ``query_fn(observation, info) -> str``, the injection query (default: the task
            and the start of the first observation).
        experiences_in_observation: show the injected experiences above the first observation
            too (turn off when the agent puts ``info["experiences"]`` in its system prompt, as
            the trainers' :class:`~comprl_gym.agents.llm_agent.LLMAgent` does).
    """

    def __init__(
        self,
        env: gym.Env,
        manager: ExperienceAccess,
        inject_top_k: int = 3,
        search_budget: int = 2,
        search_top_k: int = 3,
        refiner: prompts.Refiner | None = None,
        report_outcomes: bool = True,
        same_family_only: bool = True,
        tool_instructions: bool = True,
        action_name: str = protocol.ACTION_NAME,
        query_fn: Callable[[str, dict[str, Any]], str] | None = None,
        experiences_in_observation: bool = True,
        sample_from: int = 0,
        sample_salt: int = 0,
        inject_order: str = "random",
        same_task_only: bool = False,
    ):
        self.injection = ExperienceInjection(
            env,
            manager,
            inject_top_k,
            same_family_only,
            query_fn,
            experiences_in_observation,
            sample_from,
            sample_salt,
            inject_order,
            same_task_only,
        )
        self.search = SearchAndAskAction(
            self.injection,
            manager,
            search_budget,
            search_top_k,
            refiner,
            same_family_only,
            tool_instructions,
            action_name,
        )
        outer: gym.Env = OutcomeReporting(self.search, manager) if report_outcomes else self.search
        super().__init__(outer)
        self.manager = manager

    def parse_search(self, action: Any) -> str | None:
        """The question if ``action`` is a search_and_ask call (possibly empty), else ``None``."""
        return self.search.syntax.parse(action)

    def close(self) -> None:
        """Close the inner env (the manager is shared and stays open)."""
        super().close()
