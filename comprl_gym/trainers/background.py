"""Trainer services that run beside the actor loop: the background experience worker (the
asynchronous half of the dual loop: extraction, extractor training and merging), the actor's
wait clock and the timed manager.

The actor loop hands each iteration's finished episodes to :class:`ExperienceWorker` and
goes straight on to its next rollouts. A background thread writes new experiences from
those episodes, takes an extractor CISPO step when rewards are ready, and lets the manager
merge the store on its schedule (``merge_interval_steps`` actor steps). The two loops meet only
through the :class:`~comprl_gym.experience.ExperienceManager` (which is thread-safe) and the
extractor's lock (held while the extractor model generates or trains: a ``search_and_ask``
answer during a rollout may have to wait for it, and that wait is measured).

With ``async_extraction=False`` the same work runs in line when it is submitted: slower, but
a CPU run is then exactly repeatable from its seed.

Example:
    >>> worker = ExperienceWorker(handler=lambda job: None, asynchronous=True)
    >>> worker.submit({"step": 1})
    >>> worker.drain()  # wait for the background work (for a checkpoint)
    >>> worker.processed
    1
    >>> worker.close()
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

logger = logging.getLogger(__name__)


class ExperienceWorker:
    """Runs ``handler(job)`` for every submitted job, in a background thread or in line.

    ``submit`` never blocks the caller in asynchronous mode (the queue is unbounded: the actor
    never waits on extraction). A failing job is logged and re-raised from the next
    ``submit``/``drain`` so an error is never silently lost.
    """

    def __init__(self, handler: Callable[[Any], None], asynchronous: bool = True):
        self.handler = handler
        self.asynchronous = asynchronous
        self.submitted = 0
        self.processed = 0
        self._done = threading.Condition()
        self.busy_s = 0.0
        self._queue: queue.Queue[Any] = queue.Queue()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if asynchronous:
            self._thread = threading.Thread(target=self._run, name="experience-worker", daemon=True)
            self._thread.start()

    def _process(self, job: Any) -> None:
        start = time.perf_counter()
        try:
            self.handler(job)
        finally:
            self.busy_s += time.perf_counter() - start
            with self._done:
                self.processed += 1
                self._done.notify_all()

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                self._process(job)
            except BaseException as exc:  # surfaced to the actor thread
                logger.exception("experience worker failed")
                self._error = exc
            finally:
                self._queue.task_done()

    def _raise_pending(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError("the background experience worker failed") from error

    def submit(self, job: Any) -> None:
        self._raise_pending()
        self.submitted += 1
        if self.asynchronous:
            self._queue.put(job)
        else:
            self._process(job)

    @property
    def backlog(self) -> int:
        return self._queue.qsize()

    @property
    def pending(self) -> int:
        """Jobs submitted and not finished (queued or running)."""
        return self.submitted - self.processed

    def wait_pending(self, at_most: int) -> None:
        """Block until at most ``at_most`` jobs are pending: the dual loop's staleness bound.

        Example:
            >>> worker = ExperienceWorker(handler=lambda job: time.sleep(0.05))
            >>> worker.submit(1); worker.submit(2)
            >>> worker.wait_pending(0)
            >>> worker.pending
            0
            >>> worker.close()
        """
        with self._done:
            self._done.wait_for(lambda: self.pending <= at_most or self._error is not None)
        self._raise_pending()

    def drain(self) -> None:
        """Block until every submitted job is done (checkpoints and the end of a run)."""
        if self.asynchronous:
            self._queue.join()
        self._raise_pending()

    def close(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout=60)
        self._thread = None


class WaitClock:
    """Accumulates how long the actor loop waited on experience (retrieval, answers, locks).

    Example:
        >>> clock = WaitClock()
        >>> with clock.measure("retrieval"):
        ...     pass
        >>> sorted(clock.take())
        ['retrieval']
    """

    def __init__(self) -> None:
        self._totals: dict[str, float] = {}
        self._lock = threading.Lock()

    @contextmanager
    def measure(self, what: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(what, time.perf_counter() - start)

    def add(self, what: str, seconds: float) -> None:
        with self._lock:
            self._totals[what] = self._totals.get(what, 0.0) + seconds

    def take(self) -> dict[str, float]:
        """The totals since the last ``take`` (and reset them)."""
        with self._lock:
            totals, self._totals = self._totals, {}
        return totals


class TimedManager:
    """The actor's view of the ExperienceManager: every call is timed into a WaitClock.

    Everything else passes through unchanged, so the wrapper and the trainer use it as the
    manager itself.
    """

    _TIMED = ("retrieve", "retrieve_batch", "search_and_ask")

    def __init__(self, manager: Any, clock: WaitClock):
        self._manager = manager
        self._clock = clock

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._manager, name)
        if name not in self._TIMED or not callable(attribute):
            return attribute

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self._clock.measure(f"experience_{name}"):
                return attribute(*args, **kwargs)

        return timed

    def __len__(self) -> int:
        return len(self._manager)
