"""Reader threads that fill reusable buffers ahead of the solver (double buffering).

A reader takes the next chunk of the epoch's order and a free buffer for it (blocking only while
all buffers are in use by the solver; chunks take their buffers in order, so a later chunk
never holds the buffer an earlier one waits for), reads the chunk into it and hands it over;
the consumer gets the chunks in order whichever reader finished first. Two readers overlap one
chunk's disk reads with another's decoding: at a Criteo day's scale the epochs wait on the
reader. Every blocking
wait in here uses a short timeout and re-checks the stop flag and the reader's error, so a
failing or stuck reader surfaces in the caller as an exception, never as a hang.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from snapfit.errors import ResourceError

_POLL = 0.05


class BufferPool:
    """``n`` byte buffers of ``nbytes`` each, allocated once and reused every epoch."""

    def __init__(self, n: int, nbytes: int):
        self.buffers = [np.empty(max(8, nbytes), dtype=np.uint8) for _ in range(n)]
        self._free: queue.Queue[int] = queue.Queue()
        self._owner: dict[int, int] = {}  # chunk id -> buffer slot
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Mark every buffer free (between epochs, when nothing is in flight)."""
        with self._lock:
            self._owner.clear()
            self._free = queue.Queue()
            for i in range(len(self.buffers)):
                self._free.put(i)

    def acquire(self, k: int, stop: threading.Event) -> np.ndarray | None:
        """A free buffer for chunk ``k``, or None once ``stop`` is set."""
        while not stop.is_set():
            try:
                slot = self._free.get(timeout=_POLL)
            except queue.Empty:
                continue
            with self._lock:
                self._owner[k] = slot
            return self.buffers[slot]
        return None

    def release(self, k: int) -> None:
        """Chunk ``k`` is done: its buffer (if it has one) can be refilled."""
        with self._lock:
            slot = self._owner.pop(k, None)
        if slot is not None:
            self._free.put(slot)


class Prefetcher:
    """Reads ``order`` ahead on ``n_readers`` threads; :meth:`get` returns chunks in that order.

    ``read(k, buffer)`` fills a pool buffer; ``read_owned(k)`` reads into fresh memory (for
    chunks that will stay resident). ``stall_timeout`` bounds how long :meth:`get` waits for one
    chunk before raising (a reader blocked on a dead disk, for example).
    """

    def __init__(
        self,
        order: Sequence[int],
        pool: BufferPool,
        read: Callable[[int, np.ndarray], object],
        *,
        owned: set[int] = frozenset(),
        read_owned: Callable[[int], object] | None = None,
        where: Callable[[int], str] = str,
        stall_timeout: float = 600.0,
        n_readers: int = 1,
    ):
        self.order = list(order)
        self.pool = pool
        self._read = read
        self._owned = owned
        self._read_owned = read_owned
        self._where = where
        self.stall_timeout = stall_timeout
        self._done: dict[int, object] = {}  # chunk id -> its chunk, until get() takes it
        self._cond = threading.Condition()
        self._take = threading.Lock()  # held while a reader takes a chunk and its buffer
        self._next = 0  # position in order of the next chunk to take
        self._due = 0  # position in order of the next chunk get() returns
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self.read_seconds = 0.0  # readers' busy time (excludes waiting for buffers)
        self.wait_seconds = 0.0  # consumer time blocked in get()
        self._threads = [
            threading.Thread(target=self._run, name=f"snapfit-reader-{i}", daemon=True)
            for i in range(max(1, int(n_readers)))
        ]
        for t in self._threads:
            t.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                with self._take:
                    if self._next >= len(self.order):
                        return
                    k = self.order[self._next]
                    self._next += 1
                    buf = None if k in self._owned else self.pool.acquire(k, self._stop)
                    if buf is None and k not in self._owned:
                        return
                t0 = time.perf_counter()
                chunk = self._read_owned(k) if buf is None else self._read(k, buf)
                with self._cond:
                    self.read_seconds += time.perf_counter() - t0
                    self._done[k] = chunk
                    self._cond.notify_all()
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            self._error = e

    def get(self, k: int):
        """The next chunk, which must be ``k``; re-raises a reader's error."""
        t0 = time.perf_counter()
        try:
            if self._due >= len(self.order) or self.order[self._due] != k:
                raise ResourceError(f"chunk {k} was asked for out of the epoch's order (a bug).")
            while True:
                with self._cond:
                    if k in self._done:
                        chunk = self._done.pop(k)
                        self._due += 1
                        break
                    self._cond.wait(_POLL)
                if self._error is not None:
                    raise self._error
                if not any(t.is_alive() for t in self._threads) and k not in self._done:
                    raise ResourceError(
                        f"the reader thread stopped before delivering chunk {k} "
                        f"({self._where(k)}); this is a bug, please report it."
                    )
                if time.perf_counter() - t0 > self.stall_timeout:
                    self.close()
                    raise ResourceError(
                        f"waited {self.stall_timeout:.0f}s for chunk {k} ({self._where(k)}) "
                        "without progress; the cache disk may be stalled."
                    )
        finally:
            self.wait_seconds += time.perf_counter() - t0
        return chunk

    def close(self) -> None:
        """Stop the reader and wait for it (it notices within one poll interval)."""
        self._stop.set()
        deadline = time.perf_counter() + 30
        for t in self._threads:
            while t.is_alive() and time.perf_counter() < deadline:
                t.join(_POLL)
