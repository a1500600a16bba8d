"""A writer-priority read/write lock (many readers or one writer; waiting writers go first,
but a writer that releases lets the readers already waiting in before the next writer)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class RWLock:
    """Readers share the lock; a writer holds it alone. A waiting writer blocks new readers,
    so a stream of retrievals cannot starve the extractor's writes. When a writer releases,
    the readers waiting at that moment go before the next writer, so a run of writes (the
    chunked counter flush) cannot starve retrievals either. The writer may re-enter (and
    read) while it holds the lock.

    Example:
        >>> lock = RWLock()
        >>> with lock.read():
        ...     pass
        >>> with lock.write():
        ...     with lock.read():
        ...         pass
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer: int | None = None
        self._writer_depth = 0
        self._waiting_writers = 0
        self._waiting_readers = 0
        #: set when a writer releases with readers waiting: they enter before the next writer
        self._readers_turn = False

    @contextlib.contextmanager
    def read(self) -> Iterator[None]:
        me = threading.get_ident()
        if self._writer == me:  # the writer may read what it is writing
            yield
            return

        def blocked() -> bool:
            return self._writer is not None or (self._waiting_writers and not self._readers_turn)

        with self._cond:
            if blocked():
                self._waiting_readers += 1
                try:
                    while blocked():
                        self._cond.wait()
                finally:
                    self._waiting_readers -= 1
                    if not self._waiting_readers:
                        self._readers_turn = False
                        self._cond.notify_all()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if self._readers == 0:
                    self._cond.notify_all()

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            if self._writer == me:
                self._writer_depth += 1
            else:
                self._waiting_writers += 1
                try:
                    while self._writer is not None or self._readers or self._readers_turn:
                        self._cond.wait()
                finally:
                    self._waiting_writers -= 1
                self._writer = me
                self._writer_depth = 1
        try:
            yield
        finally:
            with self._cond:
                self._writer_depth -= 1
                if self._writer_depth == 0:
                    self._writer = None
                    self._readers_turn = self._waiting_readers > 0
                    self._cond.notify_all()
