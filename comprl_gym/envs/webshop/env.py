"""``comprl/WebShop-v0``: WebShop's text shopping environment on the :class:`TextEnv` contract.

The agent reads an instruction ("i am looking for ..., and price lower than 40.00 dollars"),
searches (``search[query]``), pages through the top 50 results (10 a page, ``click[next >]``,
``click[< prev]``, ``click[back to search]``), opens a product (``click[<asin>]``), picks options
(``click[<value>]``), may read its ``description``/``features``/``reviews``/``attributes``
sub-pages (``click[< prev]`` returns), and ends the episode with ``click[buy now]``, which
scores the purchase with the original reward (:mod:`.reward`). Pages, clickables and both
observation modes follow ``web_agent_site/envs/web_agent_text_env.py``.

Where the original silently ignores an action (an unknown clickable, ``click[]``, a malformed
action), this env answers with an invalid-action observation listing what is clickable and
leaves the page as it was. Like the original, ``search[...]`` works from every page, although
only the search page lists it; queries with HTML tags or longer than
:attr:`WebShopConfig.max_query_chars` are refused.

Example:
    >>> import gymnasium as gym
    >>> import comprl_gym
    >>> env = gym.make("comprl/WebShop-v0", split="test")
    >>> obs, info = env.reset(seed=0)
    >>> obs.startswith("WebShop [SEP] Instruction: [SEP] ")
    True
    >>> obs, reward, terminated, truncated, info = env.step("search[" + env.unwrapped.goal["query"] + "]")
    >>> "click[next >]" in info["admissible_actions"]
    True
"""

from __future__ import annotations

import functools
import logging
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from comprl_gym.core import ConfigurationError, TextEnv, Transition, invalid_action_message
from comprl_gym.envs.webshop import pages
from comprl_gym.envs.webshop.catalog import Catalog, load_catalog, split_indices
from comprl_gym.envs.webshop.generator import DEFAULT_NUM_PRODUCTS, generated_data_dir
from comprl_gym.envs.webshop.reward import get_reward
from comprl_gym.envs.webshop.search import SEARCH_RETURN_N, SearchEngine

logger = logging.getLogger(__name__)

OBSERVATION_MODES = ("text", "text_rich")
_ACTION_PATTERN = re.compile(r"(.+)\[(.+)\]", re.DOTALL)
_HTML_TAG = re.compile(r"<\s*/?\s*[a-zA-Z!][^<>]*>")
#: The original's debugging search prefixes: random, attribute, category, query.
_SPECIAL_PREFIXES = ("<r>", "<a>", "<c>", "<q>")


@dataclass
class WebShopConfig:
    """Settings of one WebShop env.

    Attributes:
        split: goal index range: ``test`` 0-500, ``valid`` 500-1500, ``train`` 1500-end (the
            original's ranges; catalogs with at most 1,500 goals use every goal for all).
        observation_mode: ``text`` (``[SEP]``-joined) or ``text_rich`` (``[button]`` markup).
        max_steps: steps before the episode is truncated.
        data_dir: folder with the official files; ``None`` reads ``WEBSHOP_DATA`` and falls
            back to the generated catalog.
        full_catalog: in ``data_dir``, load ``items_shuffle.json`` (all products) instead of
            ``items_shuffle_1000.json``.
        human_goals: goals from human instructions (``items_human_ins.json``) or synthetic ones.
        num_products: keep only the first ``num_products`` products of the file.
        show_attrs: show the ``Attributes`` button on item pages (the original's ``show_attrs``).
        max_query_chars: longest accepted search query.
        catalog_seed: seed of the price draws for ranged prices and the goals' price bounds.
    """

    split: str = "train"
    observation_mode: str = "text"
    max_steps: int = 15
    data_dir: str | None = None
    full_catalog: bool = False
    human_goals: bool = True
    num_products: int | None = None
    show_attrs: bool = False
    max_query_chars: int = 500
    catalog_seed: int = 0


@dataclass
class _Session:
    """What the original's server keeps per session."""

    goal: dict[str, Any]
    page_name: pages.PageName = "search"
    keywords: list[str] | None = None
    page: int = 1
    asin: str | None = None
    asins: set[str] = field(default_factory=set)
    options: dict[str, str] = field(default_factory=dict)
    sub: str = ""
    results: list[dict[str, Any]] = field(default_factory=list)
    reward: float | None = None


@functools.lru_cache(maxsize=4)
def _load(
    data_dir: str, full: bool, human_goals: bool, num_products: int | None, seed: int
) -> tuple[Catalog, SearchEngine]:
    catalog = load_catalog(
        data_dir, full=full, human_goals=human_goals, num_products=num_products, seed=seed
    )
    return catalog, SearchEngine(catalog.products)


