"""SearchAndAskAction: the ``search_and_ask`` action, answered by the knowledge base.

An action that is a ``search_and_ask`` call (either spelling of
:mod:`comprl_gym.experience.search_and_ask`) does not reach the inner env: the manager
retrieves, an optional refiner (the extractor) turns the hits into advice, and the answer comes
back as the observation at no reward. A per-episode budget bounds the questions; one over budget
(or an empty one) is an invalid action that counts as a step toward the env's step limit, so an
agent that keeps asking is still truncated. The tool is explained once, in the first
observation.

``info`` gains ``search_and_ask_calls``, ``search_budget_left`` and, after an answer,
``search_and_ask`` (question, ids, answer); the ids retrieved join ``experience_ids``.

Example:
    >>> import tempfile, gymnasium as gym, comprl_gym
    >>> from comprl_gym.experience import ExperienceManager
    >>> from comprl_gym.wrappers import SearchAndAskAction
    >>> manager = ExperienceManager(tempfile.mkdtemp())
    >>> [eid] = manager.add(["## Title: Stairs\\n## Description: rooms\\n## Content: walk to the '>'"], env_family="minihack")
    >>> env = SearchAndAskAction(gym.make("comprl/MiniHack-Room-5x5-v0"), manager, budget=1)
    >>> obs, info = env.reset(seed=0)
    >>> obs.startswith("You may consult a knowledge base"), info["search_budget_left"]
    (True, 1)
    >>> obs, reward, terminated, truncated, info = env.step("search_and_ask[where is the exit?]")
    >>> obs.startswith("Knowledge base answer"), info["step"], info["experience_ids"] == [eid]
    (True, 0, True)
    >>> env.close(); manager.close()
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from comprl_gym.core import ConfigurationError, invalid_action_message, printable_text
from comprl_gym.experience import prompts
from comprl_gym.experience import search_and_ask as protocol
from comprl_gym.experience.access import ExperienceAccess


class SearchAndAskAction(gym.Wrapper):
    """Answer ``search_and_ask`` calls from the manager without moving the inner env.

    Args:
        env: any comprl env (possibly already injecting experiences).
        manager: the knowledge base.
        budget: calls allowed per episode (0: every call is an invalid action).
        top_k: experiences retrieved per question.
        refiner: ``refiner(question, experiences, context) -> str``; without one the answer
            lists the retrieved experiences.
        same_family_only: retrieve only the env's family (and family-less experiences).
        tool_instructions: explain the action in the first observation.
        action_name: the bracket action's name.
    """

    def __init__(
        self,
        env: gym.Env,
        manager: ExperienceAccess,
        budget: int = 2,
        top_k: int = 3,
        refiner: prompts.Refiner | None = None,
        same_family_only: bool = True,
        tool_instructions: bool = True,
        action_name: str = protocol.ACTION_NAME,
    ):
        super().__init__(env)
        if budget < 0 or top_k < 1:
            raise ConfigurationError("search_budget must be >= 0 and search_top_k >= 1")
        self.manager = manager
        self.budget = budget
        self.top_k = top_k
        self.refiner = refiner
        self.same_family_only = same_family_only
        self.tool_instructions = tool_instructions
        self.syntax = protocol.SearchAndAskSyntax(action_name)
        self.calls = 0
        self._found: list[int] = []
        self._extra_steps = 0
        self._last_observation = ""
        self._last_info: dict[str, Any] = {}

    @property
    def action_name(self) -> str:
        return self.syntax.action_name

    def _augment(self, info: dict[str, Any]) -> dict[str, Any]:
        info = dict(info)
        info["experience_ids"] = list(
            dict.fromkeys([*info.get("experience_ids", []), *self._found])
        )
        info["search_and_ask_calls"] = self.calls
        info["search_budget_left"] = max(0, self.budget - self.calls)
        actions = info.get("admissible_actions")
        if actions is not None and self.calls < self.budget:
            info["admissible_actions"] = [*actions, self.syntax.template]
        return info

    def _over_limit(self, info: dict[str, Any]) -> bool:
        """Whether inner steps plus invalid calls reached the env's step limit."""
        limit = getattr(self.env.unwrapped, "max_steps", None)
        if limit is None and self.spec is not None:
            limit = self.spec.max_episode_steps
        return limit is not None and int(info.get("step", 0)) + self._extra_steps >= limit

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed, options=options)
        self.calls, self._found, self._extra_steps = 0, [], 0
        self._last_observation, self._last_info = observation, info
        if self.tool_instructions and self.budget > 0:
            observation = f"{protocol.instructions(self.budget, self.action_name)}\n\n{observation}"
        return observation, self._augment(info)

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        question = self.syntax.parse(action)
        if question is None:
            observation, reward, terminated, truncated, info = self.env.step(action)
            self._last_observation, self._last_info = observation, info
            if not (terminated or truncated) and self._extra_steps:
                truncated = self._over_limit(info)
            return observation, reward, terminated, truncated, self._augment(info)
        if not question or self.calls >= self.budget:
            return self._refuse(action, question)
        return self._answer(question)

    def _refuse(self, action: str, question: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        reason = (
            "the question is empty"
            if not question
            else f"the {self.action_name} budget ({self.budget} per episode) is used up"
        )
        self._extra_steps += 1
        info = dict(self._last_info)
        allowed = self._augment(info).get("admissible_actions")
        observation = (
            invalid_action_message(action, reason, allowed) + "\n\n" + self._last_observation
        )
        info["invalid_action"] = True
        return printable_text(observation), 0.0, False, self._over_limit(info), self._augment(info)

    def _answer(self, question: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.calls += 1
        info = dict(self._last_info)
        context = {
            "task": info.get("task", ""),
            "observation": self._last_observation,
            "env_family": info.get("env_family"),
        }
        family = info.get("env_family") if self.same_family_only else None
        answer, ids = self.manager.search_and_ask(
            question, self.top_k, family, self.refiner, context
        )
        self._found.extend(i for i in ids if i not in self._found)
        observation = protocol.answer_observation(
            answer, self.budget - self.calls, self._last_observation, self.action_name
        )
        info["invalid_action"] = False
        info = self._augment(info)
        info["search_and_ask"] = {"question": question, "ids": ids, "answer": answer}
        # Model-written text reaches the agent here without passing TextEnv.step.
        return printable_text(observation), 0.0, False, False, info
