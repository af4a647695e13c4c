"""Rows of a cut chunk shared out while the pass runs: a thread done early takes the slowest's.

Why. Threads sharing ``w`` (``snapfit.engine.shared``) cut a chunk into one slice per thread
(``workers.plan_epoch``): on one in-memory chunk each thread gets half of the rows. A pass
then lasts as long as its slowest thread, and on a VM one vCPU is often slower than the
other for a while (its host core busy with another tenant): a thread waited 0.00-0.15 s at
the end of 0.9-2.0 s passes of two threads on 4M Criteo-40 rows (``EpochRecord.idle``, the
mean of the two, so up to twice that for the one that finished first). Their passes are not
reproducible anyway (Hogwild), so nothing is lost by letting the rows follow the cores.

How. Each thread runs its own slice's rows (in their shuffled order) in blocks taken from
the front: ``MAX_BLOCK`` rows while plenty are left, then a ``1/GUIDE`` share of what is left
(never under ``MIN_BLOCK``; few calls of the kernel, whose syncs at both ends of a call touch
every hot coordinate, and a small last block). A thread with none left takes the back half
of what another thread of the chunk has left (the one with the most) and goes on with it as
its own, so a slow thread is relieved again and again until no thread has ``2 MIN_BLOCK``
rows left. Each row is visited exactly once; the chunk's gap and entropy are the sums over
its blocks, whoever ran them, and the chunk is released only when every slice's item is
complete (a thief's item completes after the rows it took). Whole chunks (a streamed source
with two chunks or more per thread) are still dealt before the pass (``plan_epoch``, by nnz):
taking rows of a chunk another thread holds would need that thread to wait for the thief
before its chunk's buffer is released; not done.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

MIN_BLOCK = 4096
MAX_BLOCK = 1 << 16
GUIDE = 8


class RowBoard:
    """The rows still to run of each cut chunk of one pass, per thread (see the module)."""

    def __init__(self, n_threads: int, min_block: int | None = None, max_block: int | None = None):
        self.n_threads = int(n_threads)
        self.min_block = int(MIN_BLOCK if min_block is None else min_block)
        self.max_block = int(MAX_BLOCK if max_block is None else max_block)
        self._lock = threading.Lock()
        # chunk -> per thread [rows, next, end]: rows[next:end] are still to run
        self._left: dict[int, list[list]] = {}
        self.stolen = np.zeros(self.n_threads, dtype=np.int64)  # rows each thread took

    def run(self, k: int, t: int, rows: np.ndarray, fn: Callable[[np.ndarray], tuple]) -> tuple:
        """Thread ``t``'s share of chunk ``k``: its ``rows`` and what it takes from the
        others, through ``fn(block) -> (gap, entropy)``; returns the summed ``(gap, entropy)``."""
        self.start(k, t, rows)
        gap = ent = 0.0
        while (block := self.take(k, t)) is not None:
            g, e = fn(block)
            gap += g
            ent += e
        return gap, ent

    def start(self, k: int, t: int, rows: np.ndarray) -> None:
        """Thread ``t`` holds ``rows`` of chunk ``k`` (its slice, in the order it runs them).
        ``run`` is ``start`` then ``take`` until None; the two are apart so that a test can
        play any interleaving of threads on one thread."""
        with self._lock:
            slots = self._left.setdefault(k, [[rows, 0, 0] for _ in range(self.n_threads)])
            slots[t][:] = [rows, 0, len(rows)]

    def take(self, k: int, t: int) -> np.ndarray | None:
        """Thread ``t``'s next block of chunk ``k``: from the front of its own rows, else the
        back half of the rows another thread has left (the one with the most); None when no
        thread has ``2 min_block`` rows left."""
        with self._lock:
            slots = self._left[k]
            mine = slots[t]
            left = mine[2] - mine[1]
            if left == 0:
                u = max(range(self.n_threads), key=lambda s: slots[s][2] - slots[s][1])
                other = slots[u]
                left = (other[2] - other[1]) // 2
                if left < self.min_block:
                    return None
                end = other[2]
                other[2] = end - left
                mine[:] = [other[0], end - left, end]
                self.stolen[t] += left
            size = min(left, self.max_block, max(self.min_block, left // GUIDE))
            lo = mine[1]
            mine[1] = lo + size
            return mine[0][lo : lo + size]
