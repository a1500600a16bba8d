"""Streaming evaluation: does experience change what the actor does on tasks it revisits?

The protocol of the memory-agent literature (test-time learning), run by ``comprl-gym
stream``. Each held-out task is visited ``visits`` times, in order (every task once, then
every task again, ...). An arm is a source of lessons: none, a store the arm fills online
between visits (the extractor distils each finished episode, or the winning actions are
stored verbatim), or a store the benchmark fills once (an oracle lesson, its inversion, a
placebo). With no lessons the success curve over visits is flat; with lessons that carry
information it should rise.

Arms are compared on **common random numbers**: every (task, visit) episode has one reset
seed and one sampling seed, the same in every arm, and its replies are drawn from its own
sampling seed (:meth:`~comprl_gym.rollouts.RolloutWorker.run`'s ``sampling_seeds``), so the
other episodes of its batch never change its draws. Each record carries both seeds and the
lessons the episode was shown; the summary reports per arm and visit the success rate with
its Wilson interval and, paired episode by episode with a reference arm, the difference
(Newcombe's interval) and McNemar's exact p.

Read it in the order a stream runs:

1. :mod:`.config`: :class:`StreamConfig`, what a stream is.
2. :mod:`.run`: :func:`run_stream` (what ``comprl-gym stream`` calls) checks the config,
   builds the arms and the agent, plays, and writes the run folder (``config.json``,
   ``episodes.jsonl``, ``summary.json`` / ``summary.md``, ``stream.png``, ``provenance.json``,
   ``stores/<arm>/``); :func:`stream_result` reads a finished one back.
3. :mod:`.arms`: the arms (``none``, the family's fixed lessons, memories without a model,
   the family's scripted memories, ``own``), each arm's store and ``learn`` built from its
   name.
4. :mod:`.play`: :func:`run_streaming`, the visits played, one record per episode.
5. :mod:`.summary`: the records' statistics (:func:`streaming_summary`,
   :func:`versus_summary`, :func:`compare_runs`, :func:`shown_verdicts`).
6. :mod:`.report`: the summary as Markdown tables (``summary.md``) and a plot.
"""

from comprl_gym.evaluation.stream.arms import FamilyMemory, task_ids
from comprl_gym.evaluation.stream.config import NONE, OWN, StreamConfig
from comprl_gym.evaluation.stream.play import Arm, episode_seeds, run_streaming
from comprl_gym.evaluation.stream.report import (
    paired_cell,
    plot_streaming,
    stream_markdown,
    streaming_markdown,
    versus_markdown,
)
from comprl_gym.evaluation.stream.run import PLOT_FILE, STORES, run_stream, stream_result
from comprl_gym.evaluation.stream.summary import (
    compare_runs,
    shown_verdicts,
    streaming_summary,
    versus_summary,
)

__all__ = [
    "NONE",
    "OWN",
    "PLOT_FILE",
    "STORES",
    "Arm",
    "FamilyMemory",
    "StreamConfig",
    "compare_runs",
    "episode_seeds",
    "paired_cell",
    "plot_streaming",
    "run_stream",
    "run_streaming",
    "shown_verdicts",
    "stream_markdown",
    "stream_result",
    "streaming_markdown",
    "streaming_summary",
    "task_ids",
    "versus_markdown",
    "versus_summary",
]