class WebShopEnv(TextEnv):
    """WebShop text env (see the module docstring); keyword arguments as :class:`WebShopConfig`."""

    env_family: ClassVar[str] = "webshop"

    def __init__(self, render_mode: str | None = None, **kwargs: Any):
        try:
            self.config = WebShopConfig(**kwargs)
        except TypeError as exc:
            raise ConfigurationError(f"WebShopEnv: {exc}") from exc
        super().__init__(max_steps=self.config.max_steps, render_mode=render_mode)
        if self.config.observation_mode not in OBSERVATION_MODES:
            raise ConfigurationError(
                f"observation_mode must be one of {OBSERVATION_MODES}, "
                f"got {self.config.observation_mode!r}"
            )
        data_dir = self.config.data_dir or os.environ.get("WEBSHOP_DATA")
        if data_dir is None:
            data_dir = str(generated_data_dir(DEFAULT_NUM_PRODUCTS))
        self.data_dir = Path(data_dir)
        self.catalog, self.search_engine = _load(
            str(self.data_dir),
            self.config.full_catalog,
            self.config.human_goals,
            self.config.num_products,
            self.config.catalog_seed,
        )
        if not self.catalog.goals:
            raise ConfigurationError(f"the WebShop catalog in {self.data_dir} has no goals")
        self.goal_indices = split_indices(self.config.split, len(self.catalog.goals))
        self._session: _Session | None = None
        self._page: pages.Page | None = None
        self._rng = random.Random(0)

    # ---- TextEnv hooks ----------------------------------------------------------------------
    def _reset_task(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._rng = random.Random(seed)
        indices = self.goal_indices
        if "split" in options:
            indices = split_indices(str(options["split"]), len(self.catalog.goals))
        index = options.get("goal_index", options.get("task_id"))
        if index is None:
            index = indices[self._rng.randrange(len(indices))]
        try:
            index = int(index)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"task_id/goal_index must be an int, got {index!r}") from exc
        if not 0 <= index < len(self.catalog.goals):
            raise ConfigurationError(f"goal index {index} outside 0..{len(self.catalog.goals) - 1}")
        goal = self.catalog.goals[index]
        self.task = goal["instruction_text"]
        self.task_id = str(index)
        self._session = _Session(goal=goal)
        self._show(pages.search_page(self.task))
        # The goal (target product, its attributes and options) is the grader's: it is not
        # in ``info``, which an agent or a served client reads (``goal`` holds it).
        return self._observation(), {"page": "search"}

    def _step_task(self, action: str) -> Transition:
        session = self._require_session()
        if session.page_name == "done":
            return self._invalid(action, "the episode is over; call reset()")
        match = _ACTION_PATTERN.match(action.strip())
        if match is None:
            return self._invalid(action, "actions look like search[query] or click[value]")
        name, argument = match.group(1).strip().lower(), match.group(2).strip().lower()
        if name == "search":
            return self._search_action(action, argument)
        if name == "click":
            return self._click_action(action, argument)
        return self._invalid(action, f"unknown action {name!r}; use search[...] or click[...]")

    def admissible_actions(self) -> list[str]:
        if self._page is None or self._page.name == "done":
            return []
        actions = ["search[<query>]"] if self._page.has_search_bar else []
        actions += [f"click[{name}]" for name in self._page.clickables() if name != "search"]
        return actions

    def render_text(self) -> str:
        return self._observation() if self._page is not None else ""

    # ---- actions -----------------------------------------------------------------------------
    def _search_action(self, action: str, query: str) -> Transition:
        if len(query) > self.config.max_query_chars:
            return self._invalid(
                action, f"the query is longer than {self.config.max_query_chars} characters"
            )
        first = query.split(" ")[0]
        if _HTML_TAG.search(query) and not (
            first in _SPECIAL_PREFIXES and not _HTML_TAG.search(query[len(first) :])
        ):
            return self._invalid(
                action, "search queries are plain words, not HTML or <placeholders>"
            )
        if not query.strip():
            return self._invalid(action, "the search query is empty")
        session = self._require_session()
        session.keywords = query.split(" ")
        session.results = self._top_products(session.keywords)
        return self._results(1)

    def _click_action(self, action: str, name: str) -> Transition:
        session = self._require_session()
        assert self._page is not None
        clickables = self._page.clickables()
        if name == "search" or name not in clickables:
            return self._invalid(action, f"{name!r} is not clickable on this page")
        clickable = clickables[name]
        if name == pages.END_BUTTON.lower():
            return self._buy()
        if name == pages.BACK_TO_SEARCH.lower():
            goal = session.goal
            self._session = _Session(goal=goal)
            return self._show(pages.search_page(self.task))
        if name == pages.NEXT_PAGE.lower() and session.page_name == "results":
            return self._results(session.page + 1)
        if name == pages.PREV_PAGE.lower() and session.page_name == "results":
            return self._results(session.page - 1)
        if name == pages.PREV_PAGE.lower() and session.page_name == "sub":
            return self._item()
        if name == pages.PREV_PAGE.lower() and session.page_name == "item":
            return self._results(session.page)
        subs = {s.lower(): s for s in pages.SUB_PAGES}
        if name in subs:
            session.page_name, session.sub = "sub", subs[name]
            assert session.asin is not None
            product = self.catalog.by_asin[session.asin]
            return self._show(pages.sub_page(self.task, product, session.sub))
        if clickable.kind == "link":
            session.asin = name.upper()
            session.asins.add(session.asin)
        elif clickable.kind == "option":
            session.options[clickable.group.lower()] = name
        return self._item()

    # ---- pages -------------------------------------------------------------------------------
    def _top_products(self, keywords: list[str]) -> list[dict[str, Any]]:
        products = self.catalog.products
        head = keywords[0]
        if head == "<r>":
            return self._rng.sample(products, k=min(SEARCH_RETURN_N, len(products)))
        if head == "<a>":
            asins = self.catalog.attribute_to_asins.get(" ".join(keywords[1:]).strip(), set())
            return [p for p in products if p["asin"] in asins]
        if head == "<c>":
            category = keywords[1].strip() if len(keywords) > 1 else ""
            return [p for p in products if p["category"] == category]
        if head == "<q>":
            query = " ".join(keywords[1:]).strip()
            return [p for p in products if p["query"] == query]
        asins = self.search_engine.search(" ".join(keywords), k=SEARCH_RETURN_N)
        return [self.catalog.by_asin[a] for a in asins if a in self.catalog.by_asin]

    def _results(self, page: int) -> Transition:
        session = self._require_session()
        session.page_name, session.page = "results", page
        session.asin, session.options = None, {}
        shown = session.results[(page - 1) * pages.PRODUCT_WINDOW : page * pages.PRODUCT_WINDOW]
        return self._show(
            pages.results_page(
                self.task, shown, page, len(session.results), frozenset(session.asins)
            )
        )

    def _item(self) -> Transition:
        session = self._require_session()
        assert session.asin is not None
        session.page_name = "item"
        product = self.catalog.by_asin[session.asin]
        page = pages.item_page(self.task, product, session.options, self.config.show_attrs)
        return self._show(page)

    def _buy(self) -> Transition:
        session = self._require_session()
        assert session.asin is not None
        product = self.catalog.by_asin[session.asin]
        price = self.catalog.prices[session.asin]
        reward, parts = get_reward(product, session.goal, price, session.options)
        session.page_name, session.reward = "done", reward
        self._page = pages.done_page(reward, session.asin, session.options)
        won = reward >= 1.0
        return Transition(
            observation=self._observation(),
            reward=reward,
            terminated=True,
            won=won,
            score=reward,
            info={
                "page": "done",
                "reward_parts": parts,
                "purchased_asin": session.asin,
                "purchased_options": dict(session.options),
                "purchased_price": price,
            },
        )

    # ---- helpers -----------------------------------------------------------------------------
    def _show(self, page: pages.Page) -> Transition:
        self._page = page
        return Transition(observation=self._observation(), score=0.0, info={"page": page.name})

    def _observation(self) -> str:
        assert self._page is not None
        if self.config.observation_mode == "text":
            return self._page.text()
        return self._page.text_rich()

    def _invalid(self, action: str, reason: str) -> Transition:
        page_name = self._page.name if self._page else "search"
        return Transition(
            observation=invalid_action_message(action, reason, self.admissible_actions()),
            score=self._score,
            invalid_action=True,
            info={"page": page_name},
        )

    @property
    def goal(self) -> dict[str, Any]:
        """The current episode's goal as the catalog holds it (target ``asin``, ``query``,
        ``attributes``, ``goal_options``, ``price_upper``...): grader-side, for the expert and
        for checks; never shown to the agent."""
        return dict(self._require_session().goal)

    def _require_session(self) -> _Session:
        if self._session is None:
            raise ConfigurationError("call reset() before step()")
        return self._session
