"""Each epoch says how long the solver threads sat on no rows (``EpochRecord.idle``).

The trainer's clock is a fake one here, advanced only by the source: ``PAUSE`` when a slow
source hands over a chunk, ``WORK`` when a thread starts on one. A slow source hands over the
next chunk only once the previous one is released, so no pause falls inside a thread's busy
time whatever the threads' speeds or the machine's load: the bounds below are exact.
"""

import threading
import time
import types

import numpy as np
import pytest
import scipy.sparse as sp

from snapfit.engine import Devices, InMemorySource, Problem
from snapfit.inputs import csr_chunks
from snapfit.train import train

PAUSE = 0.05  # fake seconds a slow source takes to hand over each chunk
WORK = 0.002  # fake seconds a thread spends on each chunk (its ``layout`` call)
GUARD_S = 120  # a deadlock guard only: the wait ends as soon as the chunk is released


class Clock:
    def __init__(self):
        self.now = 0.0
        self._lock = threading.Lock()

    def advance(self, s: float) -> None:
        with self._lock:
            self.now += s

    def perf_counter(self) -> float:
        with self._lock:
            return self.now


class TimedSource(InMemorySource):
    """Chunks in memory; a thread's work on one costs ``WORK`` on the clock, and with a
    ``pause`` each is handed over that late, after the previous one is released."""

    def __init__(self, chunks, d, clock, pause=0.0):
        super().__init__(chunks, d)
        self.clock, self.pause = clock, pause
        self._released = threading.Event()

    def epoch(self, order):
        for i, (k, chunk) in enumerate(super().epoch(order)):
            if self.pause:
                if i:
                    assert self._released.wait(GUARD_S), "a chunk was never released"
                self._released.clear()
                self.clock.advance(self.pause)
            yield k, chunk

    def release(self, k):
        super().release(k)
        self._released.set()

    def layout(self, k):
        self.clock.advance(WORK)
        return super().layout(k)


def _chunks(n_chunks=8, rows=4000, d=2000, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(n_chunks * rows, d, density=0.02, format="csr", random_state=seed,
                  dtype=np.float32)  # fmt: skip
    y = np.where(rng.random(X.shape[0]) < 0.4, 1.0, -1.0).astype(np.float32)
    return csr_chunks(X, y, None, rows), d


@pytest.mark.parametrize("devices", [Devices(n_cpu=1), Devices(n_cpu=2),
                                     Devices(n_cpu=2, share_cpu=True)])  # fmt: skip
def test_threads_waiting_on_a_slow_source_are_idle_and_fed_ones_are_not(devices, monkeypatch):
    clock = Clock()
    fake_time = types.SimpleNamespace(**vars(time))  # the real module but for perf_counter
    fake_time.perf_counter = clock.perf_counter
    monkeypatch.setattr("snapfit.engine.trainer.time", fake_time)
    chunks, d = _chunks()
    problem = Problem(n_features=d, c_pos=0.1, c_neg=0.1, tol=1e-12, max_iter=4, seed=0)
    fast = train(TimedSource(chunks, d, clock), problem, devices=devices).history
    slow = train(TimedSource(chunks, d, clock, PAUSE), problem, devices=devices).history
    for rec in fast + slow:
        assert 0.0 <= rec.idle <= rec.seconds + 1e-12
    # A slow source: every thread waits out each pause (the pass is the 8 pauses plus the
    # work, a thread's busy time at most the work).
    for rec in slow:
        assert rec.idle >= len(chunks) * PAUSE - 1e-9
    # A fed thread waits only while another thread works: never with one thread, at most
    # (1 - 1/k) of the pass with k (each chunk's work is in its own thread's busy time).
    k = devices.n_cpu
    for rec in fast:
        assert rec.idle <= (1 - 1 / k) * len(chunks) * WORK + 1e-9
