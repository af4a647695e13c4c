"""Plans and threads of an epoch: which unit does which rows, and one host thread per unit.

A unit is a CoCoA+ worker with its own view of ``w``: a CPU thread (``snapfit.engine.units``)
or a GPU (``snapfit.gpu.unit``), each driven by one long-lived host thread of a
``ThreadGroup``. Why per-unit views on the CPU: two threads sharing ``w`` Hogwild-style lost
updates on the hot features (every row touches the 13 integer slots) and needed ~2.5x more
epochs here; atomic adds cost ~2x per epoch. CoCoA+ (Ma et al. 2015; Smith et al. 2018) instead
lets each of K units solve its rows' subproblem on a private view ``v_t = w + sigma' dw_t`` with
curvature ``sigma' ||x_i||^2`` and ``sigma' = K``; then ``w + sum_t dw_t`` equals the mean of the
views and the dual still increases. On CPU threads alone the assignment of rows to threads is a
function of the seed and the epoch, so results are reproducible for a given ``random_state``
and ``n_jobs``. Threads that share ``w`` without losing hot updates (per-thread slots for the
hot coordinates, ``snapfit.engine.shared``, ``deterministic=False``) use the same plans, as
one unit.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

from snapfit.data.chunk import Chunk
from snapfit.engine.waits import ENV, stall_timeout, wait_event
from snapfit.errors import StallError
from snapfit.solvers.cpu import prefetch as _prefetch


@dataclass
class Item:
    """What unit ``unit`` does with chunk ``k`` in a pass; ``seq`` numbers the unit's items.

    Rows: with ``lo`` None, slice ``slice`` of ``n_slices`` of the chunk's row permutation (the
    CPU threads' plan, ``plan_epoch``); otherwise the contiguous rows ``[lo, hi)`` in a
    permutation of their own (a node with GPUs: a GPU then brings back the ``alpha`` of its own
    rows alone).
    """

    k: int
    unit: int
    seq: int = 0
    lo: int | None = None
    hi: int | None = None
    slice: int = 0
    n_slices: int = 1

    def n_rows(self, chunk_rows: int) -> int:
        if self.lo is None:
            lo = self.slice * chunk_rows // self.n_slices
            return (self.slice + 1) * chunk_rows // self.n_slices - lo
        return self.hi - self.lo

    def sort_key(self) -> tuple[int, int, int]:
        """Where the item's rows sit in its chunk: results summed in this order are
        reproducible whatever order the units finished in."""
        return self.k, self.lo or 0, self.slice


def plan_epoch(
    chunk_nnz: Sequence[int], n_threads: int, rng: np.random.Generator
) -> tuple[list[int], list[list[Item]]]:
    """Chunk order for the epoch and the items each CPU thread will process, in delivery order.

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
            per_thread[t].append(Item(k, t, len(per_thread[t])))
    else:
        for k in order:
            for t in range(n_threads):
                per_thread[t].append(Item(k, t, len(per_thread[t]), slice=t, n_slices=n_threads))
    return order, per_thread


def item_span(item: Item, n_rows: int) -> tuple[int, int]:
    """``(lo, hi)``: the item's rows as a range of its chunk (the whole chunk for an item
    without a span; passes that slice a chunk's permutation use ``item_rows``)."""
    return (0, n_rows) if item.lo is None else (item.lo, item.hi)


