"""ExperienceAugmentedEnv: give any comprl env access to the experience store.

* At reset, the top-k experiences for the task are injected above the first observation.
* The action ``search_and_ask[<question>]`` (or ``<knowledge_search_and_ask>question
  </knowledge_search_and_ask>`` anywhere in the action) asks the knowledge base: the manager
  retrieves, an optional refiner (the extractor) turns the hits into advice, and the answer
  comes back as the observation. The inner env does not move and the step costs nothing.
* A per-episode budget (default 2) bounds the questions; one over budget (or an empty one) is
  an invalid action: it counts as a step of the episode, so an agent that keeps asking is still
  truncated at the env's step limit.
* ``info`` gains ``experience_ids`` (every experience shown this episode) and
  ``search_and_ask_calls``; at the end of the episode the outcome is reported to the manager so
  each shown experience's uses and wins are updated.

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

import logging
import re
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from comprl_gym.core import ConfigurationError, invalid_action_message, printable_text
from comprl_gym.experience import prompts
from comprl_gym.experience.manager import ExperienceManager

logger = logging.getLogger(__name__)

_TAG = re.compile(
    r"<knowledge_search_and_ask>(.*?)</knowledge_search_and_ask>", re.DOTALL | re.IGNORECASE
)


class ExperienceAugmentedEnv(gym.Wrapper):
    """A gymnasium wrapper adding experience injection and the ``search_and_ask`` action.

    Args:
        env: any comprl env (the :class:`~comprl_gym.core.TextEnv` contract).
        manager: the :class:`ExperienceManager` to read from and report outcomes to.
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
    """

    def __init__(
        self,
        env: gym.Env,
        manager: ExperienceManager,
        inject_top_k: int = 3,
        search_budget: int = 2,
        search_top_k: int = 3,
        refiner: prompts.Refiner | None = None,
        report_outcomes: bool = True,
        same_family_only: bool = True,
        tool_instructions: bool = True,
        action_name: str = "search_and_ask",
        query_fn: Callable[[str, dict[str, Any]], str] | None = None,
    ):
        super().__init__(env)
        if inject_top_k < 0 or search_budget < 0 or search_top_k < 1:
            raise ConfigurationError(
                "inject_top_k and search_budget must be >= 0 and search_top_k >= 1"
            )
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", action_name):
            raise ConfigurationError(f"action_name must be an identifier, got {action_name!r}")
        self.manager = manager
        self.inject_top_k = inject_top_k
        self.search_budget = search_budget
        self.search_top_k = search_top_k
        self.refiner = refiner
        self.report_outcomes = report_outcomes
        self.same_family_only = same_family_only
        self.tool_instructions = tool_instructions
        self.action_name = action_name
        self.query_fn = query_fn or self._default_query
        self._bracket = re.compile(
            rf"(?<![A-Za-z0-9_]){re.escape(action_name)}\s*\[(.*)\]", re.DOTALL | re.IGNORECASE
        )
        self._experience_ids: list[int] = []
        self._calls = 0
        self._extra_steps = 0
        self._last_observation = ""
        self._last_info: dict[str, Any] = {}
        self._reported = True

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _default_query(observation: str, info: dict[str, Any]) -> str:
        return f"{info.get('task', '')}\n{observation[:1000]}".strip()

    def _family(self, info: dict[str, Any]) -> str | None:
        return info.get("env_family") if self.same_family_only else None

    def parse_search(self, action: Any) -> str | None:
        """The question if ``action`` is a search_and_ask call (possibly empty), else ``None``."""
        if not isinstance(action, str):
            return None
        tag = _TAG.search(action)
        if tag:
            return tag.group(1).strip()
        bracket = self._bracket.search(action)
        if bracket:
            return bracket.group(1).strip()
        return None

    def _augment(self, info: dict[str, Any]) -> dict[str, Any]:
        info = dict(info)
        info["experience_ids"] = list(self._experience_ids)
        info["search_and_ask_calls"] = self._calls
        info["search_budget_left"] = max(0, self.search_budget - self._calls)
        actions = info.get("admissible_actions")
        if actions is not None and self._calls < self.search_budget:
            info["admissible_actions"] = [*actions, f"{self.action_name}[<question>]"]
        return info

    def _show(self, ids: list[int]) -> None:
        for eid in ids:
            if eid not in self._experience_ids:
                self._experience_ids.append(eid)

    def _max_steps(self) -> int | None:
        limit = getattr(self.env.unwrapped, "max_steps", None)
        if limit is None and self.spec is not None:
            limit = self.spec.max_episode_steps
        return limit

    def _finish(self, info: dict[str, Any]) -> None:
        if self._reported:
            return
        self._reported = True
        if self.report_outcomes and self._experience_ids:
            try:
                self.manager.report_outcome(self._experience_ids, bool(info.get("won", False)))
            except Exception:
                logger.exception("could not report the episode outcome to the experience manager")

    # ------------------------------------------------------------------ gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed, options=options)
        self._experience_ids = []
        self._calls = 0
        self._extra_steps = 0
        self._reported = False
        parts = []
        if self.inject_top_k > 0:
            hits = self.manager.retrieve(
                self.query_fn(observation, info), self.inject_top_k, self._family(info)
            )
            if hits:
                self._show([h.id for h in hits])
                parts.append(prompts.format_injection([h.experience for h in hits]))
        if self.tool_instructions and self.search_budget > 0:
            parts.append(prompts.search_tool_instructions(self.search_budget, self.action_name))
        self._last_observation = observation
        self._last_info = info
        shown = "\n\n".join([*parts, observation]) if parts else observation
        return printable_text(shown), self._augment(info)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        question = self.parse_search(action)
        if question is None:
            observation, reward, terminated, truncated, info = self.env.step(action)
            self._last_observation, self._last_info = observation, info
            if not truncated and not terminated and self._extra_steps:
                truncated = self._over_limit(info)
            if terminated or truncated:
                self._finish(info)
            return observation, reward, terminated, truncated, self._augment(info)
        return self._search(action, question)

    def _over_limit(self, info: dict[str, Any]) -> bool:
        limit = self._max_steps()
        return limit is not None and int(info.get("step", 0)) + self._extra_steps >= limit

    def _search(self, action: str, question: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        info = dict(self._last_info)
        if not question or self._calls >= self.search_budget:
            reason = (
                "the question is empty"
                if question is not None and not question
                else (
                    f"the {self.action_name} budget ({self.search_budget} per episode) is used up"
                )
            )
            self._extra_steps += 1
            allowed = self._augment(info).get("admissible_actions")
            observation = (
                invalid_action_message(action, reason, allowed) + "\n\n" + self._last_observation
            )
            info["invalid_action"] = True
            truncated = self._over_limit(info)
            if truncated:
                self._finish(info)
            return printable_text(observation), 0.0, False, truncated, self._augment(info)
        self._calls += 1
        context = {
            "task": info.get("task", ""),
            "observation": self._last_observation,
            "env_family": info.get("env_family"),
        }
        answer, ids = self.manager.search_and_ask(
            question, self.search_top_k, self._family(info), self.refiner, context
        )
        self._show(ids)
        left = self.search_budget - self._calls
        observation = (
            f"Knowledge base answer:\n{answer}\n\n({left} {self.action_name} call(s) left this episode.)\n\n"
            f"Current observation:\n{self._last_observation}"
        )
        info["invalid_action"] = False
        info = self._augment(info)
        info["search_and_ask"] = {"question": question, "ids": ids, "answer": answer}
        # Model-written text reaches the agent here without passing TextEnv.step.
        return printable_text(observation), 0.0, False, False, info

    def close(self) -> None:
        """Close the inner env (the manager is shared and stays open)."""
        super().close()
