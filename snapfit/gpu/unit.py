"""One GPU as a CoCoA+ unit (``snapfit.engine.units.Unit``), touched only from its own thread.

``bind()`` makes the unit's device current on that thread and creates its CUDA streams, its
view of ``w`` and its slots; K GPUs are K independent units (``device_ids``), each with its own
thread, CUDA streams, residents and budget. A pass over an item (rows ``[lo, hi)`` of chunk
``k``):

- a fixed chunk kept whole on the device (``DeviceChunk``) is used where it is; its ``alpha``
  stays on the device across epochs while this unit is the only one to touch the chunk;
- any other chunk is assembled in a slot: row pointers from the host, then each run
  of its pieces either device-to-device from the pieces kept here or host-to-device from the
  host chunk (through the slot's pinned buffers, on the copy CUDA stream), the rows' ``alpha``
  from the host. The compute CUDA stream waits for the slot's ``copied`` event, runs the
  kernel, copies the rows' ``alpha`` back into the slot's pinned buffer and records ``done``;
- ``run`` returns the *previous* item as completed once it is done and its ``alpha`` is back
  in the host arrays: the copy of item i overlaps the kernel of item i-1, and a host buffer is
  released (refilled by a streaming source) only after the device is done with it.

Device memory, pinned buffers, CUDA streams and events come from the unit's backend (CuPy's
pools, or numba's: ``snapfit.gpu.backend``); slots are sized for the largest chunk when the
unit chooses its residents, so a pass allocates nothing per chunk. ``stats`` counts what the
host spends per chunk (allocations, seconds staging and launching). The launch comes from the
device's properties and the chunk's shape (``snapfit.gpu.launch``) unless given.

Under Numba's CUDA simulator kernels run one at a time in the whole process (its kernel state
is global), so launches from several units' threads take turns (``simulator.serial``); on a
GPU each unit launches freely on its own CUDA streams.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np

from snapfit.engine.units import Unit, host_kernels, host_warm
from snapfit.engine.workers import item_span
from snapfit.gpu.backend import Backend, backend_name, choose_backend
from snapfit.gpu.data import (
    DeviceChunk,
    DevicePiece,
    Slot,
    check_budget,
    choose_residents,
    chunk_device_bytes,
    host_dtypes,
    piece_device_bytes,
)
from snapfit.gpu.launch import Launch, choose_launch, device_props
from snapfit.solvers import gpu as kernels
from snapfit.solvers.cudasim import serial

log = logging.getLogger("snapfit")


@dataclass
class HostStats:
    """The host's work per chunk: device and pinned allocations (``by_pass``: those made
    during each pass, after the unit bound), and seconds spent staging and launching (on a GPU
    the kernels run asynchronously, so this is host overhead; under the simulator it includes
    the kernels, which run at launch)."""

    launches: int = 0
    host_seconds: float = 0.0
    allocations: int = 0
    alloc_bytes: int = 0
    by_pass: list = field(default_factory=list)

    def allocated(self, nbytes: int) -> None:
        self.allocations += 1
        self.alloc_bytes += int(nbytes)
        if self.by_pass:
            self.by_pass[-1] += 1

    def summary(self) -> str:
        per = 1e3 * self.host_seconds / max(self.launches, 1)
        later = sum(self.by_pass[1:])
        return (f"{self.launches} launches, {per:.3f} ms host time per launch, "
                f"{self.allocations} allocations ({self.alloc_bytes} bytes), "
                f"{later} of them after the first pass")  # fmt: skip


class GpuUnit(Unit):
    """Kernels, CUDA streams, resident data and slots of one GPU.

    ``budget`` is the device memory (bytes) the unit may use; None takes 80% of the device's
    free memory when the unit binds. ``block`` threads per block, ``team`` threads per row and
    ``max_blocks`` (a cap on the grid; rows beyond it are taken in further grid-stride rounds)
    override the launch rule (``snapfit.gpu.launch``). ``backend``: ``"cupy"``, ``"numba"``, a
    ``Backend``, or None for ``choose_backend``'s choice. ``prior`` is the first epoch's guess
    of the unit's speed relative to one CPU thread.
    """

    reads_device = True

    def __init__(
        self,
        device_id: int,
        source,
        problem,
        *,
        sigma: float = 1.0,
        budget: float | None = None,
        n_slots: int = 2,
        block: int | None = None,
        team: int | None = None,
        max_blocks: int | None = None,
        backend: str | Backend | None = None,
        prior: float = 8.0,
    ):
        if n_slots < 2:
            raise ValueError(f"n_slots must be at least 2 (double buffering); got {n_slots}.")
        top = kernels.MAX_BLOCK
        if block is not None and not (0 < block <= top and block & (block - 1) == 0):
            raise ValueError(f"block must be a power of two <= {top}; got {block}.")
        if team is not None and not (0 < team <= (block or top) and team & (team - 1) == 0):
            raise ValueError(f"team must be a power of two <= block ({block or top}); got {team}.")
        self.device_id = int(device_id)
        self.p = problem
        # One-vs-rest over K classes: the K problems' blocks of w, each problem run on a
        # chunk by the binary kernels with its labels (``class_labels``) and its bounds.
        self.K = problem.n_classes
        self.bounds = list(zip(*host_kernels(problem).bounds, strict=True)) if self.K > 1 else []
        self.sigma = float(sigma)
        self.n_features = int(source.n_features)
        self.redeals = bool(source.redeals)
        self.flags = source.flags()
        self.budget = budget
        self.n_slots = int(n_slots)
        self.block = block
        self.team = team
        self.max_blocks = max_blocks
        self._backend = backend
        self.prior_rate = float(prior)
        self.stats = HostStats()
        self._flat = None  # the per-item results of a pass, (items x width) at its head
        self._spare: list = []  # device data of evicted residents, for the next ones
        # piece id -> its data on the device: whole fixed chunks, or pieces of re-dealt ones
        self.resident: dict[int, DeviceChunk | DevicePiece] = {}
        self.on_device: set[int] = set()  # fixed chunks whose device alpha is the current one
        self.born: set[int] = set()  # chunks the caller gave as device arrays: never evicted
        self.keep: set[int] = set()
        self._pending: Slot | None = None
        self._w0 = None  # a warm start's w0 on the device, for the unit's life (kernels read it)
        # the hot block (``set_hot``): hot positions, the pass's hot moves, rows' curvatures
        self.hot_pos = self.acc = self.curv = None
        self.nh = 0
        self._moves = np.zeros(1)

    # -- life ------------------------------------------------------------------------------
    def bind(self) -> None:
        b = self._backend
        self.backend = b if isinstance(b, Backend) else choose_backend(b)
        self.backend.use(self.device_id)
        self.props = device_props(self.device_id)
        self.copy_stream = self.backend.stream()
        self.compute_stream = self.backend.stream()
        if self.budget is None:
            self.budget = 0.8 * self.backend.free_bytes()
        self.budget = float(self.budget)
        self.backend.set_limit(pool_limit(self.budget))
        self.w = self._alloc(self.K * (self.n_features + 1), np.float64)
        self.counts = self._alloc(max(self.n_features, 1), np.int32)
        self.slots = [Slot(alloc=self._pinned, copied=self.backend.event(),
                           done=self.backend.event()) for _ in range(self.n_slots)]  # fmt: skip
        self._next_slot = 0
        self._host_sum = np.zeros(self.K * (self.n_features + 1))

    def close(self) -> None:
        self.copy_stream.synchronize(self._what("closing: the copy stream"))
        self.compute_stream.synchronize(self._what("closing: the compute stream"))
        self.resident.clear()
        self.on_device.clear()
        for s in self.slots:
            s.device = None
            s.pinned.clear()
        self._flat = None
        self._w0 = None
        self._spare.clear()
        log.debug("GPU %d (%s): %s", self.device_id, backend_name(self.backend),
                  self.stats.summary())  # fmt: skip

    def _what(self, op: str) -> str:
        """``op`` as a stall's message names it: which GPU, which backend."""
        return f"GPU {self.device_id} ({backend_name(self.backend)}): {op}"

    def _alloc(self, shape, dtype):
        """Device memory from the backend, counted in ``stats``."""
        self.stats.allocated(int(np.prod(shape)) * np.dtype(dtype).itemsize)
        return self.backend.empty(shape, dtype)

    def _pinned(self, n: int, dtype) -> np.ndarray:
        """Pinned host memory from the backend, counted in ``stats``."""
        self.stats.allocated(n * np.dtype(dtype).itemsize)
        return self.backend.pinned(n, dtype)

    # -- residency (DuHL) ------------------------------------------------------------------
    def fixed_bytes(self) -> int:
        """``w`` (float64, a block per problem) and the column counts of the safe step (int32);
        under the hot block its positions, moves, the rows' curvatures and the exact check's
        sums too."""
        hot = 0
        if self.hot_pos is not None:  # positions, v, dv, moves, delta, lag sums, curvatures
            hot = 8 * (3 * (self.n_features + 1) + 2 * max(self.nh, 1) + 4 * kernels.LAG_STEPS
                       + self.curv.shape[0])  # fmt: skip
        return 8 * self.K * (self.n_features + 1) + 4 * max(self.n_features, 1) + hot

    # -- the hot block ---------------------------------------------------------------------
    def set_hot(self, labels) -> None:
        hot_pos = labels.hot_pos
        self.nh = int(labels.nh)
        self.hot_pos = self._alloc(len(hot_pos), np.int64)
        self.backend.h2d(self.hot_pos, np.ascontiguousarray(hot_pos, np.int64),
                         self.compute_stream)  # fmt: skip
        self.acc = self._alloc(max(self.nh, 1), np.float64)
        self.curv = self._alloc(1, np.float64)
        self._moves = np.zeros(max(self.nh, 1))
        # the exact check's pass (``lag``): v, dv, the last step's move, its steps and sums
        self._v = self._alloc(self.n_features + 1, np.float64)
        self._dv = self._alloc(self.n_features + 1, np.float64)
        self._delta = self._alloc(max(self.nh, 1), np.float64)
        self._grid = self._alloc(kernels.LAG_STEPS, np.float64)
        self._lag = self._alloc(3 * kernels.LAG_STEPS, np.float64)
        self._steps = 0

    def hot_moves(self) -> np.ndarray:
        return self._moves

    def begin_lag(self, delta: np.ndarray, grid: np.ndarray) -> None:
        """Before the exact check's pass (``lag``; after ``begin``, which uploads ``w``): the
        last hot step's move ``delta`` and the correction's steps ``grid`` up, the sums
        zeroed."""
        if len(grid) > kernels.LAG_STEPS:
            raise ValueError(f"at most {kernels.LAG_STEPS} steps of the lag correction")
        self._steps = len(grid)
        stream = self.compute_stream
        if self.nh:
            self.backend.h2d(self._delta[: self.nh], np.ascontiguousarray(delta, np.float64),
                             stream)  # fmt: skip
        self.backend.h2d(self._grid[: self._steps], np.ascontiguousarray(grid, np.float64),
                         stream)  # fmt: skip
        self.backend.zero(self._v, stream)
        self.backend.zero(self._dv, stream)
        self.backend.zero(self._lag, stream)

    def lag(self, item, chunk, alpha, sqnorm, layout) -> list:
        """``kernels.lag_terms`` over the item's rows at the uploaded ``w`` (``begin_lag``
        first), into the unit's sums (``lag_sums``). Why on the device: on the host this pass
        was ~8-10 s an exact check at 200M rows on 16 threads, ~40 % of an H200 fit
        (docs/gpu-performance-model.md)."""
        start = time.perf_counter()
        lo, hi = item_span(item, chunk.n_rows)
        dc, s = self._stage(item.k, chunk, sqnorm, alpha, lo, hi, layout, None)
        lp = self._launch(hi - lo, dc)
        p, g = self.p, self._steps
        with serial:
            self.backend.launch(kernels.lag_terms, lp.blocks, lp.block, self.compute_stream)(
                *dc.args(), p.c_pos, p.c_neg, p.bias, dc.alpha[: dc.n_rows], self.hot_pos,
                self._delta[: self.nh], self._grid[:g], self.w, lo, hi, lp.team, self._v,
                self._dv, self._lag[: 3 * g],
            )  # fmt: skip
        return self._enqueued(s, item, start)

    def lag_sums(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """After a lag pass's ``finish``: ``v`` and ``dv`` (the data's ids, the intercept
        last) and the other sums, ``(ent, slope, bend, loss)`` end to end (``kernels.
        lag_terms``' ``out``)."""
        v, dv = np.empty(self.n_features + 1), np.empty(self.n_features + 1)
        out = np.empty(3 * self._steps)
        self.backend.d2h(v, self._v, self.compute_stream)
        self.backend.d2h(dv, self._dv, self.compute_stream)
        self.backend.d2h(out, self._lag[: 3 * self._steps], self.compute_stream)
        self.compute_stream.synchronize(self._what("the lag pass's sums to the host"))
        return v, dv, out

    def _curv_for(self, n_rows: int):
        """The rows' curvature buffer, grown to ``n_rows`` when a larger chunk comes."""
        if self.curv.shape[0] < n_rows:
            self.compute_stream.synchronize(self._what("kernels reading the curvatures"))
            self.curv = self._alloc(n_rows, np.float64)
        return self.curv

    def _nbytes(self, rows, nnz):
        """Device bytes of pieces of these sizes as this unit keeps them."""
        if self.redeals:
            return piece_device_bytes(rows, nnz, *self.flags)
        return chunk_device_bytes(rows, nnz, *self.flags, self.K)

    def choose(self, gaps, sizes, largest, alpha_of) -> None:
        """Keep the pieces with the largest gap per byte that fit beside ``w`` and the slots.

        When every piece fits, no slot is needed and all stay. Pieces leaving the device take
        their ``alpha`` home first (``alpha_of``); their device data is kept for a piece coming
        in that it holds (``_spare``) when the budget still holds, and freed otherwise.
        """
        nbytes = self._nbytes(np.asarray(sizes[0]), np.asarray(sizes[1]))
        for s in self.slots:
            s.size_for(*largest)
        room = self.budget - self.fixed_bytes()
        if self.fixed_bytes() + int(np.sum(nbytes)) <= self.budget:
            self.keep = set(range(len(nbytes)))
        else:
            slot = chunk_device_bytes(*largest, *self.flags)
            check_budget(self.budget, self.fixed_bytes(), slot, self.n_slots)
            room -= self.n_slots * slot
            self.keep = choose_residents(gaps, nbytes, room)
        self._spare.clear()  # what the last epoch's newcomers did not take
        incoming = [p for p in sorted(self.keep) if p not in self.resident]
        staying = [p for p in self.resident if p in self.keep and p not in self.born]
        used = sum(self._held(self.resident[p]) for p in staying) + sum(nbytes[incoming])
        for p in [p for p in self.resident if p not in self.keep and p not in self.born]:
            self.sync_alpha(alpha_of, {p})
            old = self.resident.pop(p)
            for q in incoming:  # the first newcomer it holds, if the budget allows the excess
                extra = self._held(old) - nbytes[q]
                fits = old.y.shape[0] >= sizes[0][q] and old.indices.shape[0] >= sizes[1][q]
                if fits and used + extra <= room:
                    incoming.remove(q)
                    used += extra
                    self._spare.append(old)
                    break

    def _held(self, data) -> int:
        """Device bytes ``data`` (a resident chunk or piece) holds: its capacity, counted as
        DuHL counts pieces."""
        return int(self._nbytes(data.y.shape[0], data.indices.shape[0]))

    def resident_chunks(self) -> set[int]:
        return set() if self.redeals else set(self.resident)

    def sync_alpha(self, alpha_of, only=None) -> None:
        for k in [k for k in self.on_device if only is None or k in only]:
            host = alpha_of(k)
            dc = self.resident[k]
            if self.K == 1:
                self.backend.d2h(host, dc.alpha[: len(host)], self.compute_stream)
            else:  # the device keeps a block per problem, the host a row of K per row
                blocks = np.empty((self.K, len(host)))
                for c in range(self.K):
                    self.backend.d2h(blocks[c], dc.alpha_of(c)[: len(host)], self.compute_stream)
            self.compute_stream.synchronize(self._what(f"chunk {k}'s alpha to the host"))
            if self.K > 1:
                host[:] = blocks.T
            self.on_device.discard(k)

    def drop_alpha(self) -> None:
        self.on_device.clear()

    # -- a pass ----------------------------------------------------------------------------
    def begin(self, w, n_items, width=2) -> None:
        """Upload ``w`` and zero the per-item results (one buffer of 3 per item, reused)."""
        self.compute_stream.synchronize(self._what("the last pass's kernels"))
        self.stats.by_pass.append(0)
        w64 = np.ascontiguousarray(w, dtype=np.float64)
        self.backend.h2d(self.w, w64, self.compute_stream)  # before this pass's kernels
        n = max(n_items, 1)
        if self._flat is None or self._flat.shape[0] < 3 * n:
            self._flat = self._alloc(3 * n, np.float64)
        self.backend.zero(self._flat, self.compute_stream)
        self._result = self._flat[: n * width].reshape(n, width)
        self._host_sum[:] = 0.0
        if self.acc is not None:
            self.backend.zero(self.acc, self.compute_stream)

    def run(self, item, chunk, alpha, sqnorm, rows, layout) -> list:
        start = time.perf_counter()
        lo, hi = item_span(item, chunk.n_rows)
        dc, s = self._stage(item.k, chunk, sqnorm, alpha, lo, hi, layout, rows)
        lp = self._launch(len(rows), dc)
        p = self.p
        n = dc.n_rows
        args = dc.args()
        order = dc.rows[: len(rows)]
        stream = self.compute_stream
        launch = self.backend.launch
        with serial:
            if lp.rows_in_flight > 1:  # the safe step needs the columns' counts
                self.backend.zero(self.counts, stream)
                launch(kernels.column_counts, lp.blocks, lp.block, stream)(
                    args[0], args[1], order, lp.team, self.counts
                )
            if self.hot_pos is not None:
                self._hot_pass(dc, args, order, lp, self._result[item.seq])
            else:
                for (c_pos, c_neg), labels, alpha_c, w_c in self._problems(dc, p, args[4], lp):
                    launch(kernels.cd_pass, lp.blocks, lp.block, stream)(
                        *args[:4], labels, *args[5:], c_pos, c_neg, p.bias, dc.sqnorm[:n],
                        self.counts, alpha_c[:n], w_c, order, self.sigma, lp.team,
                        self._result[item.seq], p.loss,
                    )  # fmt: skip
        if dc is self.resident.get(item.k) and not self.redeals and (lo, hi) == (0, n):
            self.on_device.add(item.k)  # the device copy is now the current one
        else:
            self.on_device.discard(item.k)
            m = hi - lo
            out = s.staging("alpha_out", m * self.K, np.float64)
            for c in range(self.K):
                src = dc.alpha_of(c)[lo:hi]
                self.backend.d2h(out[c * m : (c + 1) * m], src, self.compute_stream)
            s.writeback = (alpha, lo, hi)
        return self._enqueued(s, item, start)

    def _hot_pass(self, dc, args, order, lp: Launch, out) -> None:
        """The rows' cold curvature (``cold_curvature``, on this launch's rows in flight),
        then ``cd_pass_hot`` (the caller holds ``serial``; one problem)."""
        p, n, stream = self.p, dc.n_rows, self.compute_stream
        curv = self._curv_for(n)
        launch = self.backend.launch
        launch(kernels.cold_curvature, lp.blocks, lp.block, stream)(
            *args[:4], p.bias, dc.sqnorm[:n], self.hot_pos, self.counts, order, self.sigma,
            lp.team, curv,
        )  # fmt: skip
        launch(kernels.cd_pass_hot, lp.blocks, lp.block, stream)(
            *args, p.c_pos, p.c_neg, p.bias, curv, self.hot_pos, dc.alpha[:n], self.w, self.acc,
            order, self.sigma, lp.team, out, p.loss,
        )  # fmt: skip

    def _problems(self, dc, p, y, lp: Launch):
        """Per problem: ``(bounds, labels, alpha, w block)`` on the device. One
        problem: the chunk's own. One-vs-rest: class ``c``'s labels are made in ``dc.labels``
        by ``class_labels`` just before its kernel (on the same CUDA stream)."""
        if self.K == 1:
            yield (p.c_pos, p.c_neg), y, dc.alpha, self.w
            return
        n, d1 = dc.n_rows, self.n_features + 1
        for c in range(self.K):
            self.backend.launch(kernels.class_labels, lp.blocks, lp.block, self.compute_stream)(
                y, c, dc.labels[:n]
            )
            w_c = self.w[c * d1 : (c + 1) * d1]
            yield self.bounds[c], dc.labels[:n], dc.alpha_of(c), w_c

    def objective(self, item, chunk, alpha, sqnorm, w, layout) -> list:
        """Exact ``(loss, entropy, gap)`` of the item's rows at the uploaded ``w``
        (``begin(w, n, width=3)``) into result row ``item.seq``.

        The objective reads no row norms, but the staging uploads them: a chunk or piece that
        becomes resident here is run from the device in later passes, norms included."""
        start = time.perf_counter()
        lo, hi = item_span(item, chunk.n_rows)
        dc, s = self._stage(item.k, chunk, sqnorm, alpha, lo, hi, layout, None)
        lp = self._launch(hi - lo, dc)
        p = self.p
        args = dc.args()
        with serial:
            for (c_pos, c_neg), labels, alpha_c, w_c in self._problems(dc, p, args[4], lp):
                self.backend.launch(kernels.chunk_objective, lp.blocks, lp.block,
                                    self.compute_stream)(
                    *args[:4], labels, *args[5:], c_pos, c_neg, p.bias, alpha_c[: dc.n_rows],
                    w_c, lo, hi, lp.team, self._result[item.seq], p.loss,
                )  # fmt: skip
        return self._enqueued(s, item, start)

    def warm(self, item, chunk, alpha, w0) -> None:
        """Host chunks: ``host_warm`` on this thread into a host sum. Chunks born on the
        device: the ``warm_start`` kernel into the device view, ``alpha`` staying there."""
        if not isinstance(chunk, DeviceChunk):
            host_warm(self.p, chunk, alpha, w0, self._host_sum)
            return
        dc = self._born(item.k, chunk)
        n = dc.n_rows
        stream = self.compute_stream
        if w0 is None:  # alpha from the host state (a checkpoint); w0 is then not read
            self.backend.h2d(dc.alpha[:n], np.ascontiguousarray(alpha[:n]), stream)
            w0_dev = self.w
        else:  # ordered before the kernel on its stream; kept while kernels may read it
            if self._w0 is None:
                self._w0 = self._alloc(self.n_features + 1, np.float64)
            self.backend.h2d(self._w0, np.ascontiguousarray(w0, dtype=np.float64), stream)
            w0_dev = self._w0
        lp = self._launch(n, dc)
        p = self.p
        with serial:
            self.backend.launch(kernels.warm_start, lp.blocks, lp.block, stream)(
                *dc.args(), p.c_pos, p.c_neg, p.bias, w0_dev, w0 is not None, dc.alpha[:n],
                self.w, lp.team, p.loss,
            )  # fmt: skip
        self.on_device.add(item.k)

    def flush(self) -> list:
        s, self._pending = self._pending, None
        return self._complete(s) if s is not None else []

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """Wait for the enqueued work; the host view of ``w`` and the per-item results."""
        self.copy_stream.synchronize(self._what("the pass's copies"))
        view = np.empty(self.K * (self.n_features + 1))
        results = np.empty(self._result.shape)
        self.backend.d2h(view, self.w, self.compute_stream)
        self.backend.d2h(results, self._result, self.compute_stream)
        if self.acc is not None:
            self.backend.d2h(self._moves, self.acc, self.compute_stream)
        self.compute_stream.synchronize(self._what("the pass's kernels and w to the host"))
        view += self._host_sum
        return view, results

    # -- slots and staging -----------------------------------------------------------------
    def _enqueued(self, s: Slot, item, start: float) -> list:
        """Mark ``s`` as holding ``item``; complete the item enqueued before it. The host time
        since ``start`` (staging and launching ``item``) goes into ``stats``."""
        self.stats.launches += 1
        self.stats.host_seconds += time.perf_counter() - start
        s.done.record(self.compute_stream)
        s.item = item
        prev, self._pending = self._pending, s
        return self._complete(prev) if prev is not None else []

    def _complete(self, s: Slot) -> list:
        """Wait until slot ``s`` is done, write its ``alpha`` back; its item is complete."""
        s.done.synchronize(self._what(f"the kernels of an item of chunk {s.item.k}"))
        if s.writeback is not None:
            host, lo, hi = s.writeback
            out = s.pinned["alpha_out"][: (hi - lo) * self.K]
            host[lo:hi] = out if self.K == 1 else out.reshape(self.K, hi - lo).T
            s.writeback = None
        item, s.item = s.item, None
        return [(item, None)]

    def _slot(self) -> Slot:
        """The next slot; its previous item was completed before this one was enqueued."""
        s = self.slots[self._next_slot]
        self._next_slot = (self._next_slot + 1) % len(self.slots)
        s.copied.synchronize(self._what("a slot's copies"))  # its pinned buffers are free again
        return s

    def _put(self, s: Slot, key: str, src: np.ndarray, dst, at: int = 0, total: int = 0) -> None:
        """Host ``src`` -> the slot's pinned buffer at ``at`` -> device ``dst[at:]`` (async,
        on the copy CUDA stream). Disjoint ranges of one chunk use disjoint parts of the buffer, so
        no copy still in flight is overwritten."""
        n = len(src)
        if n == 0:
            return
        buf = s.staging(key, max(total, at + n), src.dtype)[at : at + n]
        buf[:] = src
        self.backend.h2d(dst[at : at + n], buf, self.copy_stream)

    def _reuse(self, kind, n_rows: int, nnz: int, dtypes: dict):
        """Device data for a new resident: an evicted one's kept for it (DuHL's choice changes
        between epochs; no allocation then), else newly allocated."""
        for i, old in enumerate(self._spare):
            if isinstance(old, kind) and old.fits(n_rows, nnz, dtypes):
                new = self._spare.pop(i)
                new.n_rows, new.nnz = n_rows, nnz
                return new
        if kind is DeviceChunk:
            return DeviceChunk.allocate(n_rows, nnz, dtypes, self._alloc, self.K)
        return kind.allocate(n_rows, nnz, dtypes, self._alloc)

    def _born(self, k: int, chunk: DeviceChunk) -> DeviceChunk:
        """A chunk given as device arrays (CuPy input): resident for good, never evicted."""
        if k not in self.born:
            self.resident[k] = chunk
            self.born.add(k)
        return chunk

    def _stage(self, k, chunk, sqnorm, alpha, lo, hi, layout, rows):
        """Chunk ``k`` on the device with rows ``[lo, hi)`` of its ``alpha`` current and the
        visiting order ``rows`` uploaded; returns the device chunk and the slot used."""
        s = self._slot()
        if isinstance(chunk, DeviceChunk):
            dc = self._born(k, chunk)
        else:
            single = len(layout.pieces) == 1 and not self.redeals
            dc = self.resident.get(k) if single else None
            if dc is None:
                dt = host_dtypes(chunk)
                if single and k in self.keep:
                    dc = self.resident[k] = self._reuse(DeviceChunk, chunk.n_rows, chunk.nnz, dt)
                else:
                    if s.device is None or not s.device.fits(chunk.n_rows, chunk.nnz, dt):
                        size = max(chunk.n_rows, s.rows), max(chunk.nnz, s.nnz)
                        s.device = DeviceChunk.allocate(*size, dt, self._alloc, self.K)
                    dc = s.device
                dc.n_rows, dc.nnz = chunk.n_rows, chunk.nnz
                self._upload(s, dc, chunk, sqnorm, layout)
        if k not in self.on_device and self.K == 1:
            self._put(s, "alpha", alpha[lo:hi], dc.alpha, lo, dc.n_rows)
        elif k not in self.on_device:  # a block per problem on the device
            for c in range(self.K):
                part = np.ascontiguousarray(alpha[lo:hi, c])
                self._put(s, f"alpha{c}", part, dc.alpha_of(c), lo, dc.n_rows)
        if rows is not None:
            self._put(s, "rows", rows.astype(np.int32, copy=False), dc.rows)
        s.copied.record(self.copy_stream)
        s.copied.wait(self.compute_stream)
        return dc, s

    def _upload(self, s: Slot, dc: DeviceChunk, chunk, sqnorm, layout) -> None:
        """Fill ``dc`` with ``chunk``: row pointers from the host, then every run of pieces
        from the pieces kept here (device to device) or from the host chunk; pieces chosen to
        stay that are not here yet are captured from ``dc`` on their way through."""
        z_base = int(chunk.indptr[0])
        n, nnz = chunk.n_rows, chunk.nnz
        indptr = chunk.indptr - z_base if z_base else chunk.indptr
        self._put(s, "indptr", indptr, dc.indptr)
        rows0 = np.concatenate([[0], np.cumsum(layout.rows)])
        nnz0 = np.concatenate([[0], np.cumsum(layout.nnz)])
        row_arrays = [("y", chunk.y, dc.y), ("weight", chunk.weight, dc.weight),
                      ("sqnorm", sqnorm, dc.sqnorm)]  # fmt: skip
        nz_arrays = [("indices", chunk.indices, dc.indices), ("values", chunk.values, dc.values)]
        kept = [self.resident.get(int(p)) if self.redeals else None for p in layout.pieces]
        stream = self.copy_stream
        j = 0
        while j < len(kept):
            if kept[j] is not None:  # a piece kept here: device to device
                kp = kept[j]
                r, z = int(rows0[j]), int(nnz0[j])
                for name, _, dst in nz_arrays:
                    if dst is not None:
                        self.backend.d2d(dst[z : z + kp.nnz], getattr(kp, name)[: kp.nnz], stream)
                for name, _, dst in row_arrays:
                    if dst is not None:
                        src = getattr(kp, name)[: kp.n_rows]
                        self.backend.d2d(dst[r : r + kp.n_rows], src, stream)
                j += 1
                continue
            e = j
            while e < len(kept) and kept[e] is None:
                e += 1
            r0, r1, z0, z1 = int(rows0[j]), int(rows0[e]), int(nnz0[j]), int(nnz0[e])
            for name, src, dst in nz_arrays:
                if src is not None:
                    self._put(s, name, src[z_base + z0 : z_base + z1], dst, z0, nnz)
            for name, src, dst in row_arrays:
                if src is not None:
                    self._put(s, name, src[r0:r1], dst, r0, n)
            j = e
        if self.redeals:
            for j, p in enumerate(int(p) for p in layout.pieces):
                if p in self.keep and kept[j] is None:
                    shape = int(layout.rows[j]), int(layout.nnz[j])
                    self.resident[p] = self._capture(dc, int(rows0[j]), int(nnz0[j]), *shape)

    def _capture(self, dc: DeviceChunk, r: int, z: int, m: int, nz: int) -> DevicePiece:
        """A piece of ``dc`` (rows ``[r, r+m)``, values ``[z, z+nz)``) copied to its own
        device arrays, after the uploads queued before it on the copy CUDA stream."""
        dt = {"indices": dc.indices.dtype, "y": dc.y.dtype, "sqnorm": dc.sqnorm.dtype,
              "values": None if dc.values is None else dc.values.dtype,
              "weight": None if dc.weight is None else dc.weight.dtype}  # fmt: skip
        kp = self._reuse(DevicePiece, m, nz, dt)
        for name, lo, size in (("indices", z, nz), ("values", z, nz), ("y", r, m),
                               ("weight", r, m), ("sqnorm", r, m)):  # fmt: skip
            dst = getattr(kp, name)
            if dst is not None and size:
                src = getattr(dc, name)[lo : lo + size]
                self.backend.d2d(dst[:size], src, self.copy_stream)
        return kp

    # -- launch geometry -------------------------------------------------------------------
    def _launch(self, n_rows: int, dc: DeviceChunk) -> Launch:
        """The rule's launch for ``n_rows`` rows of ``dc`` (the unit's options override it)."""
        return choose_launch(self.props, n_rows, dc.nnz / max(dc.n_rows, 1), block=self.block,
                             team=self.team, max_blocks=self.max_blocks,
                             fill=self.hot_pos is not None)  # fmt: skip


def pool_limit(budget: float) -> float:
    """The cap on the backend's device memory: the budget, which DuHL's count of ``w``, slots
    and residents keeps to, plus what that count leaves out (the per-item results, a warm
    start's ``w0``, an allocator's rounding: CuPy's pool rounds every block up to 512 bytes).
    The cap is a backstop: past it an allocation is a ``ResourceError``, not a device OOM."""
    return budget + 2**20 + 0.01 * budget
