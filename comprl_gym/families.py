"""What an env family tells the rest of the package: one :class:`FamilySpec` per family.

Each family folder (``comprl_gym/envs/<family>/``) exports ``SPEC``: its gymnasium ids, its
expert agent, the actor's action grammar, the extractor's focus and its leaderboard label.
Registration, the actor and extractor prompts, ``make_agent("expert", env)`` and the
leaderboard all read the specs, so adding a family is one new folder plus one line in
:data:`FAMILY_MODULES` (or, for a family that lives in another package, one
call to :func:`comprl_gym.registration.add_family`).

Everything here is light: entry points and experts are ``"module:Name"`` strings, so reading
a spec imports no engine (NetHack, TextWorld, spaCy, swebench) until an env is made.

Example:
    >>> spec = family_spec("webshop")
    >>> spec.label, spec.expert
    ('WebShop', 'comprl_gym.envs.webshop.expert:WebShopExpert')
    >>> [entry.env_id for entry in spec.entries]
    ['comprl/WebShop-v0']
    >>> family_spec("no-such-family") is None
    True
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from comprl_gym.core import ConfigurationError
from comprl_gym.lessons.core import VERDICTS, FamilyLessons, LessonStem, LessonVerdict
from comprl_gym.utils import load_object


@dataclass(frozen=True)
class EnvEntry:
    """One registered id: where it lives, how it is configured, what it is."""

    env_id: str
    entry_point: str
    description: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: The family's name, filled in by the :class:`FamilySpec` that lists the entry (written
    #: once, as ``FamilySpec.name``).
    family: str = ""


@dataclass(frozen=True)
class ValidationProfile:
    """What a family tells ``comprl-gym validate`` about itself (its spec's
    :attr:`FamilySpec.validation`; :mod:`comprl_gym.evaluation.validate` runs the checks).

    Attributes:
        seeds_vary: different seeds are meant to give different first observations.
        expert_floor: the share of seeds on which the expert must reach full reward (1.0: all).
        expert_floor_reason: why the floor is below 1 (printed in the report).
        noop_actions: "doing nothing", played in a cycle until the episode ends.
        solution_texts: ``(env, info) -> texts`` after ``reset``: what must never be shown.
        expert: an agent factory ``env -> Agent`` instead of the family's expert.
    """

    seeds_vary: bool = True
    expert_floor: float = 1.0
    expert_floor_reason: str = ""
    noop_actions: tuple[str, ...] = ("",)
    solution_texts: Callable[[Any, dict[str, Any]], list[str]] | None = None
    expert: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class FamilySpec:
    """Everything the package needs to know about one env family.

    Attributes:
        name: the family's ``info["env_family"]`` (``TextEnv.env_family``).
        label: its column header on the leaderboard.
        entries: its gymnasium ids (entry points as ``"module:Class"`` strings).
        expert: its expert agent as ``"module:Class"``; the class takes the env as its only
            argument. Empty when the family has none.
        action_grammar: what the family's actions look like, for the actor's system prompt.
        extractor_focus: who the extractor is and which lessons it looks for in this family.
        lessons: what the family knows about lessons (:class:`~comprl_gym.lessons.core.FamilyLessons`:
            its judge, stem, fixed lessons, scripted memories, reading examples and probe
            episodes); a family without any leaves it out.
        suite_content: ``"module:function"`` called as ``f(seeds, env_kwargs, make_env)``
            (``make_env()`` builds the env with ``env_kwargs``; close what you make) that
            returns, as JSON-able hashes, what decides what the family plays on those task
            seeds beyond the suite's definition (generated levels, catalogs, game files, the
            first observations: :func:`first_observations`). A versioned suite's content
            hash is made of it. Empty: the first observations alone.
        suite_engines: the packages whose versions decide what the family plays; their
            installed versions join the suite content.
        missing_data: ``"module:function"`` called as ``f(env_kwargs)`` that returns ``""``
            when the data those env arguments play is here, else a sentence saying what is
            missing and how to give it (a suite run refuses to start with it). Empty: the
            family needs no data beyond the package.
        validation: what ``comprl-gym validate`` is told about the family's ids.
        validation_by_id: the profiles of ids that differ from :attr:`validation` (replacing
            it), e.g. fixed layouts whose seeds do not vary.
        held_out_split: the held-out pool (the env's ``split`` argument) a stream or an
            evaluation plays when none is named; empty: the family has no pools.
        training_split: the pool training draws from, which the env plays when no ``split``
            is given to it (a run that recorded no split played it).
    """

    name: str
    label: str
    entries: tuple[EnvEntry, ...]
    expert: str
    action_grammar: str
    extractor_focus: str
    lessons: FamilyLessons = field(default_factory=FamilyLessons)
    suite_content: str = ""
    suite_engines: tuple[str, ...] = ()
    missing_data: str = ""
    validation: ValidationProfile = field(default_factory=ValidationProfile)
    validation_by_id: Mapping[str, ValidationProfile] = field(default_factory=dict)
    held_out_split: str = ""
    training_split: str = ""

    def stem_for(self, task_id: str) -> LessonStem | None:
        """The stem of a lesson about ``task_id`` (``lessons.stem``), or ``None``."""
        return None if self.lessons.stem is None else self.lessons.stem(task_id)

    def judge(self, text: str) -> LessonVerdict | None:
        """``lessons.judge``'s verdict on ``text``, or ``None`` when the family has no judge."""
        return None if self.lessons.judge is None else self.lessons.judge(text)

    def fixed_lesson(self, kind: str, task_id: Any) -> str:
        """The fixed lesson of ``kind`` about ``task_id`` (``lessons.fixed``); a
        :class:`~comprl_gym.core.ConfigurationError` naming the family for a kind it lacks."""
        if kind not in self.lessons.fixed:
            raise ConfigurationError(
                f"family {self.name!r} has no fixed lesson {kind!r} "
                f"(it has: {', '.join(self.lessons.fixed) or 'none'})"
            )
        return self.lessons.fixed[kind](task_id)

    def stream_memory(self, name: str, seed: int) -> Any:
        """A fresh scripted memory called ``name`` for the stream of ``seed``
        (``lessons.memories``); a :class:`~comprl_gym.core.ConfigurationError` naming the
        family for a name it lacks."""
        if name not in self.lessons.memories:
            raise ConfigurationError(
                f"family {self.name!r} has no scripted memory {name!r} "
                f"(it has: {', '.join(self.lessons.memories) or 'none'})"
            )
        return self.lessons.memories[name](seed)

    def content_of(
        self, seeds: list[int], env_kwargs: dict[str, Any], make_env: Callable[[], Any]
    ) -> dict[str, Any]:
        """What decides what the family plays on ``seeds`` (:attr:`suite_content`)."""
        if self.suite_content:
            return load_object(self.suite_content)(seeds, env_kwargs, make_env)
        env = make_env()
        try:
            return {"first_observations": first_observations(env, seeds)}
        finally:
            env.close()

    def data_missing(self, env_kwargs: dict[str, Any]) -> str:
        """What data ``env_kwargs`` would play that is not here (:attr:`missing_data`), or ``""``."""
        return load_object(self.missing_data)(env_kwargs) if self.missing_data else ""

    def validation_for(self, env_id: str) -> ValidationProfile:
        """The validation profile of ``env_id``: its own, else the family's."""
        return self.validation_by_id.get(env_id, self.validation)

    def __post_init__(self) -> None:
        strays = [e.env_id for e in self.entries if e.family not in ("", self.name)]
        if strays:
            raise ConfigurationError(f"family {self.name!r} lists ids of another family: {strays}")
        entries = tuple(replace(e, family=self.name) for e in self.entries)
        object.__setattr__(self, "entries", entries)


@dataclass(frozen=True)
class Pool:
    """The task pool a run plays: its ``split``, whether it is held out from training, and
    whether it was ``"given"`` (a ``split`` argument) or the family's held-out ``"default"``.
    """

    split: str
    held_out: bool
    chosen: str

    def label(self) -> str:
        """``test (held out)`` or ``train (training pool)``."""
        return f"{self.split} ({'held out' if self.held_out else 'training pool'})"


def env_pool(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> Pool | None:
    """The pool ``env_id`` plays with ``env_kwargs`` once :func:`held_out_kwargs` has chosen
    it; ``None`` for a family without pools.

    Example:
        >>> env_pool("comprl/Memory-Fork-v0", {"split": "train"})
        Pool(split='train', held_out=False, chosen='given')
        >>> env_pool("comprl/Memory-Fork-v0", {}).label()
        'test (held out)'
        >>> env_pool("comprl/MiniHack-Room-5x5-v0", {}) is None
        True
    """
    return _pool(env_id, env_kwargs, unsplit="default")


def recorded_pool(env_id: str, env_kwargs: Mapping[str, Any] | None) -> Pool | None:
    """The pool a finished run played, from the ``env_kwargs`` it recorded: without a
    ``split`` there, the env's own default, the training pool (runs before held-out defaults
    recorded none)."""
    return _pool(env_id, env_kwargs, unsplit="env")


def _pool(env_id: str, env_kwargs: Mapping[str, Any] | None, unsplit: str) -> Pool | None:
    """The pool of ``env_kwargs``' ``split``; without one, the family's held-out pool
    (``unsplit="default"``: what a run plays now) or its training pool (``"env"``: what a run
    that recorded no split played)."""
    spec = _family_of(env_id)
    if spec is None or not spec.held_out_split:
        return None
    given = (env_kwargs or {}).get("split")
    fallback = spec.held_out_split if unsplit == "default" else spec.training_split
    split = str(given) if given is not None else fallback
    return Pool(split, split != spec.training_split, "given" if given is not None else unsplit)


def held_out_kwargs(env_id: str, env_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``env_kwargs`` with the family's held-out pool as ``split`` where none is named: an
    evaluation measures what was not trained on unless told otherwise.

    Example:
        >>> held_out_kwargs("comprl/Memory-Fork-v0", {"moves": "open"})
        {'moves': 'open', 'split': 'test'}
        >>> held_out_kwargs("comprl/Memory-Fork-v0", {"split": "train"})
        {'split': 'train'}
    """
    pool = env_pool(env_id, env_kwargs)
    if pool is None or "split" in env_kwargs:
        return dict(env_kwargs)
    return {**env_kwargs, "split": pool.split}


def _family_of(env_id: str) -> FamilySpec | None:
    for spec in family_specs().values():
        if any(entry.env_id == env_id for entry in spec.entries):
            return spec
    return None


def first_observations(env: Any, seeds: Iterable[int]) -> str:
    """One SHA-256 over what every seed starts with: its task, task id and first observation
    (part of a family's :attr:`FamilySpec.suite_content`)."""
    digest = hashlib.sha256()
    for seed in seeds:
        obs, info = env.reset(seed=seed)
        digest.update(f"{seed}\0{info['task_id']}\0{info['task']}\0{obs}\0".encode())
    return digest.hexdigest()


def verdict_counts(spec: FamilySpec, texts: Iterable[str]) -> dict[str, int]:
    """``texts`` (lessons) counted by the verdict of ``spec``'s judge, plus ``no_task``: those
    that name none of the family's tasks. Whether an extractor writes the one fact a later
    visit needs, independent of whether the actor then reads it.

    Example:
        >>> verdict_counts(family_spec("memory"), [
        ...     "In the Vault of Marrow the staircase down is at the end of the west branch.",
        ...     "In the Vault of Marrow the staircase down is at the end of the east branch.",
        ...     "Dark halls: keep to the walls.",
        ... ])
        {'right': 1, 'wrong': 1, 'both': 0, 'neither': 0, 'no_task': 1}
    """
    judge = spec.lessons.judge
    if judge is None:
        raise ConfigurationError(f"family {spec.name!r} has no lesson judge")
    counts = dict.fromkeys((*VERDICTS, "no_task"), 0)
    for text in texts:
        verdict: LessonVerdict = judge(text)
        label = "no_task" if verdict.task_id is None else verdict.verdict
        if label not in counts:
            raise ConfigurationError(
                f"family {spec.name!r}'s lesson judge answered {label!r}; verdicts are {VERDICTS}"
            )
        counts[label] += 1
    return counts


#: The built-in family packages, in the order ids, prompts and leaderboard columns list them.
FAMILY_MODULES: tuple[str, ...] = (
    "comprl_gym.envs.minihack",
    "comprl_gym.envs.alfworld",
    "comprl_gym.envs.webshop",
    "comprl_gym.envs.swebench",
    "comprl_gym.envs.memory",
    "comprl_gym.envs.ladder",
)

#: Family modules added at run time (:func:`add_family_module`), after the built-in ones.
_EXTRA_MODULES: list[str] = []
_LOADED: dict[str, FamilySpec] = {}


def _load(module_name: str) -> FamilySpec:
    if module_name not in _LOADED:
        spec = getattr(importlib.import_module(module_name), "SPEC", None)
        if not isinstance(spec, FamilySpec):
            raise ConfigurationError(
                f"{module_name} is listed as an env family but exports no FamilySpec named SPEC"
            )
        _LOADED[module_name] = spec
    return _LOADED[module_name]


def family_specs() -> dict[str, FamilySpec]:
    """Every family's spec by name, built-in families first, in the order they are listed."""
    specs: dict[str, FamilySpec] = {}
    for module_name in (*FAMILY_MODULES, *_EXTRA_MODULES):
        spec = _load(module_name)
        if spec.name in specs:
            raise ConfigurationError(f"two modules define the env family {spec.name!r}")
        specs[spec.name] = spec
    return specs


def family_spec(name: str) -> FamilySpec | None:
    """The spec of family ``name``, or ``None`` for a family nobody listed."""
    return family_specs().get(name)


def add_family_module(module_name: str) -> FamilySpec:
    """List one more family module (a package of yours exporting ``SPEC``); idempotent."""
    spec = _load(module_name)
    if module_name not in (*FAMILY_MODULES, *_EXTRA_MODULES):
        _EXTRA_MODULES.append(module_name)
        try:
            family_specs()
        except ConfigurationError:
            _EXTRA_MODULES.remove(module_name)
            raise
    return spec


def lazy_exports(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``names[attr]`` (a submodule) on first use.

    A family's ``__init__`` exports its ``SPEC`` at once and its env classes lazily, so
    listing the family imports no engine.
    """

    def __getattr__(attr: str) -> Any:
        if attr not in names:
            raise AttributeError(f"module {package!r} has no attribute {attr!r}")
        return getattr(importlib.import_module(names[attr]), attr)

    return __getattr__
