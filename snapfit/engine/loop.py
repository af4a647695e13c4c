"""The epoch loop: units run passes, CoCoA+ combines them, duality gaps decide when to stop.

Python owns time here, kernels own arithmetic (as umap's ``optimize_layout_*`` calls its kernel
once per epoch). Each epoch: plan which thread gets which chunk (``workers.plan_epoch``), stream
the chunks from the source, let every thread run ``cd_pass`` on its own view of ``w``, average
the views, and read the dual objective and the gap estimate off the pass. When the estimate says
the relative gap is below ``tol``, one exact pass confirms it before stopping.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np

from snapfit.engine.checkpoint import Checkpointer, InterruptGuard
from snapfit.engine.problem import EpochRecord, Problem
from snapfit.engine.source import ChunkSource
from snapfit.engine.state import DualState
from snapfit.engine.workers import Item, ThreadGroup, plan_epoch, row_order
from snapfit.solvers import cpu

# A callback gets each epoch's record and the current w (n_features + 1 entries, the intercept
# weight last; read-only: copy it to keep it); returning True stops the fit after that epoch.
Callback = Callable[[EpochRecord, np.ndarray], "bool | None"]


@dataclass
class FitResult:
    w: np.ndarray  # n_features + 1 entries; the last one is the intercept weight
    n_iter: int
    converged: bool
    history: list[EpochRecord] = field(default_factory=list)
    alpha: np.ndarray | None = None  # packed dual variables of all rows, in chunk order


def _item_rows(item: Item, n_rows: int, problem: Problem, epoch: int) -> np.ndarray:
    """This item's rows, in the order derived from (seed, epoch, chunk) alone."""
    rows = row_order(n_rows, problem.bucket_rows, [problem.seed, epoch, item.k])
    if item.n_parts == 1:
        return rows
    lo = item.part * n_rows // item.n_parts
    hi = (item.part + 1) * n_rows // item.n_parts
    return rows[lo:hi]


