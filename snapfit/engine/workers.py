"""CPU threads as CoCoA+ units: each thread owns a view of ``w`` and a fixed share of the rows.

Why per-thread views: two threads sharing ``w`` Hogwild-style lost updates on the hot features
(every row touches the 13 integer slots) and needed ~2.5x more epochs here; atomic adds cost ~2x
per epoch. CoCoA+ (Ma et al. 2015; Smith et al. 2018) instead lets each of K threads solve its
rows' subproblem on a private view ``v_t = w + sigma' dw_t`` with curvature ``sigma' ||x_i||^2``
and ``sigma' = K``; then ``w + sum_t dw_t`` equals the mean of the views and the dual still
increases. The assignment of rows to threads is a function of the seed and the epoch, so results
are reproducible for a given ``random_state`` and ``n_jobs``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

from snapfit.data.chunk import Chunk


@dataclass
class Item:
    """Rows ``rows`` of chunk ``k`` for thread ``thread``; ``chunk`` is filled in on delivery."""

    k: int
    thread: int
    part: int
    n_parts: int


def plan_epoch(
    chunk_nnz: Sequence[int], n_threads: int, rng: np.random.Generator
) -> tuple[list[int], list[list[Item]]]:
    """Chunk order for the epoch and the items each thread will process, in delivery order.

    With at least two chunks per thread, whole chunks are dealt to the least-loaded thread (by
    nnz) in a shuffled order. With fewer, every chunk is split in ``n_threads`` parts so all
    threads stay busy on small data.
    """
    n = len(chunk_nnz)
    order = [int(k) for k in rng.permutation(n)]
    per_thread: list[list[Item]] = [[] for _ in range(n_threads)]
    if n >= 2 * n_threads:
        load = np.zeros(n_threads)
        for k in order:
            t = int(np.argmin(load))
            load[t] += chunk_nnz[k] + 1
            per_thread[t].append(Item(k, t, 0, 1))
    else:
        for k in order:
            for t in range(n_threads):
                per_thread[t].append(Item(k, t, t, n_threads))
    return order, per_thread


@njit(nogil=True, cache=True)
def _shuffled(n, key):
    """``0..n-1`` in the order of a Fisher-Yates shuffle driven by splitmix64 from ``key``."""
    out = np.arange(n)
    x = np.uint64(key)
    for i in range(n - 1, 0, -1):
        x += np.uint64(0x9E3779B97F4A7C15)
        z = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
        # top 53 bits as a float in [0, 1), scaled: an index in [0, i]
        j = np.int64(np.float64(z >> np.uint64(11)) * 1.1102230246251565e-16 * (i + 1))
        t = out[i]
        out[i] = out[j]
        out[j] = t
    return out


def row_order(n_rows: int, bucket_rows: int, key: list[int]) -> np.ndarray:
    """Row visiting order of one pass (int64), derived from ``key`` (seed, epoch, chunk, ...).

    Buckets of ``bucket_rows`` consecutive rows in random order; 1 (the default, see
    ``Problem``) is a full permutation. The shuffle runs in numba: NumPy's
    ``Generator.permutation`` took 15-23 ms per 500k rows, ~10 % of a solver pass; this takes 5.
    """
    k = np.random.SeedSequence(key).generate_state(1, np.uint64)[0]
    if bucket_rows <= 1:
        return _shuffled(n_rows, k)
    n_buckets = -(-n_rows // bucket_rows)
    starts = _shuffled(n_buckets, k) * bucket_rows
    rows = (starts[:, None] + np.arange(bucket_rows, dtype=np.int64)[None, :]).ravel()
    return rows[rows < n_rows] if n_rows % bucket_rows else rows


class ThreadGroup:
    """K long-lived threads; ``run`` hands each thread its items as the chunks arrive.

    The caller's iterator yields chunks in the planned order; a chunk split over several threads
    is released (``release(k)``) once every part is done, so a streaming source can reuse its
    buffer. An exception in any thread is re-raised in the caller after all threads stop.
    """

    def __init__(self, n_threads: int):
        self.n_threads = n_threads
        self._queues: list[queue.Queue] = [queue.Queue() for _ in range(n_threads)]
        self._threads = [
            threading.Thread(target=self._loop, args=(t,), daemon=True, name=f"snapfit-cpu-{t}")
            for t in range(n_threads)
        ]
        for th in self._threads:
            th.start()

    def _loop(self, t: int) -> None:
        q = self._queues[t]
        while True:
            job = q.get()
            if job is None:
                return
            fn, item, chunk, done = job
            try:
                result = fn(t, item, chunk)
                done(item, result, None)
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                done(item, None, e)

    def run(
        self,
        chunks,
        plan: list[list[Item]],
        fn: Callable[[int, Item, Chunk], object],
        release: Callable[[int], None],
    ) -> list[tuple[Item, object]]:
        """Run ``fn(thread, item, chunk)`` for every planned item; return ``(item, result)``."""
        by_chunk: dict[int, list[Item]] = {}
        for items in plan:
            for it in items:
                by_chunk.setdefault(it.k, []).append(it)
        pending = {k: len(v) for k, v in by_chunk.items()}
        results: list[tuple[Item, object]] = []
        errors: list[BaseException] = []
        lock = threading.Lock()
        all_done = threading.Event()
        remaining = [sum(pending.values())]

        def done(item, result, error):
            with lock:
                if error is not None:
                    errors.append(error)
                else:
                    results.append((item, result))
                pending[item.k] -= 1
                last_part = pending[item.k] == 0
                remaining[0] -= 1
                finished = remaining[0] == 0
            if last_part:
                release(item.k)
            if finished:
                all_done.set()

        if remaining[0] == 0:
            return results
        delivered = set()
        try:
            for k, chunk in chunks:
                if errors:
                    break
                delivered.add(k)
                for it in by_chunk[k]:
                    self._queues[it.thread].put((fn, it, chunk, done))
            else:
                if len(delivered) != len(by_chunk):
                    missing = sorted(set(by_chunk) - delivered)[:5]
                    raise RuntimeError(
                        f"chunk source ended early; never delivered chunks {missing}"
                    )
                all_done.wait()
        finally:
            if errors or not all_done.is_set():
                self._drain()
        if errors:
            raise errors[0]
        return results

    def _drain(self) -> None:
        """Empty the queues after a failure and wait until the threads are idle."""
        for q in self._queues:
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break
        barrier = threading.Barrier(self.n_threads + 1)
        for q in self._queues:
            q.put((lambda t, i, c: barrier.wait(), None, None, lambda *a: None))
        barrier.wait()

    def close(self) -> None:
        for q in self._queues:
            q.put(None)
        for th in self._threads:
            th.join()
