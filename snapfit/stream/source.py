"""``StreamSource``: the out-of-core ``ChunkSource`` with a memory budget and DuHL residency.

Life of a fit:

1. ``__init__`` carries out a ``StreamPlan`` (``snapfit.stream.plan``: pieces, chunk size,
   mode, cache format and the budget's split, all decided before) and runs the first pass:
   reader threads decode every row group once, batch by batch, into the piece cache
   (``snapfit.stream.cache``), or, when the plan decodes Parquet every epoch, only learn each
   piece's nnz and store its rows' norms (``snapfit.stream.direct``).
2. Every epoch the pieces are dealt into ``n_chunks`` new chunks (``begin_epoch``, seeded by
   the epoch's chunk order, itself derived from ``(seed, epoch)``: so a resumed run deals the
   same way); from then on ``chunk_rows`` and ``layout`` describe this epoch's chunks, so a
   trainer plans with the sizes it will get. The engine asks for chunks in its shuffled order;
   the prefetch thread assembles each chunk in a reusable pool buffer (resident pieces by
   memcpy, the others by ``preadv`` from the cache or from the decoder's window), together with
   its rows' norms and dual variables, while the units work on earlier chunks. When the engine
   calls ``release(k)`` (after every unit, a GPU included, is done with the chunk) the dual
   variables go back to the ``DualState`` and the buffer returns to the pool.
3. After each epoch the engine reports per-chunk duality gaps (``update_gaps``); with the cache,
   pieces with the largest gap per byte that fit the resident share of the budget are kept in
   memory for the next epoch (DuHL, Duenner et al. 2017): the rows still far from optimal are
   the ones worth keeping close. Residency changes where bytes come from, never the arithmetic.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from snapfit.data.chunk import Chunk
from snapfit.data.fingerprint import dataset_fingerprint
from snapfit.engine.source import ChunkSource, Layout
from snapfit.engine.state import DualState
from snapfit.errors import ResourceError
from snapfit.solvers import cpu
from snapfit.stream.budget import BudgetPlan, _align, buffer_nbytes, temp_dir
from snapfit.stream.cache import PieceCache
from snapfit.stream.direct import ParquetPieces
from snapfit.stream.formats import FORMATS
from snapfit.stream.memlimit import release_arrow_memory
from snapfit.stream.plan import StreamPlan
from snapfit.stream.prefetch import BufferPool, Prefetcher

#: Reader threads assembling chunks from the cache (see ``snapfit.stream.prefetch``).
READERS = 2


def recoding(stored: np.ndarray | None, wanted: np.ndarray | None) -> np.ndarray | None:
    """The relabeling (``cpu.relabel``) from ids stored relabeled by ``stored`` (``None``: the
    data's own) to ids relabeled by ``wanted`` (``None``: the data's own); ``None`` when there
    is nothing to do."""
    if stored is None:
        return wanted
    if wanted is not None and np.array_equal(wanted, stored):
        return None
    inv = np.arange(int(stored.max()) + 1, dtype=np.int32)
    inv[stored] = np.arange(len(stored), dtype=np.int32)  # back to the data's ids
    if wanted is None:
        return inv
    ext = np.arange(len(inv), dtype=np.int32)  # ids past the data's are never stored
    ext[: len(wanted)] = wanted
    return ext[inv]


@dataclass
class Live:
    """A chunk in a buffer: its CSR arrays, its rows' norms and dual variables, its pieces."""

    chunk: Chunk
    sqnorm: np.ndarray
    alpha: np.ndarray
    pieces: np.ndarray


