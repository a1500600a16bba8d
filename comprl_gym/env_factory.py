"""THE way an env is built: an :class:`EnvSpec` (what to build) and :func:`make_env` (build it).

The trainer, evaluation, the Ray env pool, the OpenEnv server and the CLI all describe the
env they need as an ``EnvSpec`` and call ``make_env``: the id, its ``gym.make`` keyword
arguments, an optional env server that plays it, and whether (and how) it is wrapped in
:class:`~comprl_gym.wrappers.ExperienceAugmentedEnv`. A spec is frozen, hashable and
picklable, so it is also the cache key of a trainer's envs and what a driver sends to a Ray
env worker, which builds the same env there. The experience store itself is not part of the
spec: the caller hands ``make_env`` the manager it reaches the store through (a local
``ExperienceManager``, or a client of the experience service on Ray).

Example:
    >>> spec = EnvSpec.of("comprl/MiniHack-Room-5x5-v0", {"max_steps": 3})
    >>> env = make_env(spec)
    >>> env.unwrapped.max_steps, spec.experience is None
    (3, True)
    >>> env.close()
    >>> warm_up = spec.with_experience(ExperienceSpec(inject_top_k=0, search_budget=0))
    >>> warm_up.experience.retrieves
    False
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym

import comprl_gym  # noqa: F401  (registers the comprl/* ids, also inside a Ray worker)
from comprl_gym.core import ConfigurationError
from comprl_gym.registration import REMOTE_ENV_ID

#: Environment variable holding the bearer token of an env server (``comprl-gym serve``).
SERVE_TOKEN_ENV = "COMPRL_GYM_SERVE_TOKEN"


@dataclass(frozen=True)
class ExperienceSpec:
    """How an env is wrapped in :class:`~comprl_gym.wrappers.ExperienceAugmentedEnv`.

    Attributes:
        inject_top_k: experiences retrieved and shown at reset (0: none).
        search_budget: ``search_and_ask[...]`` calls per episode (0: the action is refused).
        report_outcomes: report each episode's outcome to the store (training); evaluation
            never does, so measuring a store does not change it.
        in_observation: also write the injected experiences above the first observation
            (an LLM agent that puts ``info["experiences"]`` in its system prompt turns it off).
        sample_from: retrieve this many candidates and show ``inject_top_k`` of them drawn at
            random per episode (0: the top ``inject_top_k``).
        sample_salt: mixed into that draw with the reset seed (the trainer gives each env of a
            group its slot, so the group's episodes see different lessons).
        inject_order: ``random`` draws or ``rotate`` (the group's envs read the candidates in
            turn); see :class:`~comprl_gym.wrappers.ExperienceInjection`.
        same_task_only: show only experiences written about the reset's task.
    """

    inject_top_k: int = 3
    search_budget: int = 2
    report_outcomes: bool = True
    in_observation: bool = True
    sample_from: int = 0
    sample_salt: int = 0
    inject_order: str = "random"
    same_task_only: bool = False

    @property
    def retrieves(self) -> bool:
        """Whether the wrapper reads the store at all (the trainer's warm-up turns it off)."""
        return self.inject_top_k > 0 or self.search_budget > 0


@dataclass(frozen=True)
class EnvSpec:
    """What to build: ``gym.make(env_id, **kwargs)``, served by ``url`` when set, wrapped with
    experience when ``experience`` is set. Build one with :meth:`of`."""

    env_id: str
    #: ``gym.make`` keyword arguments as sorted ``(name, value)`` pairs (hashable).
    kwargs: tuple[tuple[str, Any], ...] = ()
    #: An env server (``comprl-gym serve``) that plays ``env_id``; in process when empty.
    url: str = ""
    experience: ExperienceSpec | None = None

    @classmethod
    def of(
        cls,
        env_id: str,
        kwargs: Mapping[str, Any] | None = None,
        url: str = "",
        experience: ExperienceSpec | None = None,
    ) -> EnvSpec:
        """The spec of ``env_id`` with ``kwargs`` (a mapping; ``None`` values are left out)."""
        pairs = tuple(sorted((k, v) for k, v in (kwargs or {}).items() if v is not None))
        return cls(env_id, pairs, url, experience)

    @property
    def make_kwargs(self) -> dict[str, Any]:
        return dict(self.kwargs)

    def with_experience(self, experience: ExperienceSpec | None) -> EnvSpec:
        return replace(self, experience=experience)


def require_registered(env_id: str) -> None:
    """Raise a ConfigurationError naming ``env_id`` unless gymnasium knows it."""
    if env_id not in gym.registry:
        raise ConfigurationError(f"unknown env id {env_id!r}; `comprl-gym envs` lists them")


def make_env(
    spec: EnvSpec,
    manager: Any = None,
    refiner: Callable[..., str] | None = None,
) -> gym.Env:
    """Build the env ``spec`` describes.

    ``manager`` is the experience store's door (needed when ``spec.experience`` is set);
    ``refiner`` answers ``search_and_ask`` questions from the retrieved experiences (the
    extractor LLM; without one the wrapper answers with the retrieved texts).
    """
    require_registered(spec.env_id)
    if spec.url:
        if spec.kwargs:
            raise ConfigurationError(
                f"{spec.env_id} is served by {spec.url}: its keyword arguments are the "
                "server's (`comprl-gym serve ... --env-arg KEY=VALUE`), not the client's"
            )
        env = gym.make(
            REMOTE_ENV_ID,
            url=spec.url,
            env_id=spec.env_id,
            token=os.environ.get(SERVE_TOKEN_ENV),
            disable_env_checker=True,
        )
    else:
        env = gym.make(spec.env_id, disable_env_checker=True, **spec.make_kwargs)
    if spec.experience is None:
        return env
    if manager is None:
        env.close()
        raise ConfigurationError(
            f"{spec.env_id}: an env with experience needs the experience manager to read"
        )
    from comprl_gym.wrappers import ExperienceAugmentedEnv

    settings = spec.experience
    return ExperienceAugmentedEnv(
        env,
        manager,
        inject_top_k=settings.inject_top_k,
        search_budget=settings.search_budget,
        refiner=refiner,
        report_outcomes=settings.report_outcomes,
        experiences_in_observation=settings.in_observation,
        sample_from=settings.sample_from,
        sample_salt=settings.sample_salt,
        inject_order=settings.inject_order,
        same_task_only=settings.same_task_only,
    )
