"""``comprl-gym validate ID [ID ...]``: the checks a family author runs before anyone benchmarks.

Each id is made with ``gym.make`` and put through these checks; every failed check is ONE line
of the report (``ID: CHECK: what went wrong``), and the command exits non-zero if any failed:

* ``check_env``: gymnasium's own :func:`~gymnasium.utils.env_checker.check_env` (its
  determinism assertions are counted under ``determinism``, the same fault);
* ``expert``: the family's expert reaches full reward (``info["won"]`` with
  ``info["score"] == 1``) on every seed (a profile may declare a lower floor, with its reason);
* ``noop``: doing nothing (the profile's no-op actions until the episode ends: an empty action
  by default, ``submit`` at once for SWE-bench, the "empty answer") never wins and returns less
  than the expert;
* ``random``: a uniformly random agent returns less than the expert on average (on a tiny map
  such as ``MiniHack-Room-East-4x3`` it may win, but it bumps into walls on the way);
* ``determinism``: the same seed and actions give the same observations and rewards twice;
* ``seeds``: different seeds give different first observations, where the profile says they
  should (fixed layouts such as ``MiniHack-Room-5x5`` say they should not);
* ``bad_actions``: empty, blank, huge, non-UTF-8 (bytes), lone-surrogate, control-character
  and non-string actions never raise;
* ``leak``: the solution text the profile names (WebShop's target ASIN, SWE-bench's gold patch,
  a memory task's answer) occurs in no observation and no ``info`` of the random episodes
  (grader-side data, such as WebShop's goal, lives on the env, never in ``info``);
* ``printable``: every observation is a ``str`` that :func:`comprl_gym.core.printable_text`
  leaves unchanged.

What a family says about itself is a :class:`~comprl_gym.families.ValidationProfile` on its
spec (``FamilySpec.validation``, with per-id ones in ``validation_by_id``); one registered at
run time with :func:`register_profile` (by family name into :data:`FAMILY_PROFILES`, by id into
:data:`ID_PROFILES`) replaces it.

Example:
    >>> report = validate_env("comprl/MiniHack-Room-East-4x3-v0", seeds=[0, 1])
    >>> report.passed, report.faults
    (True, {})
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

import comprl_gym  # noqa: F401 - registers the ids
from comprl_gym.agents.base import RandomAgent, make_agent
from comprl_gym.core import MAX_OBSERVATION_CHARS, ConfigurationError, printable_text
from comprl_gym.families import ValidationProfile, family_spec

logger = logging.getLogger(__name__)

#: The checks, in the order they run and are reported.
CHECKS: tuple[str, ...] = (
    "check_env",
    "expert",
    "noop",
    "random",
    "determinism",
    "seeds",
    "bad_actions",
    "leak",
    "printable",
)

#: Actions no env may raise on: empty, blank, huge, invalid UTF-8 bytes, a lone surrogate,
#: control characters and a terminal escape, a half-open bracket, and non-strings.
BAD_ACTIONS: tuple[Any, ...] = (
    "",
    "   \n\t",
    "x" * 100_000,
    b"\xff\xfe\xfd not utf-8",
    "\udcff",
    "\x00\x07\x1b[2J",
    "click[",
    12345,
    None,
)


#: Profiles registered at run time (:func:`register_profile`), by family name and by id: they
#: replace what the family's spec says.
FAMILY_PROFILES: dict[str, ValidationProfile] = {}
ID_PROFILES: dict[str, ValidationProfile] = {}


def register_profile(key: str, profile: ValidationProfile) -> None:
    """Set the profile of a family name or of one id (``comprl/...``)."""
    (ID_PROFILES if "/" in key else FAMILY_PROFILES)[key] = profile


def profile_for(env_id: str, family: str) -> ValidationProfile:
    """The profile of ``env_id``: one registered for it or for its family, else what its
    family's spec says (:meth:`~comprl_gym.families.FamilySpec.validation_for`), else the
    defaults.

    Example:
        >>> profile_for("comprl/SWEBench-v0", "swebench").noop_actions
        ('submit',)
        >>> profile_for("comprl/MiniHack-Room-5x5-v0", "minihack").seeds_vary
        False
    """
    registered = ID_PROFILES.get(env_id) or FAMILY_PROFILES.get(family)
    if registered is not None:
        return registered
    spec = family_spec(family)
    return spec.validation_for(env_id) if spec is not None else ValidationProfile()


@dataclass
class ValidationReport:
    """The outcome of :func:`validate_env` for one id."""

    env_id: str
    family: str = ""
    seeds: list[int] = field(default_factory=list)
    faults: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.faults

    def fault(self, check: str, message: str) -> None:
        """Record a fault of ``check`` (the first message of a check is kept)."""
        self.faults.setdefault(check, message)

    def lines(self) -> list[str]:
        """One line per fault, or one ``ok`` line."""
        if self.passed:
            total = sum(self.seconds.values())
            return [f"{self.env_id}: ok ({len(CHECKS)} checks, {total:.1f} s)"]
        return [f"{self.env_id}: {c}: {self.faults[c]}" for c in CHECKS if c in self.faults]

    def to_dict(self) -> dict[str, Any]:
        return {
            "env_id": self.env_id,
            "family": self.family,
            "seeds": self.seeds,
            "passed": self.passed,
            "faults": self.faults,
            "notes": self.notes,
            "seconds": self.seconds,
        }


@dataclass
class _Episode:
    observations: list[Any]
    infos: list[dict[str, Any]]
    rewards: list[float]
    won: bool
    score: float
    secrets: list[str] = field(default_factory=list)

    @property
    def ret(self) -> float:
        return float(sum(self.rewards))


def _play(
    env: Any,
    seed: int,
    act: Callable[[str, dict[str, Any]], Any],
    limit: int,
    secrets_of: Callable[[Any, dict[str, Any]], list[str]] | None = None,
) -> _Episode:
    obs, info = env.reset(seed=seed)
    episode = _Episode([obs], [info], [], False, 0.0)
    if secrets_of is not None:
        episode.secrets = [text for text in secrets_of(env, info) if text]
    for _ in range(limit):
        obs, reward, terminated, truncated, info = env.step(act(obs, info))
        episode.observations.append(obs)
        episode.infos.append(info)
        episode.rewards.append(float(reward))
        if terminated or truncated:
            break
    episode.won, episode.score = bool(info.get("won")), float(info.get("score", 0.0))
    return episode


def _agent_policy(agent: Any) -> Callable[[str, dict[str, Any]], Any]:
    started = [False]

    def act(obs: str, info: dict[str, Any]) -> Any:
        if not started[0]:
            agent.reset(info.get("task", ""), info)
            started[0] = True
        return agent.act(obs, info)

    return act


def _step_limit(env: Any) -> int:
    """The episode's step limit, with a margin: the validator never loops forever."""
    return int(getattr(env.unwrapped, "max_steps", 1000) or 1000) + 1


