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
class LessonStem:
    """A lesson with one blank the extractor fills: ``opening`` starts the extractor's reply
    and it picks one of ``choices`` to end it (sampling is restricted to their first tokens,
    so each must start with a different token).

    Example:
        >>> stem = LessonStem("In the Vault of Marrow the staircase down is at the end of the",
        ...                   (" east branch.", " west branch."))
        >>> stem.opening + stem.choices[1]
        'In the Vault of Marrow the staircase down is at the end of the west branch.'
    """

    opening: str
    choices: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.choices) < 2:
            raise ConfigurationError(f"a lesson stem needs two choices or more, got {self.choices}")


@dataclass(frozen=True)
class LessonVerdict:
    """What a family's lesson judge says of one lesson: the task it is about (``None``: it
    names none of the family's tasks) and whether the one fact it states about that task is
    ``"right"``, ``"wrong"``, ``"both"`` (it states both answers) or ``"neither"`` (no fact).
    """

    task_id: Any
    verdict: str


@dataclass(frozen=True)
class ReadingExample:
    """One supervised example of the reading warm-up: the env reset with ``reset_options``
    (e.g. ``{"task_id": 3}``), the actor shown ``lessons`` in its system prompt, and the first
    action a reader of those lessons takes (``answer``, an admissible action). ``format``
    names the lesson format, so the warm-up can log a loss per format."""

    task_id: Any
    reset_options: dict[str, Any]
    lessons: tuple[str, ...]
    answer: str
    format: str


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
        lesson_stem: ``"module:function"`` that, given a task id, returns the
            :class:`LessonStem` of a lesson about that task, or ``None``. The ``stem``
            extractor format starts the extractor's reply with it, so the model writes only
            the fact. Empty when the family has none.
        lesson_judge: ``"module:function"`` that, given a lesson's text, returns a
            :class:`LessonVerdict` (which task it is about, whether its fact is right). A family
            with a judge gets the "lessons that name the right fact" metric in training, the
            extractor probe and the streaming evaluation. Empty when the family has none.
        fixed_lessons: ``"module:function"`` that, given a lesson kind (one of
            :attr:`fixed_lesson_kinds`) and a task id, returns the text of that fixed lesson
            about the task (e.g. ``oracle``, ``inverted``, ``placebo``): the fixed arms of
            a streaming evaluation. Empty when the family has none.
        fixed_lesson_kinds: the kinds :attr:`fixed_lessons` writes.
        stream_memories: ``"module:function"`` that, given a name (one of
            :attr:`stream_memory_kinds`) and a stream's seed, returns a fresh scripted memory:
            an object with ``name`` and ``lesson(episode)``, the lesson it stores after a
            finished episode (``{"title", "description", "content"}``) or ``None``. A
            streaming evaluation stores them as it stores the no-model memories'
            (:mod:`comprl_gym.experience.memories`): arms that bound the result (the memory
            family's ``coin``, ``coin_exemplar`` and ``outcome_aware``). Empty when the
            family has none.
        stream_memory_kinds: the names :attr:`stream_memories` makes.
        reading_examples: ``"module:function"`` called as ``f(split, formats, sides,
            env_kwargs)`` that returns the :class:`ReadingExample` list of the reading warm-up
            (``formats``: the lesson formats to show, ``sides``: the family's labelling
            option). Empty when the family has none (the warm-up is then refused).
        probe_episodes: ``"module:function"`` that returns the family's extractor-probe
            episodes, a fixed committed set of ``Trajectory.to_dict`` records covering both
            outcomes (:mod:`comprl_gym.evaluation.probe`); with a :attr:`lesson_judge` it lets
            the probe (``comprl-gym probe``, ``experience.probe_every``) score an extractor.
            Empty when the family has none.
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
    lesson_stem: str = ""
    lesson_judge: str = ""
    fixed_lessons: str = ""
    fixed_lesson_kinds: tuple[str, ...] = ()
    stream_memories: str = ""
    stream_memory_kinds: tuple[str, ...] = ()
    reading_examples: str = ""
    probe_episodes: str = ""
    suite_content: str = ""
    suite_engines: tuple[str, ...] = ()
    missing_data: str = ""
    validation: ValidationProfile = field(default_factory=ValidationProfile)
    validation_by_id: Mapping[str, ValidationProfile] = field(default_factory=dict)
    held_out_split: str = ""
    training_split: str = ""

    def stem_for(self, task_id: str) -> LessonStem | None:
        """The stem of a lesson about ``task_id`` (:attr:`lesson_stem`), or ``None``."""
        if not self.lesson_stem:
            return None
        return load_object(self.lesson_stem)(task_id)

    def judge(self, text: str) -> LessonVerdict | None:
        """:attr:`lesson_judge`'s verdict on ``text``, or ``None`` when the family has no judge."""
        if not self.lesson_judge:
            return None
        return load_object(self.lesson_judge)(text)

    def fixed_lesson(self, kind: str, task_id: Any) -> str:
        """The fixed lesson of ``kind`` about ``task_id`` (:attr:`fixed_lessons`); a
        :class:`~comprl_gym.core.ConfigurationError` naming the family for a kind it lacks."""
        if kind not in self.fixed_lesson_kinds:
            raise ConfigurationError(
                f"family {self.name!r} has no fixed lesson {kind!r} "
                f"(it has: {', '.join(self.fixed_lesson_kinds) or 'none'})"
            )
        return load_object(self.fixed_lessons)(kind, task_id)

    def stream_memory(self, name: str, seed: int) -> Any:
        """A fresh scripted memory called ``name`` for the stream of ``seed``
        (:attr:`stream_memories`); a :class:`~comprl_gym.core.ConfigurationError` naming the
        family for a name it lacks."""
        if name not in self.stream_memory_kinds:
            raise ConfigurationError(
                f"family {self.name!r} has no scripted memory {name!r} "
                f"(it has: {', '.join(self.stream_memory_kinds) or 'none'})"
            )
        return load_object(self.stream_memories)(name, seed)

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
    spec = _family_of(env_id)
    if spec is None or not spec.held_out_split:
        return None
    given = (env_kwargs or {}).get("split")
    split = str(given) if given is not None else spec.held_out_split
    return Pool(split, split != spec.training_split, "given" if given is not None else "default")


def recorded_pool(env_id: str, env_kwargs: Mapping[str, Any] | None) -> Pool | None:
    """The pool a finished run played, from the ``env_kwargs`` it recorded: without a
    ``split`` there, the env's own default, the training pool (runs before held-out defaults
    recorded none)."""
    spec = _family_of(env_id)
    if spec is None or not spec.held_out_split:
        return None
    given = (env_kwargs or {}).get("split")
    split = str(given) if given is not None else spec.training_split
    return Pool(split, split != spec.training_split, "given" if given is not None else "env")


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


#: What a :class:`LessonVerdict` may say (:func:`verdict_counts` adds ``no_task``).
VERDICTS: tuple[str, ...] = ("right", "wrong", "both", "neither")


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
    if not spec.lesson_judge:
        raise ConfigurationError(f"family {spec.name!r} has no lesson judge")
    judge = load_object(spec.lesson_judge)
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