def item_rows(item: Item, n_rows: int, bucket_rows: int, key: list[int]) -> np.ndarray:
    """The rows of ``item`` in their visiting order, from ``key`` (seed, epoch) alone."""
    if item.lo is None:
        if item.n_slices == 1:
            return row_order(n_rows, bucket_rows, [*key, item.k])
        if bucket_rows <= 1:
            return slice_rows(n_rows, item.slice, item.n_slices, [*key, item.k])
        rows = row_order(n_rows, bucket_rows, [*key, item.k])  # buckets: a slice of them all
        lo = item.slice * n_rows // item.n_slices
        return rows[lo : (item.slice + 1) * n_rows // item.n_slices]
    return row_order(item.hi - item.lo, bucket_rows, [*key, item.k, item.lo]) + item.lo


#: A cut chunk's rows are dealt to its slices in this many blocks per slice (``slice_rows``).
SLICE_BLOCKS = 64


def slice_rows(n_rows: int, s: int, n_slices: int, key: list[int]) -> np.ndarray:
    """Rows of slice ``s`` of ``n_slices`` of a chunk in their visiting order, from ``key``.

    The chunk's rows, in ``n_slices * SLICE_BLOCKS`` blocks of consecutive rows, are dealt to
    the slices in a shuffled order (the same for every slice: the slices partition the rows)
    and each slice visits its own rows in a shuffled order. Each thread of a cut chunk thus
    shuffles its own rows only: taking its part of the whole chunk's permutation made every
    thread shuffle all of the rows, 0.033 s per 4M rows and epoch (~4 % of an epoch of two
    threads on 4M Criteo-40 rows), where its own half takes 0.017 s."""
    n_blocks = min(n_rows, n_slices * SLICE_BLOCKS)
    deal, order = np.random.SeedSequence([*key, n_slices]).generate_state(2, np.uint64)
    blocks = _shuffled(n_blocks, deal)[s * n_blocks // n_slices : (s + 1) * n_blocks // n_slices]
    return _shuffle(_block_rows(blocks, n_rows, n_blocks), order)


#: Swaps drawn ahead in ``_shuffled`` (their entries prefetched meanwhile).
_AHEAD = 16


@njit(inline="always", nogil=True)
def _partner(x, i):
    """The next splitmix64 state after ``x`` and the swap partner in ``[0, i]`` it draws (the
    top 53 bits as a float in [0, 1), scaled)."""
    x += np.uint64(0x9E3779B97F4A7C15)
    z = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return x, np.int64(np.float64(z >> np.uint64(11)) * 1.1102230246251565e-16 * (i + 1))


@njit(nogil=True, cache=True)
def _shuffled(n, key):
    """``0..n-1`` in the order of a Fisher-Yates shuffle driven by splitmix64 from ``key``."""
    return _shuffle(np.arange(n), key)


@njit(nogil=True, cache=True)
def _block_rows(blocks, n_rows, n_blocks):
    """The rows of ``blocks`` (block ``b``: rows ``b * n_rows // n_blocks`` up to the next
    block's first), block after block."""
    total = 0
    for b in blocks:
        total += (b + 1) * n_rows // n_blocks - b * n_rows // n_blocks
    out = np.empty(total, np.int64)
    at = 0
    for b in blocks:
        for r in range(b * n_rows // n_blocks, (b + 1) * n_rows // n_blocks):
            out[at] = r
            at += 1
    return out


@njit(nogil=True, cache=True)
def _shuffle(out, key):
    """``out`` shuffled in place (Fisher-Yates driven by splitmix64 from ``key``); returns it.

    The partners do not depend on the array, so they are drawn ``_AHEAD`` swaps early and their
    entries prefetched: each swap's random access was a cache miss (32 MB of int64 for 4M
    rows), 0.08-0.15 s per 4M rows before."""
    n = len(out)
    x = np.uint64(key)
    ring = np.empty(_AHEAD, np.int64)
    nxt = n - 1  # the next i whose partner is drawn
    for s in range(min(_AHEAD, max(n - 1, 0))):
        x, j = _partner(x, nxt)
        ring[s] = j
        _prefetch(out, j)
        nxt -= 1
    s = 0
    for i in range(n - 1, 0, -1):
        j = ring[s]
        if nxt >= 1:
            x, ahead = _partner(x, nxt)
            ring[s] = ahead
            _prefetch(out, ahead)
            nxt -= 1
        s = s + 1 if s + 1 < _AHEAD else 0
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


def _name(fn) -> str:
    """What a job is called in a stall message: its function's name."""
    return getattr(fn, "__qualname__", None) or repr(fn)


def _pass_barrier(barrier: threading.Barrier) -> None:
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        pass  # the caller gave up waiting (a stalled thread): nothing to do


class ThreadGroup:
    """One long-lived host thread per unit; ``run`` hands each its items as the chunks arrive.

    ``fn(t, item, chunk)`` returns the items it *completed*: a CPU thread completes the item it
    was given, a GPU completes the previous one once the new one is enqueued (its copy overlaps
    the running kernel), and ``flush(t)`` completes what is still pending: when the thread has
    no further item queued, and after the last one.
    A chunk is released (``release(k)``) once every item of it is complete, so a streaming
    source reuses its buffer only after every unit is done with it. ``call`` and ``each`` run
    other work on a unit's own thread (a GPU context is only ever used from its thread). An
    exception in any thread is re-raised in the caller after all threads stop.
    """

    def __init__(self, n_threads: int, names: Sequence[str] | None = None):
        self.n_threads = n_threads
        self._queues: list[queue.Queue] = [queue.Queue() for _ in range(n_threads)]
        names = names or [f"snapfit-unit-{t}" for t in range(n_threads)]
        self._threads = [
            threading.Thread(target=self._loop, args=(t,), daemon=True, name=names[t])
            for t in range(n_threads)
        ]
        for th in self._threads:
            th.start()
        self._stuck = False  # a thread stalled: it may never take another job

    def _loop(self, t: int) -> None:
        q = self._queues[t]
        while True:
            job = q.get()
            if job is None:
                return
            job(t)

    # -- synchronous calls on a unit's thread -----------------------------------------------
    def call(self, t: int, fn: Callable[[], object], what: str | None = None):
        """``fn()`` on thread ``t``; its result, or its exception re-raised here. ``what``
        names the operation in a stall's message."""
        self._check_stuck()
        box: list = []
        ready = threading.Event()

        def job(_t):
            try:
                box.append((fn(), None))
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                box.append((None, e))
            ready.set()

        self._queues[t].put(job)
        self._wait(ready, f"{self._threads[t].name}: {what or _name(fn)}")
        result, error = box[0]
        if error is not None:
            raise error
        return result

    def each(self, fn: Callable[[int], object], what: str | None = None) -> list:
        """``fn(t)`` on every thread ``t`` at once; the results in thread order (``what`` as
        in ``call``)."""
        self._check_stuck()
        boxes: list[list] = [[] for _ in range(self.n_threads)]
        left = [self.n_threads]
        lock = threading.Lock()
        ready = threading.Event()

        def job(t):
            try:
                boxes[t].append((fn(t), None))
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                boxes[t].append((None, e))
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    ready.set()

        for q in self._queues:
            q.put(job)

        def late():
            return [th.name for th, box in zip(self._threads, boxes, strict=True) if not box]

        self._wait(ready, what or _name(fn), late)
        for box in boxes:
            if box[0][1] is not None:
                raise box[0][1]
        return [box[0][0] for box in boxes]

    # -- a pass -----------------------------------------------------------------------------
    def run(
        self,
        chunks,
        plan: list[list[Item]],
        fn: Callable[[int, Item, Chunk], list],
        release: Callable[[int], None],
        flush: Callable[[int], list] | None = None,
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
        finished = threading.Event()  # every item complete, or an error
        remaining = [sum(pending.values())]
        per_unit = [0] * self.n_threads  # items each unit has yet to complete
        for items in plan:
            for it in items:
                per_unit[it.unit] += 1

        def complete(done: list) -> None:
            released = []
            with lock:
                for item, result in done:
                    results.append((item, result))
                    pending[item.k] -= 1
                    per_unit[item.unit] -= 1
                    if pending[item.k] == 0:
                        released.append(item.k)
                    remaining[0] -= 1
                last = remaining[0] == 0
            for k in released:
                release(k)
            if last:
                finished.set()

        def fail(error: BaseException) -> None:
            with lock:
                errors.append(error)
            finished.set()

        def item_job(item, chunk):
            def job(t):
                try:
                    complete(fn(t, item, chunk))
                    # Nothing more queued for this unit: complete what it holds now. A unit
                    # waiting for its next chunk must not keep a finished one's buffer, which
                    # the source may need to read that next chunk (two GPUs holding the only
                    # two buffers of a small budget deadlocked without this).
                    if flush is not None and self._queues[t].empty():
                        complete(flush(t))
                except BaseException as e:  # noqa: BLE001 - handed to the caller
                    fail(e)

            return job

        def flush_job(t):
            try:
                complete(flush(t))
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                fail(e)

        if remaining[0] == 0:
            return results
        delivered = set()
        try:
            for k, chunk in chunks:
                if errors:
                    break
                delivered.add(k)
                for it in by_chunk[k]:
                    self._queues[it.unit].put(item_job(it, chunk))
            else:
                if len(delivered) != len(by_chunk):
                    missing = sorted(set(by_chunk) - delivered)[:5]
                    raise RuntimeError(
                        f"chunk source ended early; never delivered chunks {missing}"
                    )
                if flush is not None:
                    for q in self._queues:
                        q.put(flush_job)
                self._wait_progress(finished, remaining, per_unit, lock)
        finally:
            if errors or not finished.is_set():
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
        if self._stuck:
            return  # a stalled thread never reaches a barrier; the error is on its way up
        barrier = threading.Barrier(self.n_threads + 1)
        for q in self._queues:
            q.put(lambda t: _pass_barrier(barrier))
        try:
            barrier.wait(stall_timeout())
        except threading.BrokenBarrierError:
            self._stuck = True

    @property
    def stuck(self) -> bool:
        """Whether a unit's thread stalled: it may never take another job."""
        return self._stuck

    def _check_stuck(self) -> None:
        if self._stuck:
            raise StallError("a unit's thread stalled earlier in this fit; it takes no more work.")

    def _wait(self, event: threading.Event, what: str, late=None) -> None:
        """``wait_event`` that marks the group stuck when it times out; ``late()`` names the
        threads still working, put before the message."""
        try:
            wait_event(event, what)
        except StallError as e:
            self._stuck = True
            if late is None:
                raise
            raise StallError(f"{', '.join(late())}: {e}") from None

    def _wait_progress(self, finished, remaining, per_unit, lock) -> None:
        """Wait for the pass's end while items keep completing: ``StallError`` naming the
        units still holding items when none completed for a whole stall timeout."""
        seconds = stall_timeout()
        seen = remaining[0]
        while not finished.wait(seconds):
            with lock:
                now = remaining[0]
                late = [self._threads[t].name for t, n in enumerate(per_unit) if n > 0]
            if now == seen:
                self._stuck = True
                raise StallError(
                    f"{', '.join(late)}: no item of the pass completed within {seconds:g} s "
                    f"({now} left; a stuck GPU or thread); set {ENV} to wait longer."
                )
            seen = now

    def close(self) -> None:
        for q in self._queues:
            q.put(None)
        for th in self._threads:  # a stalled thread is a daemon: left behind, not waited for
            th.join(0.0 if self._stuck else None)