def _full(episode: _Episode) -> bool:
    return episode.won and episode.score >= 1.0 - 1e-9


def _first_difference(a: _Episode, b: _Episode) -> str | None:
    for step, (x, y) in enumerate(zip(a.observations, b.observations)):
        if x != y:
            return f"observation {step} differs"
    for step, (x, y) in enumerate(zip(a.rewards, b.rewards)):
        if x != y:
            return f"reward of step {step + 1} differs ({x} vs {y})"
    if len(a.observations) != len(b.observations):
        return f"episode lengths differ ({len(a.rewards)} vs {len(b.rewards)} steps)"
    return None


class _Validation:
    """One id's checks; each method records at most one fault line per check."""

    def __init__(self, env_id: str, seeds: Sequence[int], env_kwargs: dict[str, Any]):
        self.env_id = env_id
        self.seeds = list(seeds)
        self.env_kwargs = env_kwargs
        self.report = ValidationReport(env_id, seeds=self.seeds)
        self.env: Any = None
        self.profile = ValidationProfile()
        self.expert: list[_Episode] = []
        self.random: list[_Episode] = []
        self.observations: list[Any] = []

    def run(self) -> ValidationReport:
        try:
            self.env = gym.make(self.env_id, **self.env_kwargs)
        except Exception as exc:
            self.report.fault("check_env", f"gym.make failed: {exc!r}")
            return self.report
        try:
            self.report.family = str(getattr(self.env.unwrapped, "env_family", ""))
            self.profile = profile_for(self.env_id, self.report.family)
            for check in CHECKS:
                started = time.perf_counter()
                try:
                    getattr(self, f"_check_{check}")()
                except Exception as exc:  # a check that raised is that check's fault
                    self.report.fault(check, f"raised {type(exc).__name__}: {exc}"[:500])
                    logger.debug("%s: %s raised", self.env_id, check, exc_info=True)
                self.report.seconds[check] = round(time.perf_counter() - started, 2)
        finally:
            self.env.close()
        return self.report

    # ---- the checks, in CHECKS order --------------------------------------------------------
    def _check_check_env(self) -> None:
        from gymnasium.utils.env_checker import check_env

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                check_env(self.env.unwrapped, skip_render_check=True)
        except AssertionError as exc:
            message = str(exc) or "an assertion failed"
            # Gymnasium's determinism assertions are the determinism check's fault.
            check = "determinism" if "eterminis" in message else "check_env"
            self.report.fault(check, f"gymnasium's check_env: {message}")

    def _check_expert(self) -> None:
        profile = self.profile
        limit = _step_limit(self.env)
        for seed in self.seeds:
            agent = profile.expert(self.env) if profile.expert else make_agent("expert", self.env)
            self.expert.append(_play(self.env, seed, _agent_policy(agent), limit))
            self.observations += self.expert[-1].observations
        missed = [s for s, e in zip(self.seeds, self.expert) if not _full(e)]
        rate = 1 - len(missed) / len(self.seeds)
        if rate < profile.expert_floor:
            self.report.fault(
                "expert",
                f"reached full reward on {len(self.seeds) - len(missed)} of {len(self.seeds)} "
                f"seeds (missed: {missed})",
            )
        elif missed:
            self.report.notes.append(
                f"expert missed full reward on seeds {missed}, within its floor "
                f"{profile.expert_floor:g}: {profile.expert_floor_reason}"
            )

    def _expert_return(self) -> float:
        won = [e.ret for e in self.expert]
        return sum(won) / len(won) if won else 1.0

    def _check_noop(self) -> None:
        actions = self.profile.noop_actions
        count = [0]

        def act(obs: str, info: dict[str, Any]) -> str:
            count[0] += 1
            return actions[(count[0] - 1) % len(actions)]

        episode = _play(self.env, self.seeds[0], act, _step_limit(self.env))
        self.observations += episode.observations
        if episode.won or episode.ret >= self._expert_return():
            self.report.fault(
                "noop",
                f"doing nothing ({actions!r}) won={episode.won}, return {episode.ret:.2f} "
                f"(expert: {self._expert_return():.2f})",
            )

    def _random_episode(self, seed: int) -> _Episode:
        return _play(
            self.env,
            seed,
            _agent_policy(RandomAgent(seed=seed)),
            _step_limit(self.env),
            self.profile.solution_texts,
        )

    def _check_random(self) -> None:
        self.random = [self._random_episode(seed) for seed in self.seeds]
        for episode in self.random:
            self.observations += episode.observations
        mean = sum(e.ret for e in self.random) / len(self.random)
        if mean >= self._expert_return():
            self.report.fault(
                "random",
                f"a random agent returned {mean:.2f} on average and reached full reward on "
                f"{sum(map(_full, self.random))} of {len(self.random)} seeds (expert: "
                f"{self._expert_return():.2f})",
            )

    def _check_determinism(self) -> None:
        seed = self.seeds[0]
        again = self._random_episode(seed)
        first = self.random[0] if self.random else self._random_episode(seed)
        difference = _first_difference(first, again)
        if difference:
            self.report.fault("determinism", f"seed {seed} played twice: {difference}")

    def _check_seeds(self) -> None:
        firsts = [self.env.reset(seed=seed)[0] for seed in self.seeds]
        distinct = len(set(map(str, firsts)))
        if self.profile.seeds_vary and len(self.seeds) > 1 and distinct == 1:
            self.report.fault("seeds", f"seeds {self.seeds} all give the same first observation")

    def _check_bad_actions(self) -> None:
        self.env.reset(seed=self.seeds[0])
        for action in BAD_ACTIONS:
            shown = repr(action)[:40]
            try:
                obs, _r, terminated, truncated, _info = self.env.step(action)
            except Exception as exc:
                self.report.fault(
                    "bad_actions", f"step({shown}) raised {type(exc).__name__}: {exc}"[:500]
                )
                return
            self.observations.append(obs)
            if terminated or truncated:
                self.env.reset(seed=self.seeds[0])

    def _check_leak(self) -> None:
        texts_of = self.profile.solution_texts
        if texts_of is None:
            return
        for seed, episode in zip(self.seeds, self.random):
            secrets = episode.secrets
            for step, (obs, info) in enumerate(zip(episode.observations, episode.infos)):
                haystacks = (
                    ("observation", str(obs)),
                    ("info", json.dumps(info, default=str, ensure_ascii=False)),
                )
                for where, text in haystacks:
                    for secret in secrets:
                        if secret in text:
                            self.report.fault(
                                "leak",
                                f"seed {seed}, step {step}: the {where} contains the solution "
                                f"text {secret[:60]!r}",
                            )
                            return

    def _check_printable(self) -> None:
        for obs in self.observations:
            if not isinstance(obs, str):
                self.report.fault("printable", f"an observation is a {type(obs).__name__}")
                return
            if printable_text(obs) != obs:
                bad = next(c for c, p in zip(obs, printable_text(obs)) if c != p)
                self.report.fault("printable", f"an observation holds the character {bad!r}")
                return
            if len(obs) > MAX_OBSERVATION_CHARS:
                self.report.fault("printable", f"an observation is {len(obs)} characters long")
                return