class Trainer:
    """Holds ``w``, the dual state and the threads across epochs (and across resumes)."""

    def __init__(self, source: ChunkSource, problem: Problem, state: DualState | None = None):
        self.source = source
        self.problem = problem
        self.k = max(1, int(problem.n_jobs))
        # sigma' counts every unit that updates w this epoch: these threads, or more when other
        # processes (Dask workers) update the same w in the same round.
        self.sigma = float(problem.sigma or self.k)
        if self.sigma < self.k:
            raise ValueError(f"sigma'={self.sigma} is below the number of local units {self.k}")
        d = source.n_features
        self.state = state or DualState([source.chunk_rows(k) for k in range(source.n_chunks)])
        self.w = np.zeros(d + 1)
        self.views = [self.w] + [np.empty_like(self.w) for _ in range(self.k - 1)]
        self.chunk_gaps = np.zeros(source.n_chunks)
        self.nnz = [source.chunk_nnz(k) for k in range(source.n_chunks)]
        self.epoch = 0
        self.history: list[EpochRecord] = []
        self._group = ThreadGroup(self.k)

    # -- per-thread work -------------------------------------------------------------------
    def _pass_item(self, t: int, item: Item, chunk):
        p = self.problem
        alpha = self.state.alpha_of(item.k)
        sq = self.state.sqnorm_of(item.k, chunk)
        rows = _item_rows(item, chunk.n_rows, p, self.epoch)
        gap, ent = cpu.cd_pass(
            *cpu.chunk_args(chunk), p.c_pos, p.c_neg, p.bias, sq, alpha, self.views[t], rows,
            self.sigma,
        )  # fmt: skip
        return gap, ent

    def _objective_item(self, t: int, item: Item, chunk):
        p = self.problem
        alpha = self.state.alpha_of(item.k)
        return cpu.chunk_objective(*cpu.chunk_args(chunk), p.c_pos, p.c_neg, p.bias, alpha, self.w)

    def _warm_item(self, t: int, item: Item, chunk):
        p = self.problem
        alpha = self.state.alpha_of(item.k)
        cpu.alpha_from_margins(*cpu.chunk_args(chunk), p.c_pos, p.c_neg, p.bias, self._warm, alpha)
        cpu.accumulate_w(*cpu.chunk_args(chunk), p.c_pos, p.c_neg, p.bias, alpha, self.views[t])

    def _whole_chunks(self) -> tuple[list[int], list[list[Item]]]:
        """Every chunk once and whole, dealt round-robin to threads, for whole-data passes."""
        order = list(range(self.source.n_chunks))
        plan: list[list[Item]] = [[] for _ in range(self.k)]
        for k in order:
            plan[k % self.k].append(Item(k, k % self.k, 0, 1))
        return order, plan

    def _run(self, order: Sequence[int], plan, fn):
        source_release = getattr(self.source, "release", lambda k: None)

        def release(k: int) -> None:
            source_release(k)  # the chunk's buffer may be refilled
            self.state.release(k)  # spilled dual pages may leave RAM

        results = self._group.run(self.source.epoch(order), plan, fn, release)
        # Threads finish in any order; summing in a fixed order keeps gaps reproducible.
        results.sort(key=lambda r: (r[0].k, r[0].part))
        return results

    # -- whole-data operations -------------------------------------------------------------
    def warm_start(self, w0: np.ndarray) -> None:
        """Start from the dual point paired with ``w0`` (see ``cpu.alpha_from_margins``)."""
        self._warm = np.asarray(w0, dtype=np.float64)
        for v in self.views:
            v[:] = 0.0
        order, plan = self._whole_chunks()
        self._run(order, plan, self._warm_item)
        self._merge(mean=False)
        del self._warm

    def _accumulate_item(self, t: int, item: Item, chunk):
        p = self.problem
        alpha = self.state.alpha_of(item.k)
        cpu.accumulate_w(*cpu.chunk_args(chunk), p.c_pos, p.c_neg, p.bias, alpha, self.views[t])

    def warm_start_alpha(self, alpha: np.ndarray) -> None:
        """Start from given packed dual variables (all rows, chunk order); ``w = w(alpha)``."""
        self.state.alpha[:] = alpha
        for v in self.views:
            v[:] = 0.0
        order, plan = self._whole_chunks()
        self._run(order, plan, self._accumulate_item)
        self._merge(mean=False)

    def exact_objective(self) -> tuple[float, float, float]:
        """Exact ``(primal, dual, gap)`` at the current ``w`` and ``alpha`` (one data pass)."""
        order, plan = self._whole_chunks()
        results = self._run(order, plan, self._objective_item)
        return self._objective_of(sum(r[0] for _, r in results), sum(r[1] for _, r in results))

    def _objective_of(self, loss: float, ent: float) -> tuple[float, float, float]:
        """``(primal, dual, gap)`` at ``w`` from the rows' summed loss and dual entropy."""
        wsq = cpu.squared_norm(self.w)
        primal = 0.5 * wsq + loss
        dual = -0.5 * wsq - ent
        return primal, dual, primal - dual

    def _merge(self, *, mean: bool, w0: np.ndarray | None = None) -> None:
        """Combine the views into ``w`` (view 0 is ``w`` itself).

        ``mean``: CoCoA+ with ``sigma' = K``: ``w0 + sum_t (v_t - w0) / K`` is the mean of the
        views. With a larger sigma' (other processes' units too) the views' offsets from the
        epoch's start ``w0`` are scaled by ``1/sigma'`` instead. Otherwise the views are summed
        (each holds a part of ``w(alpha)``).
        """
        for v in self.views[1:]:
            self.w += v
        if not mean:
            return
        if w0 is None:
            if self.k > 1:
                self.w /= self.k
        else:
            self.w -= self.k * w0
            self.w /= self.sigma
            self.w += w0

    def run_epoch(self) -> EpochRecord:
        p = self.problem
        rng = np.random.default_rng([p.seed, self.epoch, 2**31 - 2])
        order, plan = plan_epoch(self.nnz, self.k, rng)
        for v in self.views[1:]:
            v[:] = self.w
        w0 = self.w.copy() if self.sigma != self.k else None
        io0 = self.source.io_wait
        t0 = time.perf_counter()
        results = self._run(order, plan, self._pass_item)
        self._merge(mean=True, w0=w0)
        seconds = time.perf_counter() - t0
        return self._close_epoch([(it.k, *r) for it, r in results], seconds, io0)

    def _close_epoch(self, gaps, seconds: float, io0: float) -> EpochRecord:
        """End an epoch from each item's ``(chunk, gap, entropy)``: the chunks' gaps go to the
        source (they rank chunks for residency), the epoch is counted and recorded."""
        self.chunk_gaps[:] = 0.0
        ent = 0.0
        for k, gap, e in gaps:
            self.chunk_gaps[k] += gap
            ent += e
        self.source.update_gaps(self.chunk_gaps)
        self.epoch += 1
        return EpochRecord.from_pass(
            epoch=self.epoch, w=self.w, entropy=ent, gap=float(self.chunk_gaps.sum()),
            seconds=seconds, n_rows=self.state.n_rows, nnz=sum(self.nnz),
            io_wait=self.source.io_wait - io0,
        )  # fmt: skip

    def confirm(self, rec: EpochRecord) -> EpochRecord:
        """Replace an epoch's estimated gap with the exact one (its time is added to the epoch)."""
        t0 = time.perf_counter()
        primal, dual, gap = self.exact_objective()
        rec.primal, rec.dual, rec.gap, rec.exact = primal, dual, gap, True
        rec.rel_gap = gap / max(abs(primal), 1e-300)
        rec.seconds += time.perf_counter() - t0
        return rec

    def close(self) -> None:
        self._group.close()
        self.state.close()


