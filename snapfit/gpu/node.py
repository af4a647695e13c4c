"""A heterogeneous node: one GPU and ``n_cpu`` CPU threads, each a CoCoA+ unit.

``HeteroTrainer`` has the duck type of ``snapfit.engine.Trainer`` that ``snapfit.engine.fit``
drives (``epoch``, ``history``, ``w``, ``run_epoch()``, ``confirm(rec)``, ``warm_start(w0)``,
``close()``), so ``fit(source, problem, trainer=HeteroTrainer(source, problem))`` trains on the
GPU with no change to the engine. Each epoch:

1. the rows are split between the units in proportion to their rows/s measured on the previous
   epoch (``proportional_split``; the CPU threads take the residue);
2. every unit starts from the same ``w`` and runs its pieces on its own view with
   ``sigma' = K`` (all units: the GPU counts as one); thread 0 of the group drives the GPU;
3. the views are averaged (CoCoA+), gaps and entropy are summed per chunk as in the CPU trainer;
4. the per-chunk gaps choose which chunks stay resident on the device (DuHL).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from snapfit.engine.loop import Trainer
from snapfit.engine.problem import EpochRecord, Problem
from snapfit.engine.state import DualState
from snapfit.engine.workers import Item, ThreadGroup, row_order
from snapfit.gpu.split import RateMeter, proportional_split
from snapfit.gpu.stream import DeviceChunk, chunk_device_bytes
from snapfit.gpu.unit import GpuUnit
from snapfit.solvers import cpu


@dataclass
class PieceItem(Item):
    """An ``Item`` (chunk ``k`` for unit ``thread``) restricted to rows ``[lo, hi)``."""

    lo: int = 0
    hi: int = 0


class HeteroTrainer:
    """The GPU plus ``n_cpu`` CPU threads (default ``problem.n_jobs - 1``, at least 0).

    ``gpu_prior`` is the first epoch's guess of the GPU's speed relative to one CPU thread;
    ``rebalance=False`` keeps that split instead of re-measuring the rates every epoch;
    ``gpu_options`` go to ``GpuUnit`` (``budget``, ``block``, ``team``, ``max_blocks``, ...).
    """

    def __init__(
        self,
        source,
        problem: Problem,
        *,
        n_cpu: int | None = None,
        gpu_prior: float = 8.0,
        rebalance: bool = True,
        gpu_options: dict | None = None,
    ):
        self.source = source
        self.problem = problem
        self.n_cpu = max(0, int(problem.n_jobs) - 1) if n_cpu is None else int(n_cpu)
        self.k = 1 + self.n_cpu
        self.sigma = float(self.k)
        d = source.n_features
        rows = [source.chunk_rows(k) for k in range(source.n_chunks)]
        self.state = DualState(rows)
        self.w = np.zeros(d + 1)
        self.cpu_views = [np.empty_like(self.w) for _ in range(self.n_cpu)]
        self.gpu = GpuUnit(d, problem, sigma=self.sigma, **(gpu_options or {}))
        self.meter = RateMeter([gpu_prior] + [1.0] * self.n_cpu)
        self.rebalance = bool(rebalance)
        self.chunk_gaps = np.zeros(source.n_chunks)
        self.chunk_nbytes: list[int] | None = None
        self.nnz = [source.chunk_nnz(k) for k in range(source.n_chunks)]
        self.epoch = 0
        self.history: list[EpochRecord] = []
        self._group = ThreadGroup(self.k)
        self._busy = np.zeros(self.k)
        self._done_rows = np.zeros(self.k, dtype=np.int64)

    # -- planning --------------------------------------------------------------------------
    def _plan(self, rng_key: int) -> tuple[list[int], list[list[PieceItem]]]:
        p = self.problem
        rng = np.random.default_rng([p.seed, self.epoch, rng_key])
        order = [int(k) for k in rng.permutation(self.source.n_chunks)]
        rows = [self.source.chunk_rows(k) for k in range(self.source.n_chunks)]
        split = proportional_split(rows, self.meter.rates, order)
        plan = [
            [PieceItem(pc.k, u, j, len(pieces), pc.lo, pc.hi) for j, pc in enumerate(pieces)]
            for u, pieces in enumerate(split)
        ]
        # Chunks whose rows another unit touches must have their alpha on the host.
        for items in plan[1:]:
            for it in items:
                self.gpu.release_alpha(it.k, self.state.alpha_of(it.k))
        # A chunk only the CPU visits this epoch need not be delivered in GPU order; all are.
        return order, plan

    def _sq(self, t: int, k: int, chunk):
        if isinstance(chunk, DeviceChunk):
            return None
        return self.state.sqnorm_of(k, chunk)

    def _rows(self, it: PieceItem, gpu: bool) -> np.ndarray:
        # Many rows are in flight on a GPU, so there is no cache locality to keep: full shuffle.
        bucket = 1 if gpu else self.problem.bucket_rows
        key = [self.problem.seed, self.epoch, it.k, it.lo]
        return row_order(it.hi - it.lo, bucket, key) + it.lo

    # -- per-unit work ---------------------------------------------------------------------
    def _pass(self, t: int, it: PieceItem, chunk):
        t0 = time.perf_counter()
        if self.chunk_nbytes is not None:  # exact once seen (the first guess assumes the worst)
            self.chunk_nbytes[it.k] = self.chunk_device_bytes(chunk)
        sq = self._sq(t, it.k, chunk)
        alpha = self.state.alpha_of(it.k)
        if t == 0:
            self.gpu.process(it.part, it.k, it.lo, it.hi, chunk, sq, alpha, self._rows(it, True))
            if it.part == it.n_parts - 1:
                self.gpu.synchronize()  # the GPU's busy time ends when its last piece does
            result = None
        else:
            p = self.problem
            result = cpu.cd_pass(
                *cpu.chunk_args(chunk), p.c_pos, p.c_neg, p.bias, sq, alpha, self.cpu_views[t - 1],
                self._rows(it, False), self.sigma,
            )  # fmt: skip
        self._busy[t] += time.perf_counter() - t0
        self._done_rows[t] += it.hi - it.lo
        return result

    def _objective(self, t: int, it: PieceItem, chunk):
        sq = self._sq(t, it.k, chunk)
        alpha = self.state.alpha_of(it.k)
        if t == 0:
            self.gpu.objective(it.part, it.k, it.lo, it.hi, chunk, sq, alpha)
            return None
        p = self.problem
        return cpu.chunk_objective(
            *cpu.chunk_args(chunk, it.lo, it.hi), p.c_pos, p.c_neg, p.bias, alpha[it.lo : it.hi],
            self.w,
        )  # fmt: skip

    def _run(self, order, plan, fn):
        release = getattr(self.source, "release", lambda k: None)
        return self._group.run(self.source.epoch(order), plan, fn, release)

    @staticmethod
    def chunk_device_bytes(chunk) -> int:
        """Device bytes a resident chunk takes (arrays, sqnorm, alpha, visiting order)."""
        return chunk_device_bytes(
            chunk.n_rows, chunk.nnz, chunk.values is not None, chunk.weight is not None
        )

    def _residency(self) -> None:
        """Refresh the device's resident set from the latest per-chunk gaps (DuHL)."""
        if self.chunk_nbytes is None:
            self.chunk_nbytes = [
                self.gpu.chunk_bytes(_Shape(self.source.chunk_rows(k), self.nnz[k]))
                for k in range(self.source.n_chunks)
            ]
        nb = self.chunk_nbytes
        self.gpu.choose_residents(self.chunk_gaps, nb, streamed_largest=max(nb))
        self.gpu.evict(self.state.alpha_of)

    # -- the Trainer duck type -------------------------------------------------------------
    def run_epoch(self) -> EpochRecord:
        if self.epoch == 0:
            self._residency()
        order, plan = self._plan(2**31 - 2)
        self.gpu.begin(self.w, len(plan[0]))
        for v in self.cpu_views:
            v[:] = self.w
        self._busy[:] = 0.0
        self._done_rows[:] = 0
        io0 = self.source.io_wait
        t0 = time.perf_counter()
        results = self._run(order, plan, self._pass)
        view, gpu_results = self.gpu.finish()
        self.w[:] = view
        for v in self.cpu_views:
            self.w += v
        self.w /= self.k
        seconds = time.perf_counter() - t0
        for t in range(self.k if self.rebalance else 0):
            self.meter.update(t, int(self._done_rows[t]), float(self._busy[t]))
        gaps = [(it.k, *(gpu_results[it.part] if it.thread == 0 else r)) for it, r in results]
        rec = self._close_epoch(gaps, seconds, io0)
        self._residency()
        return rec

    def exact_objective(self) -> tuple[float, float, float]:
        """Exact ``(primal, dual, gap)`` at ``w`` and ``alpha``, shared out like an epoch."""
        order, plan = self._plan(2**31 - 3)
        self.gpu.begin(self.w, len(plan[0]), width=3)
        results = self._run(order, plan, self._objective)
        _, gpu_results = self.gpu.finish()
        loss = ent = 0.0
        for it, r in results:
            row = gpu_results[it.part] if it.thread == 0 else r
            loss += row[0]
            ent += row[1]
        return self._objective_of(loss, ent)

    # The engine's epoch bookkeeping and exact check serve here unchanged.
    _close_epoch = Trainer._close_epoch
    _objective_of = Trainer._objective_of
    confirm = Trainer.confirm

    def warm_start(self, w0: np.ndarray) -> None:
        """Start from the dual point paired with ``w0`` (on the host, before any epoch)."""
        p = self.problem
        w0 = np.asarray(w0, dtype=np.float64)
        self.w[:] = 0.0
        for k, chunk in self.source.epoch(range(self.source.n_chunks)):
            alpha = self.state.alpha_of(k)
            self.gpu.release_alpha(k, alpha)
            cpu.alpha_from_margins(*cpu.chunk_args(chunk), p.c_pos, p.c_neg, p.bias, w0, alpha)
            cpu.accumulate_w(*cpu.chunk_args(chunk), p.c_pos, p.c_neg, p.bias, alpha, self.w)
            getattr(self.source, "release", lambda k: None)(k)

    def sync_alpha(self) -> None:
        """Bring every chunk's alpha home (before a checkpoint reads ``state.alpha``)."""
        for k in list(self.gpu.on_device):
            self.gpu.release_alpha(k, self.state.alpha_of(k))

    def close(self) -> None:
        self._group.close()
        self.gpu.close()
        self.state.close()


@dataclass
class _Shape:
    """Row and nnz counts of a chunk not yet read, for sizing (values and weight assumed)."""

    n_rows: int
    nnz: int
    values: object = True
    weight: object = True