def validate_env(
    env_id: str,
    seeds: Sequence[int] = (0, 1, 2),
    env_kwargs: dict[str, Any] | None = None,
    profile: ValidationProfile | None = None,
) -> ValidationReport:
    """Run every check of :data:`CHECKS` on ``env_id``; ``profile`` overrides the registered one."""
    if not seeds:
        raise ConfigurationError("validate needs at least one seed")
    validation = _Validation(env_id, seeds, dict(env_kwargs or {}))
    if profile is not None:
        saved = ID_PROFILES.get(env_id)
        ID_PROFILES[env_id] = profile
        try:
            return validation.run()
        finally:
            if saved is None:
                ID_PROFILES.pop(env_id, None)
            else:
                ID_PROFILES[env_id] = saved
    return validation.run()


def validate_ids(
    env_ids: Sequence[str],
    seeds: Sequence[int] = (0, 1, 2),
    env_kwargs: dict[str, Any] | None = None,
    progress: bool = True,
    on_report: Callable[[ValidationReport], None] | None = None,
) -> list[ValidationReport]:
    """:func:`validate_env` for each id, with a progress bar."""
    from tqdm import tqdm

    reports = []
    bar = tqdm(env_ids, desc="validate", unit="id", disable=not progress)
    for env_id in bar:
        bar.set_postfix_str(env_id.split("/")[-1])
        report = validate_env(env_id, seeds, env_kwargs)
        reports.append(report)
        if on_report is not None:
            on_report(report)
    return reports


__all__ = [
    "BAD_ACTIONS",
    "CHECKS",
    "FAMILY_PROFILES",
    "ID_PROFILES",
    "ValidationProfile",
    "ValidationReport",
    "profile_for",
    "register_profile",
    "validate_env",
    "validate_ids",
]
