"""An oracle WebShop agent: it reads the goal from ``info`` and buys the goal's product.

It searches for the goal product's name, pages through the results until the goal's ASIN
appears (falling back to the instruction as a query), opens it, clicks the option value that
best matches each goal option (exact, else the highest fuzzy token-set ratio), and buys.

Example:
    >>> from comprl_gym.envs.webshop import WebShopEnv
    >>> from comprl_gym.rollouts import run_episode
    >>> env = WebShopEnv(split="test")
    >>> run_episode(env, WebShopExpert(env), seed=0).score
    1.0
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from comprl_gym.envs.webshop.reward import token_set_ratio

_NON_WORD = re.compile(r"[^\w\s]+")
#: Result pages the expert looks through before it searches again.
MAX_RESULT_PAGES = 5


class WebShopExpert:
    """Scripted expert (``Agent`` protocol) for :class:`~comprl_gym.envs.webshop.WebShopEnv`."""

    def __init__(self, env: Any = None):
        self.env = env
        self._goal: dict[str, Any] = {}
        self._queries: list[str] = []
        self._pending_options: list[str] = []
        self._options_planned = False
        self._pages_seen = 0

    def reset(self, task: str, info: dict[str, Any]) -> None:
        """Read the goal; plan the queries and the options to click."""
        # Privileged: the goal is the env's (grader-side), never in the agent's info.
        self._goal = dict(self.env.unwrapped.goal) if self.env is not None else {}
        name = _NON_WORD.sub(" ", str(self._goal.get("name", ""))).lower()
        task_text = task.split(", and price lower than")[0].lower()
        self._queries = [" ".join(name.split()[:20]), _NON_WORD.sub(" ", task_text)]
        self._queries = [q for q in self._queries if q.strip()]
        self._pending_options = []
        self._options_planned = False
        self._pages_seen = 0

    def act(self, observation: str, info: dict[str, Any]) -> str:
        actions = list(info.get("admissible_actions") or [])
        asin = str(self._goal.get("asin", "")).lower()
        page = info.get("page", "search")
        if page == "search" or "search[<query>]" in actions:
            return self._search()
        if page == "results":
            if f"click[{asin}]" in actions:
                self._pending_options = self._plan_options(actions)
                return f"click[{asin}]"
            if "click[next >]" in actions and self._pages_seen < MAX_RESULT_PAGES - 1:
                self._pages_seen += 1
                return "click[next >]"
            self._pages_seen = 0
            return "click[back to search]"
        if page == "item":
            if not self._pending_options and not self._options_planned:
                self._pending_options = self._plan_options(actions)
            while self._pending_options:
                value = self._pending_options.pop(0)
                if f"click[{value}]" in actions:
                    return f"click[{value}]"
            return "click[buy now]"
        if page == "sub":
            return "click[< prev]"
        return "click[back to search]"

    # ---- helpers -----------------------------------------------------------------------------
    def _search(self) -> str:
        query = self._queries[0] if self._queries else "product"
        if len(self._queries) > 1:
            self._queries.append(self._queries.pop(0))
        self._pages_seen = 0
        return f"search[{query}]"

    def _plan_options(self, actions: list[str]) -> list[str]:
        """Option values to click on the item page, best match per goal option."""
        self._options_planned = True
        wanted = self._goal.get("goal_options") or []
        if isinstance(wanted, Mapping):
            return [str(v) for v in wanted.values()]
        plan = []
        for option in wanted:
            option = str(option).lower()
            names = [a[6:-1] for a in actions if a.startswith("click[")]
            if option in names:
                plan.append(option)
                continue
            scored = [(token_set_ratio(option, n), n) for n in names]
            if scored:
                score, best = max(scored)
                if score > 85:
                    plan.append(best)
                    continue
            plan.append(option)
        return plan
