"""The extractor probe for trainers' extractors, as training logs it.

:mod:`comprl_gym.lessons.probe` scores any lesson writer on a family's committed probe
episodes (P(right | won), P(right | lost)); this module gives it the trainers' extractors:

* :class:`ExtractorWriter` lets an :class:`~comprl_gym.trainers.extractor.ExperienceExtractor`
  write into the probe's scratch store and leaves its training state as it was (no training
  samples, counts or sampling draws of the probe's), so a run probed every iteration trains
  exactly as one never probed;
* :func:`probe_metrics` is what a trainer logs every ``experience.probe_every`` iterations
  (``probe/right_after_won``, ``probe/right_after_lost`` and the counts) for each of its
  families with a lesson judge and probe episodes.

A saved run's extractors are probed by ``comprl-gym probe`` (:mod:`comprl_gym.cli.probe`).
"""

from __future__ import annotations

import hashlib
from typing import Any

from comprl_gym.families import family_spec
from comprl_gym.lessons.formats import StemFormat, stem_choice_logprobs
from comprl_gym.lessons.probe import ProbeReport, can_probe, load_probe_episodes, run_probe
from comprl_gym.registration import families_of
from comprl_gym.rollouts import Trajectory
from comprl_gym.trainers.extractor import ExperienceExtractor


class ExtractorWriter:
    """An extractor as a probe writer (``write(episode, step, into=store)``).

    It writes with the extractor's current weights and sampling settings into the store it is
    given (``ExperienceExtractor.write(..., into=store)``, which keeps no training sample and
    leaves the extractor's counts alone for a write elsewhere), and leaves the extractor's
    sampling-seed counter as it found it, so a run probed every iteration trains exactly as one
    never probed. The caller makes sure nothing else uses the extractor meanwhile (a trainer
    drains its experience worker first).

    Each probe episode draws from its own seed (:func:`probe_draw`, from the extractor's seed
    and the episode's id): episodes never share one random draw, and the same episode gets the
    same draw at every probe of a run, so a probe curve moves only when the weights do.

    :meth:`choice_logprobs` is what the probe reads beside the sample: the model's log-prob of
    each choice of the family's lesson stem, for the greedy choice and the mean probability of
    the right one (a ``stem`` extractor only; ``None`` otherwise).
    """

    def __init__(self, extractor: ExperienceExtractor, name: str = "extractor"):
        self.extractor = extractor
        self.name = name

    def write(self, episode: Trajectory, actor_step: int, *, into: Any) -> list[int]:
        extractor = self.extractor
        with extractor.lock:
            generations = extractor.generations
            # _sampling adds one before it seeds: this episode's generations draw from
            # seed * 1_000_003 + probe_draw + 1, ...
            extractor.generations = probe_draw(episode.episode_id)
            try:
                return extractor.write(episode, actor_step, into=into)
            finally:
                extractor.generations = generations

    def choice_logprobs(self, episode: Trajectory) -> list[tuple[str, float]] | None:
        """Each lesson the extractor could write about ``episode`` in the family's stem, with
        the log-prob its model gives it (:func:`~comprl_gym.lessons.formats.
        stem_choice_logprobs`); ``None`` when the extractor does not write stems or the task
        has no stem. Draws nothing."""
        extractor = self.extractor
        if not isinstance(extractor.format, StemFormat):
            return None
        spec = family_spec(episode.env_family)
        stem = None if spec is None else spec.stem_for(episode.task_id)
        if stem is None:
            return None
        with extractor.lock:
            logprobs = stem_choice_logprobs(
                extractor.backend, extractor.format.messages(episode), stem
            )
        return [(stem.opening + choice, lp) for choice, lp in zip(stem.choices, logprobs)]


#: Probe draws start here, far above any generation count a run reaches, so a probe episode's
#: seed is never one a training generation used.
PROBE_DRAWS = 10**12


def probe_draw(episode_id: str) -> int:
    """The sampling-counter value the probe episode ``episode_id`` draws at: a stable hash of
    the id (the same in every process and at every probe), above :data:`PROBE_DRAWS`.

    Example:
        >>> probe_draw("a") != probe_draw("b"), probe_draw("a") == probe_draw("a")
        (True, True)
    """
    digest = hashlib.sha256(episode_id.encode("utf-8")).digest()
    return PROBE_DRAWS + int.from_bytes(digest[:5], "big")


def probed_families(env_ids: list[str]) -> list[str]:
    """The families of ``env_ids`` that have a lesson judge and probe episodes, in order.

    Example:
        >>> probed_families(["comprl/MiniHack-Room-5x5-v0", "comprl/Memory-Fork-v0"])
        ['memory']
    """
    return [family for family in families_of(env_ids) if can_probe(family)]


def probe_reports(
    writer: Any, families: list[str], actor_step: int = 0, name: str = ""
) -> dict[str, ProbeReport]:
    """``writer``'s probe report on each family's probe episodes."""
    return {
        family: run_probe(writer, load_probe_episodes(family), name, actor_step)
        for family in families
    }


def probe_metrics(extractor: ExperienceExtractor, env_ids: list[str], step: int) -> dict[str, Any]:
    """The probe's metrics of ``extractor`` on the probed families of ``env_ids``:
    ``probe/right_after_won`` ... for one family, ``probe/<family>/...`` for several."""
    families = probed_families(env_ids)
    reports = probe_reports(ExtractorWriter(extractor), families, step)
    record: dict[str, Any] = {}
    for family, report in reports.items():
        prefix = "probe/" if len(reports) == 1 else f"probe/{family}/"
        record.update(report.metrics(prefix))
    return record


__all__ = ["ExtractorWriter", "probe_draw", "probe_metrics", "probe_reports", "probed_families"]