class StreamSource(ChunkSource):
    """Chunks of a Parquet ``Dataset`` streamed under ``budget`` bytes.

    Parameters
    ----------
    dataset : snapfit.data.Dataset
    plan : snapfit.stream.plan.StreamPlan
        Every decision (mode, cache format, chunk and piece rows, the budget's split, readers),
        made by ``plan_stream`` before this source reads anything; the source carries it out.
    seed : int
        Seeds the deals (part of the checkpoint fingerprint through the layout).
    cache_dir : str, optional
        Directory for the piece cache and spilled dual variables (default ``$SNAPFIT_TMPDIR``
        or the system temp dir).
    hot : (ids, tier ends), optional
        The hot set of threads sharing ``w``, chosen by the train tier before the first pass
        (``hot_set`` hands it to the trainer, which then needs no counting pass).
    code : array, optional
        The relabeling the cache stores its ids in (the hot set's order), so that epochs do
        not relabel every chunk (6.7e9 ids per epoch at 200M Criteo-like rows). Chunks come
        with the data's own ids until ``relabel`` asks for the fit's.
    """

    def __init__(self, dataset, plan: StreamPlan, *, seed: int = 0, cache_dir: str | None = None,
                 hot=None, code: np.ndarray | None = None):  # fmt: skip
        if plan.resident or plan.rg_rows != tuple(int(r.n_rows) for r in dataset.chunks):
            raise ValueError("StreamSource needs a streamed plan made for this dataset.")
        self.dataset = dataset
        self.stream_plan = plan
        self.n_features = int(dataset.n_features)
        self.cache_dir = cache_dir or temp_dir()
        self.seed = int(seed)
        self._flags = plan.flags
        self.mode, self.cache_format = plan.mode, plan.cache_format
        self.chunk_rows_target = plan.chunk_rows
        self.pieces = plan.pieces()
        self.per_chunk = plan.per_chunk
        self._n_chunks = plan.n_chunks
        self._hot = hot
        stored = code if self.mode == "cache" else None  # the relabeling the cache's ids carry
        if self.mode == "cache":
            self.cache = PieceCache(dataset, self.pieces, self.cache_dir, plan.flags,
                                    fmt=FORMATS[self.cache_format], code=stored,
                                    id_bound=plan.id_bound, need=plan.cache_bytes,
                                    stored=plan.rg_stored)  # fmt: skip
        else:
            self.cache = ParquetPieces(dataset, self.pieces, self.cache_dir, plan.flags,
                                       plan.rg_stored)  # fmt: skip
        try:
            self.cache.ingest(plan.n_readers)
            release_arrow_memory()
            # Now the nnz of every piece is known: size the buffers exactly.
            self.plan: BudgetPlan = plan.resplit(self._max_buffer())
        except BaseException:
            self.cache.close()
            raise
        self.window = 0.0
        if self.mode == "parquet":
            # The decoder holds ~window/2 + 2 row groups (module docstring of ``direct``).
            self.window = max(1.0, self.cache.window_rgs(self.plan.resident) - 2.0)
        self._record = np.asarray(self.cache.record_nbytes(np.arange(len(self.pieces))))
        self.pool = BufferPool(self.plan.n_buffers, self._max_buffer())
        self._resident: dict[int, np.ndarray] = {}
        self._target: set[int] = set()
        self._choose(np.zeros(len(self.pieces)))
        self._rg_order = np.arange(len(dataset.chunks))
        self._groups = self._deal(list(range(self.n_chunks)))
        self._dealt: list[int] | None = None  # the order begin_epoch dealt for
        self._live: dict[int, Live] = {}
        self.state: DualState | None = None
        self._io_wait = 0.0
        self._prefetch: Prefetcher | None = None
        self._stored_code = stored
        self._code = recoding(stored, None)  # what each chunk's ids go through (``relabel``)
        self.read_seconds = 0.0
        self.epoch_stats: list[dict] = []

    # -- sizes -----------------------------------------------------------------------------
    def _max_buffer(self) -> int:
        """Upper bound over any deal (see ``max_chunk_shape``)."""
        return buffer_nbytes(*self.max_chunk_shape(), *self._flags, self.stream_plan.width)

    @property
    def n_chunks(self) -> int:
        return self._n_chunks

    def chunk_rows(self, k: int) -> int:
        """Rows of chunk ``k`` in the current deal (deals differ by at most a piece)."""
        return int(self.pieces.rows[self._groups[k]].sum())

    def chunk_nnz(self, k: int) -> int:
        return int(self.cache.piece_nnz[self._groups[k]].sum())

    redeals = True

    def flags(self) -> tuple[bool, bool]:
        return self._flags

    @property
    def n_pieces(self) -> int:
        return len(self.pieces)

    def max_chunk_shape(self) -> tuple[int, int]:
        """The ``per_chunk`` largest pieces together bound any deal's chunk."""
        rows = int(np.sort(self.pieces.rows)[-self.per_chunk :].sum())
        return rows, int(np.sort(self.cache.piece_nnz)[-self.per_chunk :].sum())

    def piece_sizes(self) -> tuple[np.ndarray, np.ndarray]:
        return self.pieces.rows.astype(np.int64), np.asarray(self.cache.piece_nnz, np.int64)

    def layout(self, k: int) -> Layout:
        ps = self._groups[k]
        return Layout(ps, self.pieces.rows[ps], np.asarray(self.cache.piece_nnz[ps], np.int64))

    @property
    def io_wait(self) -> float:
        """Seconds the engine has waited for chunks, the running epoch included."""
        pf = self._prefetch
        return self._io_wait + (pf.wait_seconds if pf is not None else 0.0)

    @property
    def resident_bytes(self) -> int:
        return int(sum(len(r) for r in self._resident.values()))

    # -- dealing and assembling ------------------------------------------------------------
    def _deal(self, order: Sequence[int]) -> list[np.ndarray]:
        """Pieces of each chunk for an epoch whose chunk order is ``order``.

        The order is a function of ``(seed, epoch)`` (``workers.plan_epoch``), so seeding the
        deal with it makes every epoch deal differently yet replayably, with no new engine hook.
        From the cache any piece may join any chunk; decoding Parquet, chunk ``order[i]`` takes
        the ``i``-th run of pieces in windowed key order (``snapfit.stream.direct``).
        """
        key = zlib.crc32(np.asarray(order, np.int64).tobytes())
        rng = np.random.default_rng([self.seed, key])
        n = self.n_chunks
        if self.mode == "cache":
            perm = rng.permutation(len(self.pieces))
            return [np.sort(perm[k::n]) for k in range(n)]
        rank = rng.permutation(len(self.dataset.chunks))
        keys = rank[self.pieces.rg] + self.window * rng.random(len(self.pieces))
        runs = np.array_split(np.argsort(keys, kind="stable"), n)
        groups: list[np.ndarray] = [np.zeros(0, np.int64)] * n
        for i, k in enumerate(order):
            groups[int(k)] = np.sort(runs[i])
        self._rg_order = np.argsort(rank)
        return groups

    def _assemble(self, k: int, buf: np.ndarray, groups, resident) -> Live:
        ps = groups[k]
        n = int(self.pieces.rows[ps].sum())
        nnz = int(self.cache.piece_nnz[ps].sum())
        has_values, has_weight = self._flags
        pos = 0

        def take(dtype, count):
            nonlocal pos
            size = count * np.dtype(dtype).itemsize
            arr = buf[pos : pos + size].view(dtype)
            pos += _align(size)
            return arr

        indptr = take(np.int64, n + 1)
        indices = take(np.int32, nnz)
        values = take(np.float32, nnz) if has_values else None
        y = take(np.float32, n)
        weight = take(np.float32, n) if has_weight else None
        sqnorm = take(np.float32, n)
        width = self.stream_plan.width
        alpha = take(np.float64, n * width)
        if width > 1:  # one-vs-rest: K per row
            alpha = alpha.reshape(n, width)
        indptr[0] = 0
        offsets = self.state.offsets
        r0 = z0 = 0
        for p in ps:
            m, z = int(self.pieces.rows[p]), int(self.cache.piece_nnz[p])
            rows, nzs = slice(r0, r0 + m), slice(z0, z0 + z)
            targets = [indptr[r0 + 1 : r0 + m + 1], indices[nzs]]
            targets += [values[nzs]] if has_values else []
            targets += [y[rows]] + ([weight[rows]] if has_weight else []) + [sqnorm[rows]]
            self.cache.fill(targets, int(p), resident.get(int(p)))
            if z0:
                indptr[r0 + 1 : r0 + m + 1] += z0
            self.state.read_alpha(int(offsets[p]), alpha[rows])
            r0, z0 = r0 + m, z0 + z
        return Live(Chunk(indptr, indices, values, y, weight), sqnorm, alpha, ps)

    def hot_set(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The hot set chosen before the first pass (``hot=True``), else ``None``."""
        return self._hot

    def relabel(self, code: np.ndarray | None, n_threads: int = 1) -> None:
        """Each chunk is relabeled in its buffer as it is handed out, by the consuming thread,
        from the ids the cache stores to ``code``'s (resident pieces are kept as stored); none
        when the cache stores them so already. Call between epochs."""
        self._code = recoding(self._stored_code, code)

    def begin_epoch(self, order: Sequence[int]) -> None:
        """Deal the pieces into this epoch's chunks and load the residents DuHL chose."""
        self._stop_prefetch()
        for p in [p for p in self._resident if p not in self._target]:
            del self._resident[p]  # dropped first, so old and new residents never coexist
        for p in sorted(self._target - set(self._resident)):
            self._resident[p] = self.cache.read_record(p)
        self._groups = self._deal(order)
        self._dealt = [int(k) for k in order]

    def epoch(self, order: Sequence[int]) -> Iterator[tuple[int, Chunk]]:
        if self.state is None:
            raise ResourceError("StreamSource needs its make_state() passed to the engine.")
        if self._dealt != [int(k) for k in order]:
            self.begin_epoch(order)
        self._dealt = None  # the next epoch deals again
        self.pool.reset()
        self._live.clear()
        groups = self._groups
        resident = dict(self._resident)
        if self.mode == "parquet":
            self.cache.begin(self._rg_order, self.plan.resident)
        self._prefetch = pf = Prefetcher(
            order,
            self.pool,
            lambda k, buf: self._assemble(k, buf, groups, resident),
            where=lambda k: self.cache.where(groups[k]),
            # Cache reads are thread-safe (preadv, per-thread scratch); the Parquet decoder
            # feeds one reader.
            n_readers=READERS if self.mode == "cache" else 1,
        )
        t0 = time.perf_counter()
        try:
            for k in order:
                live = pf.get(k)
                if self._code is not None:
                    # Here, not in the prefetch thread: at scale the epochs wait on that one.
                    ids = live.chunk.indices
                    cpu.relabel(ids, self._code, ids)
                self._live[k] = live
                yield k, live.chunk
        finally:
            self._stop_prefetch()
            if self.mode == "parquet" or self.cache_format == "lz4":  # Arrow's pool decoded
                release_arrow_memory()
            self.epoch_stats.append(
                {"seconds": time.perf_counter() - t0, "read_seconds": pf.read_seconds,
                 "io_wait": pf.wait_seconds, "resident_bytes": self.resident_bytes}
            )  # fmt: skip

    def release(self, k: int) -> None:
        """Chunk ``k`` is done: its dual variables go home, then its buffer is refilled."""
        live = self._live.pop(k, None)
        if live is not None:
            offsets, r0 = self.state.offsets, 0
            for p in live.pieces:
                lo, hi = int(offsets[p]), int(offsets[p + 1])
                self.state.write_alpha(lo, live.alpha[r0 : r0 + hi - lo])
                r0 += hi - lo
        self.pool.release(k)

    def piece_gaps(self, chunk_gaps: np.ndarray) -> np.ndarray:
        """Each chunk's gap spread over its pieces by rows (this epoch's deal)."""
        per_piece = np.zeros(len(self.pieces))
        rows = self.pieces.rows
        for k, ps in enumerate(self._groups):
            per_piece[ps] = chunk_gaps[k] * rows[ps] / max(1, rows[ps].sum())
        return per_piece

    def update_gaps(self, gaps: np.ndarray) -> None:
        """Spread each chunk's gap over its pieces, then pick the host residents (DuHL)."""
        self._choose(self.piece_gaps(gaps))

    # -- residency and state ---------------------------------------------------------------
    def _choose(self, gaps: np.ndarray) -> None:
        """DuHL: largest gap per byte first, while the resident share of the budget lasts.

        Ties (the first epoch, when no gap is known) keep the current residents, then go in
        piece order, so nothing is re-read needlessly. Decoding Parquet, the resident share
        holds the decoder's window instead.
        """
        if self.mode != "cache":
            self._target = set()
            return
        n = len(self.pieces)
        keep = np.array([p in self._resident for p in range(n)])
        score = gaps / np.maximum(self._record, 1)
        left = self.plan.resident
        target = set()
        for p in np.lexsort((np.arange(n), ~keep, -score)):
            if self._record[p] <= left:
                target.add(int(p))
                left -= int(self._record[p])
        self._target = target

    def make_state(self, width: int = 1) -> DualState:
        """Dual variables per piece (in a file when the plan says spill); norms come with the
        chunks, so the state hands out the live chunk's arrays. ``width`` is the plan's."""
        if width != self.stream_plan.width:
            raise ValueError(
                f"the stream was planned for {self.stream_plan.width} dual variables per row, "
                f"not {width}; plan it with width={width}."
            )
        state = _PieceState(self, [int(r) for r in self.pieces.rows],
                            spill_dir=self.cache_dir if self.plan.spill_dual else None,
                            width=width)  # fmt: skip
        self.state = state
        return state

    def data_fingerprint(self) -> dict:
        return dataset_fingerprint(self.dataset)

    def fingerprint(self) -> dict:
        """What a checkpoint of this source depends on: pieces, chunks per epoch, deal seed,
        and how epochs deal (from the cache, or decoding Parquet with a window)."""
        out = {
            "kind": "stream",
            "piece_rows": [int(r) for r in self.pieces.rows[:1]] + [len(self.pieces)],
            "n_chunks": self.n_chunks,
            "deal_seed": self.seed,
        }
        if self.mode == "parquet":
            out["parquet_window"] = round(self.window, 6)
        return out

    def _stop_prefetch(self) -> None:
        if self._prefetch is not None:
            if self.mode == "parquet":
                self.cache.abort()  # a reader waiting for a piece returns
            self._prefetch.close()
            self._io_wait += self._prefetch.wait_seconds
            self.read_seconds += self._prefetch.read_seconds
            self._prefetch = None
        if self.mode == "parquet":
            self.cache.end()

    def close(self) -> None:
        self._stop_prefetch()
        self._resident.clear()
        self._live.clear()
        if self.state is not None:
            self.state.close()
        self.cache.close()


class _PieceState(DualState):
    """``DualState`` laid out by piece; a chunk's alpha and norms are its buffer's copies."""

    def __init__(self, source: StreamSource, piece_rows: list[int], spill_dir=None, width=1):
        super().__init__(piece_rows, spill_dir=spill_dir, with_sqnorm=False, width=width)
        self._source = source  # norms live in the cache, not here

    def alpha_of(self, k: int) -> np.ndarray:
        return self._source._live[k].alpha

    def sqnorm_of(self, k: int, chunk) -> np.ndarray:
        return self._source._live[k].sqnorm

    def release(self, k: int) -> None:
        pass  # the source copies alpha back before reusing the buffer
