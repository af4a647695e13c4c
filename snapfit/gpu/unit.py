"""One GPU as a CoCoA+ unit: its own view of ``w`` on the device, passes over pieces of chunks.

Protocol (driven by one host thread, see ``snapfit.gpu.node``)::

    unit.begin(w, n_pieces)                   # upload the epoch's w into the unit's view
    unit.process(j, piece, chunk, sq, alpha, rows)   # enqueue piece j; returns at once
    view, results = unit.finish()             # wait; view = w + sigma * dw, results[j] = (gap, ent)

``alpha`` of a chunk whose rows all belong to this unit and which stays resident lives on the
device across epochs (``on_device``); ``release_alpha(k, host)`` brings it home before any other
unit touches chunk ``k``. Every other piece carries its chunk's alpha up and its own rows' alpha
back down, through the slot's pinned buffers.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from snapfit.gpu.stream import (
    DeviceChunk,
    Slot,
    check_budget,
    choose_residents,
    chunk_device_bytes,
    host_dtypes,
)
from snapfit.solvers import gpu as kernels


class GpuUnit:
    """Kernels, streams, resident chunks and streaming slots of one GPU.

    ``budget`` is the device memory (bytes) the unit may use; None takes 80% of the free memory.
    ``block`` threads per block and ``team`` threads per row (None: from the rows' mean length);
    ``max_blocks`` caps the grid (rows beyond it are taken in further grid-stride rounds).
    """

    def __init__(
        self,
        n_features: int,
        problem,
        *,
        sigma: float = 1.0,
        budget: float | None = None,
        n_slots: int = 2,
        block: int = 128,
        team: int | None = None,
        max_blocks: int = 1024,
    ):
        if n_slots < 2:
            raise ValueError(f"n_slots must be at least 2 (double buffering); got {n_slots}.")
        if not (0 < block <= kernels.MAX_BLOCK and block & (block - 1) == 0):
            raise ValueError(f"block must be a power of two <= {kernels.MAX_BLOCK}; got {block}.")
        self.p = problem
        self.sigma = float(sigma)
        self.block = int(block)
        self.team = team
        self.max_blocks = int(max_blocks)
        self.copy_stream = cuda.stream()
        self.compute_stream = cuda.stream()
        self.w = cuda.device_array(n_features + 1, dtype=np.float64)
        if budget is None:
            free, _ = cuda.current_context().get_memory_info()
            budget = 0.8 * free
        self.budget = float(budget)
        self.slots = [Slot(copied=cuda.event(), done=cuda.event()) for _ in range(n_slots)]
        self._next_slot = 0
        self.resident: dict[int, DeviceChunk] = {}
        self.on_device: set[int] = set()  # resident chunks whose device alpha is the current one
        self.born: set[int] = set()  # chunks the caller gave as device arrays: never evicted
        self.keep: set[int] | None = None  # None: everything may stay (until the first choice)
        self._results = None

    # -- residency (DuHL) ------------------------------------------------------------------
    def fixed_bytes(self) -> int:
        return 8 * self.w.shape[0]

    def choose_residents(self, gaps, nbytes, *, streamed_largest: int) -> None:
        """Keep the highest-gap chunks that fit beside ``w`` and the slots (``nbytes`` per chunk).

        When every chunk fits no slot is needed; otherwise slots for the largest chunk are
        reserved first. Chunks leaving the device take their ``alpha`` home on the next
        ``release_alpha`` (the node calls ``evict`` with the host state).
        """
        total = self.fixed_bytes() + sum(nbytes)
        if total <= self.budget:
            self.keep = set(range(len(nbytes)))
            return
        check_budget(self.budget, self.fixed_bytes(), streamed_largest, len(self.slots))
        room = self.budget - self.fixed_bytes() - len(self.slots) * streamed_largest
        self.keep = choose_residents(gaps, nbytes, room)

    def evict(self, alpha_of) -> None:
        """Drop resident chunks no longer chosen, bringing their device alpha home first."""
        for k in [k for k in self.resident if k not in self.keep and k not in self.born]:
            self.release_alpha(k, alpha_of(k))
            del self.resident[k]

    def release_alpha(self, k: int, host_alpha: np.ndarray) -> None:
        """Make the host copy of chunk ``k``'s alpha current (if the device held it)."""
        if k in self.on_device:
            self.compute_stream.synchronize()
            self.resident[k].alpha[: len(host_alpha)].copy_to_host(host_alpha)
            self.on_device.discard(k)

    # -- a pass ----------------------------------------------------------------------------
    def begin(self, w: np.ndarray, n_pieces: int, width: int = 2) -> None:
        self.compute_stream.synchronize()
        self.w.copy_to_device(np.ascontiguousarray(w, dtype=np.float64))
        self._results = cuda.to_device(np.zeros((max(n_pieces, 1), width)))

    def _slot(self) -> Slot:
        """The next slot, once its previous piece is done and its alpha written back."""
        s = self.slots[self._next_slot]
        self._next_slot = (self._next_slot + 1) % len(self.slots)
        s.copied.synchronize()
        s.done.synchronize()
        self._write_back(s)
        return s

    @staticmethod
    def _write_back(s: Slot) -> None:
        if s.writeback is not None:
            host, lo, hi = s.writeback
            host[lo:hi] = s.pinned["alpha_out"][: hi - lo]
            s.writeback = None

    def _put(self, s: Slot, key: str, src: np.ndarray, dst) -> None:
        """Host ``src`` -> pinned staging -> device ``dst`` (async, on the copy stream)."""
        n = len(src)
        if n == 0:
            return
        buf = s.staging(key, n, src.dtype)
        buf[:] = src
        dst[:n].copy_to_device(buf, stream=self.copy_stream)

    def _stage(self, k: int, chunk, sq, alpha, rows) -> tuple[DeviceChunk, Slot]:
        """Chunk ``k`` on the device with its alpha current; returns it and the slot used."""
        if isinstance(chunk, DeviceChunk):  # born on the device (CuPy input): always resident
            if k not in self.born:
                self.resident[k] = chunk
                self.born.add(k)
                self.on_device.add(k)
            dc = chunk
        else:
            dc = self.resident.get(k)
        s = self._slot()
        n = dc.n_rows if dc is not None else chunk.n_rows
        if dc is None:
            dt = host_dtypes(chunk)
            stay = self.keep is None or k in self.keep
            if stay:
                dc = DeviceChunk.allocate(chunk.n_rows, chunk.nnz, dt)
            else:
                if s.device is None or not s.device.fits(chunk.n_rows, chunk.nnz, dt):
                    s.device = DeviceChunk.allocate(chunk.n_rows, chunk.nnz, dt)
                dc = s.device
            dc.n_rows, dc.nnz = chunk.n_rows, chunk.nnz
            lo = int(chunk.indptr[0])
            self._put(s, "indptr", chunk.indptr - lo if lo else chunk.indptr, dc.indptr)
            self._put(s, "indices", chunk.indices[lo : lo + chunk.nnz], dc.indices)
            if chunk.values is not None:
                self._put(s, "values", chunk.values[lo : lo + chunk.nnz], dc.values)
            self._put(s, "y", chunk.y, dc.y)
            if chunk.weight is not None:
                self._put(s, "weight", chunk.weight, dc.weight)
            self._put(s, "sqnorm", sq, dc.sqnorm)
            if stay:
                self.resident[k] = dc
        if k not in self.on_device:
            self._put(s, "alpha", alpha[:n], dc.alpha)
        if rows is not None:
            self._put(s, "rows", rows.astype(np.int32, copy=False), dc.rows)
        s.copied.record(self.copy_stream)
        s.copied.wait(self.compute_stream)
        return dc, s

    def _grid(self, n_rows: int, team: int) -> int:
        per_block = self.block // team
        return max(1, min(self.max_blocks, -(-n_rows // per_block)))

    def _team(self, dc: DeviceChunk) -> int:
        if self.team is not None:
            return int(self.team)
        return kernels.choose_team(dc.nnz / max(dc.n_rows, 1), self.block)

    def process(self, j: int, k: int, lo: int, hi: int, chunk, sq, alpha, rows) -> None:
        """Enqueue a pass over ``rows`` (rows of ``[lo, hi)`` of chunk ``k``) as piece ``j``.

        ``alpha`` is the host state of the whole chunk; rows ``[lo, hi)`` of it are written back
        when this piece's slot is reused or at ``finish``.
        """
        n = chunk.n_rows
        whole = lo == 0 and hi == n
        dc, s = self._stage(k, chunk, sq, alpha, rows)
        team = self._team(dc)
        p = self.p
        kernels.cd_pass[self._grid(len(rows), team), self.block, self.compute_stream](
            *dc.args(), p.c_pos, p.c_neg, p.bias, dc.sqnorm[:n], dc.alpha[:n], self.w,
            dc.rows[: len(rows)], self.sigma, team, self._results[j],
        )  # fmt: skip
        if k in self.resident and whole:
            self.on_device.add(k)  # the device copy is now the current one
        elif k not in self.on_device:
            out = s.staging("alpha_out", hi - lo, np.float64)
            dc.alpha[lo:hi].copy_to_host(out, stream=self.compute_stream)
            s.writeback = (alpha, lo, hi)
        s.done.record(self.compute_stream)

    def objective(self, j: int, k: int, lo: int, hi: int, chunk, sq, alpha) -> None:
        """Enqueue the exact ``(loss, entropy, gap)`` of rows ``[lo, hi)`` of chunk ``k`` at the
        uploaded ``w`` (``begin(w, n, width=3)``) into result row ``j``."""
        dc, s = self._stage(k, chunk, sq, alpha, None)
        team = self._team(dc)
        p = self.p
        n = dc.n_rows
        kernels.chunk_objective[self._grid(hi - lo, team), self.block, self.compute_stream](
            *dc.args(), p.c_pos, p.c_neg, p.bias, dc.alpha[:n], self.w, lo, hi, team,
            self._results[j],
        )  # fmt: skip
        s.done.record(self.compute_stream)

    def synchronize(self) -> None:
        self.compute_stream.synchronize()

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """Wait for the enqueued work; return the host view of ``w`` and the per-piece results."""
        self.copy_stream.synchronize()
        self.compute_stream.synchronize()
        for s in self.slots:
            self._write_back(s)
        return self.w.copy_to_host(), self._results.copy_to_host()

    def chunk_bytes(self, chunk) -> int:
        return chunk_device_bytes(
            chunk.n_rows, chunk.nnz, chunk.values is not None, chunk.weight is not None
        )

    def close(self) -> None:
        self.finish()
        self.resident.clear()
        self.on_device.clear()
        for s in self.slots:
            s.device = None
            s.pinned.clear()