def fit(
    source: ChunkSource,
    problem: Problem,
    *,
    warm_w: np.ndarray | None = None,
    warm_alpha: np.ndarray | None = None,
    callbacks: Sequence[Callback] = (),
    trainer: Trainer | None = None,
    state: DualState | None = None,
    checkpoint: Checkpointer | None = None,
) -> FitResult:
    """Run epochs until the exact relative gap is at most ``problem.tol`` or ``max_iter``.

    ``trainer`` continues an existing run (resume). A warm start comes from a previous fit's
    dual variables ``warm_alpha`` (best: the dual point itself) or else from its ``warm_w``.
    ``state`` supplies the dual state (e.g. memory-mapped by a streaming source). With
    ``checkpoint`` the run resumes from it when asked (instead of a warm start), writes one every
    ``checkpoint.every`` epochs and at the end, and on SIGINT/SIGTERM finishes the current epoch,
    writes one and raises ``KeyboardInterrupt``.
    """
    tr = trainer or Trainer(source, problem, state=state)
    try:
        converged = False
        if checkpoint is not None and checkpoint.resume and checkpoint.exists():
            converged = checkpoint.load(tr)
        elif warm_alpha is not None and trainer is None:
            tr.warm_start_alpha(warm_alpha)
        elif warm_w is not None and trainer is None:
            tr.warm_start(warm_w)
        with InterruptGuard() if checkpoint is not None else nullcontext() as guard:
            while not converged and tr.epoch < problem.max_iter:
                rec = tr.run_epoch()
                last = tr.epoch >= problem.max_iter
                if rec.rel_gap <= problem.tol or last:
                    tr.confirm(rec)
                    converged = rec.rel_gap <= problem.tol
                tr.history.append(rec)
                stop = any([bool(cb(rec, tr.w)) for cb in callbacks])
                interrupted = guard is not None and guard.signum is not None
                if checkpoint is not None and (
                    interrupted or converged or stop or last or checkpoint.due(tr.epoch)
                ):
                    checkpoint.save(tr, converged=converged)
                if interrupted:
                    raise KeyboardInterrupt(
                        f"signal {guard.signum} after epoch {tr.epoch}; checkpoint written to "
                        f"{checkpoint.path}, continue with resume=True"
                    )
                if converged or stop:
                    break
        getattr(tr, "sync_alpha", lambda: None)()  # device-resident alpha back to the host
        return FitResult(
            w=tr.w.copy(),
            n_iter=tr.epoch,
            converged=converged,
            history=tr.history,
            # Kept for warm starts, unless it was spilled to disk to respect a memory budget.
            alpha=None if getattr(tr.state, "spilled", False) else np.array(tr.state.alpha),
        )
    finally:
        if trainer is None:
            tr.close()
