"""The node trainer: every unit of one process (CPU threads, GPUs) as one CoCoA+ trainer.

``Trainer`` holds ``w``, the dual state the source gave it, and K units (``Devices`` says which:
GPUs first, then the CPU threads that take the residue), each on its own host thread. An epoch:

1. plan: the epoch's chunk order from ``(seed, epoch)``; the source fixes its chunks for it
   (``begin_epoch``: a streaming source deals its pieces here); the rows go to units.
   CPU threads alone: whole chunks to the least-loaded thread (``plan_epoch``), reproducible
   from the seed. With GPUs: rows in proportion to each unit's measured rows/s
   (``proportional_split``), cut in the epoch's random order (never a fixed partition: see
   ``snapfit.engine.split``);
2. every unit starts from the same ``w`` and runs its items on its own view with
   ``sigma' = K`` (or the Dask driver's larger sigma');
3. the views are combined (CoCoA+: their mean, or ``w0 + sum (v - w0) / sigma'``), the
   per-chunk gaps go to the source (host residency) and to the GPUs (device residency, DuHL).

With ``Devices.share_cpu`` (CPU threads alone, at least two) the threads are ONE CoCoA+ unit
instead: they share ``w`` itself (``snapfit.engine.shared``: hot coordinates in per-thread
slots, the rest Hogwild-style; the rows of a cut chunk follow the cores, ``steal``), so
``sigma'`` does not count them, and ``w`` may drift from
``w(alpha)`` by lost updates: ``settle()`` rebuilds it before every exact check and at the end.
Such a trainer counts the features' rows when it is made, picks the hot ones and runs in its
own feature order from then on (the source relabels its chunks); ``w`` is in that order, and
``coef()`` / ``set_coef()`` / ``inward()`` / ``outward()`` are the way in and out of it.

Every row's ``alpha`` comes from the source's state (``alpha_of(k)`` is the delivered chunk's
rows, whatever the chunking), so the same trainer serves resident, re-dealt and device data.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from snapfit.engine.hot import HotBlock, certify, sample_rows
from snapfit.engine.problem import EpochRecord, Problem
from snapfit.engine.shared import HotSlots, count_step
from snapfit.engine.source import ChunkSource
from snapfit.engine.split import RateMeter, proportional_split
from snapfit.engine.state import DualState
from snapfit.engine.steal import RowBoard
from snapfit.engine.units import CpuUnit, SharedCpuUnit, Unit
from snapfit.engine.workers import Item, ThreadGroup, item_rows, item_span, plan_epoch
from snapfit.solvers import cpu
from snapfit.solvers.dual import LOGISTIC
from snapfit.solvers.hot_pass import HotLabels

# Keys that keep the random choices of different passes of one epoch apart.
_EPOCH_KEY, _EXACT_KEY = 2**31 - 2, 2**31 - 3


@dataclass(frozen=True)
class Devices:
    """Where a fit runs, resolved once at the door: ``n_cpu`` CPU solver threads and one GPU
    unit per entry of ``gpu_ids`` (an id may repeat: two units on one device).

    ``gpu_options`` go to every ``GpuUnit`` (launch geometry, device ``budget``, ...);
    ``rebalance=False`` keeps the first epoch's split (``GpuUnit.prior_rate``) instead of
    re-measuring the units' rates every epoch. ``share_cpu``: the CPU threads share ``w``
    (``snapfit.engine.shared``) when they are at least two and no GPU takes part; otherwise,
    and always beside GPUs, each is a CoCoA+ unit (reproducible for a seed).
    """

    n_cpu: int = 1
    gpu_ids: tuple[int, ...] = ()
    gpu_options: dict | None = None
    rebalance: bool = True
    share_cpu: bool = False

    @property
    def n_units(self) -> int:
        """Host threads, one per unit (GPUs and CPU threads)."""
        return len(self.gpu_ids) + self.n_cpu

    @property
    def shares_cpu(self) -> bool:
        return self.share_cpu and self.n_cpu >= 2 and not self.gpu_ids

    @property
    def cocoa_units(self) -> int:
        """What sigma' counts: every unit, but the CPU threads once when they share ``w``."""
        return 1 if self.shares_cpu else self.n_units

    def describe(self) -> dict:
        """What a checkpoint depends on: the units (the plan and sigma' follow from them)."""
        out = {"cpu_threads": self.n_cpu, "gpus": len(self.gpu_ids)}
        if self.shares_cpu:
            out["cpu_shared"] = True
        return out


class Trainer:
    """Holds ``w``, the dual state and the units across epochs (and across resumes).

    ``gpu_unit(device_id, source, problem, sigma=..., **gpu_options)`` makes the unit of each
    GPU of ``devices`` (``snapfit.train.make_trainer`` passes ``snapfit.gpu.unit.GpuUnit``: the
    engine does not import the tier above it).
    """

    def __init__(
        self,
        source: ChunkSource,
        problem: Problem,
        state: DualState,
        devices: Devices = Devices(),
        gpu_unit=None,
    ):
        if devices.n_units < 1:
            raise ValueError("a trainer needs at least one unit (a CPU thread or a GPU)")
        self.source = source
        self.problem = problem
        self.state = state
        self.devices = devices
        if devices.gpu_ids and gpu_unit is None:
            raise ValueError("a trainer with GPUs needs gpu_unit (see snapfit.train.make_trainer)")
        self._gpu_unit = gpu_unit
        self.k = devices.n_units
        # sigma' counts every unit that updates w this epoch: these units, or more when other
        # processes (Dask workers) update the same w in the same round.
        units = devices.cocoa_units
        self.sigma = float(problem.sigma or units)
        if self.sigma < units:
            raise ValueError(f"sigma'={self.sigma} is below the number of local units {units}")
        d = source.n_features
        # Threads sharing w: w is thread 0's view, its cold head shared with the others' views.
        self.slots = HotSlots(d, devices.n_cpu, state.n_rows) if devices.shares_cpu else None
        # one-vs-rest: K blocks of d + 1, class k's at k (d + 1) (``snapfit.solvers.ovr``)
        self.w = self.slots.w if self.slots is not None else np.zeros(problem.n_classes * (d + 1))
        # True when w may differ from w(alpha) (lost updates of threads sharing w).
        self.drifted = False
        self.units: list[Unit] = self._make_units(d)
        self.has_gpu = bool(devices.gpu_ids)
        self.meter = RateMeter([u.prior_rate for u in self.units])
        self.chunk_gaps = np.zeros(source.n_chunks)
        self.nnz = [source.chunk_nnz(k) for k in range(source.n_chunks)]
        self.epoch = 0
        self.history: list[EpochRecord] = []
        self._chosen = False
        self._busy = np.zeros(self.k)
        self._done_rows = np.zeros(self.k, dtype=np.int64)
        names = [f"snapfit-gpu-{i}" for i in devices.gpu_ids]
        names += [f"snapfit-cpu-{t}" for t in range(devices.n_cpu)]
        self._group = ThreadGroup(self.k, names)
        self._setup = 0.0  # seconds of the set-up passes, charged to the first epoch
        self.hot: HotBlock | None = None
        try:
            self._group.each(lambda t: self.units[t].bind(), "bind")
            t0 = time.perf_counter()
            self._prepare()
            if problem.hot_columns:
                self._hot_block()
            self._setup = time.perf_counter() - t0
        except BaseException:
            self._group.close()
            raise

    def _hot_block(self) -> None:
        """Choose the hot block (``snapfit.engine.hot``: one pass keeping a sample of rows)
        and hand its positions to every unit."""
        if self.problem.n_classes > 1 or self.problem.loss != LOGISTIC:
            raise ValueError(
                "hot_columns=True fits binary logistic regression only (its Newton step is the "
                "logistic loss's); fit this model without it."
            )
        if self.slots is not None:
            raise ValueError("the hot block needs CoCoA+ units, not threads sharing w")
        if self.source.device_resident:
            raise ValueError(
                "hot_columns=True needs the data on the host (its sample is kept there); "
                "copy it to the host (e.g. X.get()) or fit without hot_columns."
            )
        self.hot = sample_rows(self)
        labels = HotLabels(self.hot.hot_pos, self.hot.nh, self.source.stable_chunks)
        self.hot.labels = labels  # the exact checks read the relabeled ids too
        self._group.each(lambda t: self.units[t].set_hot(labels), "set_hot")

    def refresh_hot(self) -> None:
        """``v_H = v_H(alpha)`` exactly (one pass summing ``w(alpha)``; ``w_H`` kept), after
        ``alpha`` was written from outside (a checkpoint); exact checks rebuild it in
        ``hot.certify``'s pass."""
        self.sync_alpha()
        keep = self.w[self.hot.hot].copy()
        self._sum_pass(None)
        self.w[self.hot.hot] = keep

    # -- w in and out of the fit's feature order -----------------------------------------
    def inward(self, v: np.ndarray) -> np.ndarray:
        """A vector over the data's features (``n_features + 1``, intercept last) in this
        trainer's feature order (itself when the two are the same)."""
        return v if self.slots is None else self.slots.to_ext(v)

    def outward(self, v: np.ndarray) -> np.ndarray:
        """A vector in this trainer's feature order back over the data's features (``v``
        itself when the two are the same: copy it to keep it)."""
        return v if self.slots is None else self.slots.to_real(v)

    def coef(self) -> np.ndarray:
        """``w`` over the data's features, intercept last (may be ``w`` itself: copy to keep)."""
        return self.outward(self.w)

    def set_coef(self, w: np.ndarray) -> None:
        """Set ``w`` from a vector over the data's features (intercept last)."""
        self.w[:] = self.inward(np.asarray(w, dtype=np.float64))

    def _make_units(self, d: int) -> list[Unit]:
        units: list[Unit] = []
        if self.devices.gpu_ids:
            for i in self.devices.gpu_ids:
                units.append(self._gpu_unit(i, self.source, self.problem, sigma=self.sigma,
                                             **(self.devices.gpu_options or {})))  # fmt: skip
        if self.slots is not None:
            return [SharedCpuUnit(self.problem, self.sigma, np.empty_like(self.w), self.slots, t)
                    for t in range(self.devices.n_cpu)]  # fmt: skip
        for t in range(self.devices.n_cpu):
            # CPU threads alone: the first thread's view is w itself (one copy fewer).
            view = self.w if not units and t == 0 else np.empty_like(self.w)
            units.append(CpuUnit(self.problem, self.sigma, view))
        return units

    # -- plans -----------------------------------------------------------------------------
    def _plan(self, key: int) -> tuple[list[int], list[list[Item]]]:
        """The order the source delivers and each unit's items, for this epoch's pass."""
        rng = np.random.default_rng([self.problem.seed, self.epoch, key])
        n = self.source.n_chunks
        if not self.has_gpu:
            order, plan = plan_epoch(self.nnz, self.k, rng)
            self.source.begin_epoch(order)
            return order, plan
        order = [int(k) for k in rng.permutation(n)]
        self.source.begin_epoch(order)
        rows = [self.source.chunk_rows(k) for k in range(n)]
        readers = self._readers()
        rates = np.where(readers, self.meter.rates, 0.0)
        spans = proportional_split(rows, rates, order)
        plan = [
            [Item(s.k, u, j, s.lo, s.hi) for j, s in enumerate(unit_spans)]
            for u, unit_spans in enumerate(spans)
        ]
        # A chunk a GPU keeps alpha of on its device must have it at home before any other
        # unit reads it (the GPU itself uploads the host copy when it needs it again).
        held = self._group.each(lambda t: self.units[t].resident_chunks(), "resident_chunks")
        touched = [{it.k for it in items} for items in plan]
        for g, unit in enumerate(self.units):
            others = set().union(*(touched[u] for u in range(self.k) if u != g)) & held[g]
            if others:
                self._group.call(
                    g, lambda u=unit, ks=others: u.sync_alpha(self.state.alpha_of, ks), "sync_alpha"
                )
        return order, plan

    def _readers(self) -> np.ndarray:
        """Which units can read this source's chunks (device-resident data: GPUs only)."""
        on_device = self.source.device_resident
        return np.array([u.reads_device or not on_device for u in self.units])

    def _whole_plan(self) -> tuple[list[int], list[list[Item]]]:
        """Every chunk once, dealt round-robin to the units that can read it; CPU threads
        alone with fewer than two chunks each cut every chunk in one contiguous span per
        thread (all threads busy on one big in-memory chunk: these passes are sums over rows)."""
        order = list(range(self.source.n_chunks))
        self.source.begin_epoch(order)
        readers = [u for u, ok in enumerate(self._readers()) if ok]
        plan: list[list[Item]] = [[] for _ in range(self.k)]
        if not self.has_gpu and len(order) < 2 * len(readers):
            for k in order:
                n = self.source.chunk_rows(k)
                for i, u in enumerate(readers):
                    lo, hi = i * n // len(readers), (i + 1) * n // len(readers)
                    if hi > lo:
                        plan[u].append(Item(k, u, len(plan[u]), lo, hi))
            return order, plan
        for i, k in enumerate(order):
            u = readers[i % len(readers)]
            plan[u].append(Item(k, u, len(plan[u])))
        return order, plan

    def exact_plan(self) -> tuple[list[int], list[list[Item]]]:
        """The plan of an exact check's passes: with GPUs the epoch's rule (each GPU reads
        what it holds), else ``_whole_plan``."""
        return self._plan(_EXACT_KEY) if self.has_gpu else self._whole_plan()

    def _run(self, order, plan, fn):
        def release(k: int) -> None:
            self.source.release(k)  # the chunk's buffer may be refilled
            self.state.release(k)  # spilled dual pages may leave RAM

        def flush(t: int) -> list:
            t0 = time.perf_counter()
            try:
                return self.units[t].flush()
            finally:
                self._busy[t] += time.perf_counter() - t0

        results = self._group.run(self.source.epoch(order), plan, fn, release, flush)
        kept = self._group.each(lambda t: self.units[t].finish(), "finish")
        # A unit that keeps its results (a GPU) hands them over now, by item number.
        results = [(it, kept[it.unit][1][it.seq] if r is None else r) for it, r in results]
        # Units finish in any order; summing in a fixed order keeps gaps reproducible.
        results.sort(key=lambda r: r[0].sort_key())
        return results, [v for v, _ in kept]

    # -- per-unit work ---------------------------------------------------------------------
    def _pass_item(self, t: int, item: Item, chunk, board: RowBoard | None = None):
        t0 = time.perf_counter()
        unit = self.units[t]
        alpha = self.state.alpha_of(item.k)
        sq = self._sqnorm(item, chunk)
        rows = item_rows(item, chunk.n_rows, unit.bucket_rows, [self.problem.seed, self.epoch])
        layout = self.source.layout(item.k)
        if board is not None and item.n_slices > 1:  # a cut chunk's rows follow the cores

            def run(part):
                return unit.run(item, chunk, alpha, sq, part, layout)[0][1]

            done = [(item, board.run(item.k, t, rows, run))]
        else:
            done = unit.run(item, chunk, alpha, sq, rows, layout)
        self._busy[t] += time.perf_counter() - t0
        self._done_rows[t] += item.n_rows(chunk.n_rows)
        return done

    def _objective_item(self, t: int, item: Item, chunk):
        alpha = self.state.alpha_of(item.k)
        layout = self.source.layout(item.k)
        return self.units[t].objective(
            item, chunk, alpha, self._sqnorm(item, chunk), self.w, layout
        )

    def _sqnorm(self, item: Item, chunk):
        """The item's row norms as the units take them (None for chunks born on a device)."""
        return None if self.source.device_resident else self.state.sqnorm_of(item.k, chunk)

    # -- whole-data operations -------------------------------------------------------------
    def _sum_pass(self, w0: np.ndarray | None) -> None:
        """``w = w(alpha)`` over every chunk (after setting alpha from ``w0`` when given)."""
        order, plan = self._whole_plan()
        zero = np.zeros_like(self.w)
        self._group.each(lambda t: self.units[t].begin(zero, len(plan[t])), "begin")

        def warm(t, item, chunk):
            self.units[t].warm(item, chunk, self.state.alpha_of(item.k), w0)
            return [(item, ())]

        self.drop_device_alpha()
        _, views = self._run(order, plan, warm)
        total = np.zeros_like(self.w)
        for v in views:
            total += v
        self.w[:] = total
        self.drifted = False
        if self.hot is not None:  # w is w(alpha): v_H is its hot part
            self.hot.v_h[:] = self.w[self.hot.hot]
            self.hot.fresh = True

    def settle(self) -> None:
        """Make ``w`` exactly ``w(alpha)`` again if threads sharing it may have lost updates
        (one pass summing every chunk's ``w(alpha)``; nothing otherwise)."""
        if self.drifted:
            self._sum_pass(None)

    def _prepare(self) -> None:
        """One pass over the data before the first epoch, the CPU threads in parallel (each
        its span of a big chunk, ``_whole_plan``): the rows' norms when the state computes them
        (in the first epoch every thread of a cut chunk would compute all of its norms: 0.86 s
        per 4M Criteo-40 rows, each), and for threads sharing ``w`` the features' row counts
        over a sample of the rows (``shared.count_step``), which fix the hot coordinates; the
        source then relabels them. A source that chose the hot set itself (``hot_set``: a
        streamed source, before its first pass wrote the cache in that order) spares the
        count, and a streamed source then the whole pass."""
        count = self.slots is not None
        given = self.source.hot_set() if count else None
        if given is not None:  # chosen by the source (a streamed cache stores their ids)
            code = self.slots.set_hot(*given)
            if len(self.slots.hot):
                self.source.relabel(code, n_threads=self.k)
            count = False
        norms = not self.has_gpu and self.state.lazy_norms
        if not (count or norms):
            return
        order, plan = self._whole_plan()
        step = count_step(self.state.n_rows)
        if count:
            self._group.each(lambda t: self.units[t].view.fill(0.0), "zero the views")

        def prepare(t, item, chunk):
            counted = self.units[t].count(item, chunk, step) if count else 0
            if norms:
                self.state.fill_sqnorm(item.k, chunk, *item_span(item, chunk.n_rows))
            return [(item, counted)]

        results, _ = self._run(order, plan, prepare)
        if norms:
            self.state.has_sqnorm[:] = True
        if count:
            counts = self.units[0].counts
            for unit in self.units[1:]:
                counts += unit.counts
            code = self.slots.choose(counts, sum(counted for _, counted in results))
            if len(self.slots.hot):
                self.source.relabel(code, n_threads=self.k)

    def warm_start(self, w0: np.ndarray) -> None:
        """Start from the dual point paired with ``w0`` (over the data's features, intercept
        last; see ``cpu.alpha_from_margins``). Under the hot block ``w_H`` stays ``w0``'s and
        ``v_H`` is ``alpha``'s sum, as in a fit (``refresh_hot``): ``v(alpha)`` is
        ``w0`` less the gradient at ``w0``, far from ``w0`` along the stiff dense columns even
        where ``w0`` is near the optimum, so starting the block there took more epochs than a
        cold start (40 against 11 on 200k Criteo-like rows, the same C, from a fit to a gap of
        1e-2; none in 200 from C = 0.1 to 1); from ``w0``'s own ``w_H``, 6 and 22."""
        w0 = self.inward(np.asarray(w0, dtype=np.float64))
        self._sum_pass(w0)
        if self.hot is not None:
            self.w[self.hot.hot] = w0[self.hot.hot]

    def warm_start_alpha(self, alpha: np.ndarray) -> None:
        """Start from given packed dual variables (all rows, state order); ``w = w(alpha)``."""
        self.set_alpha(alpha)

    def write_alpha(self, alpha: np.ndarray) -> None:
        """Write every row's ``alpha`` (state order); ``w`` is the caller's to match."""
        self.state.write_alpha(0, np.asarray(alpha, dtype=np.float64))
        self.drop_device_alpha()

    def set_alpha(self, alpha: np.ndarray) -> None:
        """Write every row's ``alpha`` (state order) and rebuild ``w = w(alpha)`` from it."""
        self.write_alpha(alpha)
        self._sum_pass(None)

    def alpha(self) -> np.ndarray:
        """Every row's packed ``alpha`` (state order, ``state.width`` per row), brought home
        from any device."""
        self.sync_alpha()
        out = np.empty(self.state.n_rows * self.state.width)
        self.state.read_alpha(0, out)
        return out

    def map_chunks(self, fn) -> list:
        """``fn(t, chunk, alpha)`` on every chunk's rows once, on the units' own threads (``t``
        the unit: chunks cut by ``_whole_plan`` come as row spans with their ``alpha``),
        ``alpha`` brought home from any device first; the results in the plan's order. For
        host sums over the data that are not a unit's pass (the Dask part's ``measure``)."""
        self.sync_alpha()
        order, plan = self._whole_plan()
        self._group.each(lambda t: self.units[t].begin(self.w, len(plan[t])), "begin")

        def call(t, item, chunk):
            lo, hi = item_span(item, chunk.n_rows)
            part = chunk if (lo, hi) == (0, chunk.n_rows) else chunk.rows(lo, hi)
            return [(item, fn(t, part, self.state.alpha_of(item.k)[lo:hi]))]

        results, _ = self._run(order, plan, call)
        return [r for _, r in results]

    def exact_objective(self) -> tuple[float, float, float]:
        """Exact ``(primal, dual, gap)`` at ``w = w(alpha)`` (one data pass, and one more to
        rebuild ``w`` when threads sharing it may have lost updates).

        Under the hot block ``w_H`` differs from ``v_H(alpha)``: ``hot.certify``'s one pass
        gives the primal at ``w`` and the dual (``v(alpha)`` summed, ``v_H`` rebuilt, the dual
        corrected for the last hot step's lag), or an earlier check's where that was higher
        (``best_dual``).
        (The primal at ``w(alpha)`` itself, the plain dual CD
        certificate, was measured far above the primal at ``w`` at every epoch of a 200k-row
        fit, 1e2-1e4 relative gaps against 1e-2-1e-6: not worth its pass.)"""
        self.settle()
        if self.hot is None:
            return self._objective()
        primal, dual = certify(self)
        dual = self.hot.best_dual(dual)
        return primal, dual, primal - dual

    def _objective(self) -> tuple[float, float, float]:
        """Exact ``(primal, dual, gap)`` at ``w = w(alpha)`` (one data pass; under the hot
        block only its primal holds: ``w`` is not ``v(alpha)``)."""
        order, plan = self.exact_plan()
        self._group.each(lambda t: self.units[t].begin(self.w, len(plan[t]), 3), "begin")
        results, _ = self._run(order, plan, self._objective_item)
        loss, ent = sum(r[0] for _, r in results), sum(r[1] for _, r in results)
        wsq = cpu.squared_norm(self.w)
        primal = 0.5 * wsq + loss
        dual = -0.5 * wsq - ent
        return primal, dual, primal - dual

    def _merge(self, views: list[np.ndarray], w0: np.ndarray | None) -> None:
        """Combine the units' views into ``w`` (CoCoA+ with ``sigma' = K``: their mean; with a
        larger sigma', from other processes' units too, ``w0 + sum_t (v_t - w0) / sigma'``)."""
        if views[0] is not self.w:
            self.w[:] = views[0]
        for v in views[1:]:
            self.w += v
        if w0 is None:
            if self.k > 1:
                self.w /= self.k
        else:
            self.w -= self.k * w0
            self.w /= self.sigma
            self.w += w0

    # -- epochs ----------------------------------------------------------------------------
    def run_epoch(self) -> EpochRecord:
        if not self._chosen:
            self._residency()
        if self.hot is not None and not self.hot.fresh:
            self.refresh_hot()
        shared = self.slots is not None
        counting, self._setup = self._setup, 0.0
        order, plan = self._plan(_EPOCH_KEY)
        w0 = self.w.copy() if self.sigma != self.devices.cocoa_units else None
        self._group.each(lambda t: self.units[t].begin(self.w, len(plan[t])), "begin")
        self._busy[:] = 0.0
        self._done_rows[:] = 0
        io0 = self.source.io_wait
        t0 = time.perf_counter()
        if shared:
            results = self._shared_pass(order, plan, w0)
        else:
            results, views = self._run(order, plan, self._pass_item)
            self._merge(views, w0)
        pass_s = time.perf_counter() - t0
        seconds = pass_s + counting
        if self.has_gpu and self.devices.rebalance:
            for t in range(self.k):
                self.meter.update(t, int(self._done_rows[t]), float(self._busy[t]))
        idle = max(0.0, pass_s - float(np.mean(self._busy)))
        gaps = [(it.k, *r) for it, r in results]
        hot_s = self._hot_round(sum(g for _, g, _ in gaps)) if self.hot is not None else None
        rec = self._close_epoch(gaps, seconds, io0, idle, hot_s)
        self._residency()
        return rec

    def _hot_round(self, gap: float) -> tuple[float, float, float]:
        """After a pass under the hot block: the units' hot moves into ``v_H``, then the hot
        step, plain (not accelerated) when the epoch will be checked (its estimate is below
        ``tol`` or has stalled, ``HotBlock.stalled``): the exact gap right after a long step,
        which the rows have not answered yet, measured 10-1000x the next epoch's on 1M rows.
        Returns the dual's quadratic term and the block's lag ``1/2 ||w_H - v_H||^2`` at the
        ``w_H`` the rows read (for the epoch's record), and the step's seconds."""
        t0 = time.perf_counter()
        moves = self._group.each(lambda t: self.units[t].hot_moves(), "hot_moves")
        for acc in moves:
            self.hot.v_h += acc[: self.hot.nh] / self.sigma
        dual_sq = self.hot.dual_sq(self.w)
        lag = self.hot.lag(self.w)  # before the step: at the w_H the rows read
        self.hot.sum_g = gap
        estimate = self.hot.rel_gap(gap)  # the epoch's record carries it (``_close_epoch``)
        stalled = self.hot.stalled(estimate)  # counted every epoch, before the test below
        checked = estimate <= self.problem.tol or stalled
        self.hot.step(self.w, extrapolate=not checked and self.epoch + 1 < self.problem.max_iter)
        return dual_sq, lag, time.perf_counter() - t0

    def wants_check(self, rec: EpochRecord) -> bool:
        """Whether the epoch just run (``rec``) is checked exactly: its estimate is at most
        the problem's ``tol``; under the hot block also when the estimate has stalled
        (``HotBlock.stalled``), and not right after a damped hot step (``HotBlock.hold``)."""
        if self.hot is None:
            return rec.rel_gap <= self.problem.tol
        return (rec.rel_gap <= self.problem.tol or self.hot.due) and not self.hot.hold()

    def _shared_pass(self, order, plan, w0: np.ndarray | None) -> list:
        """An epoch of threads sharing ``w``: slots opened, the pass, slots folded back; with
        a larger sigma' (Dask) ``w`` moves by ``1/sigma'`` of the group's move, as one view."""
        self.slots.tag()
        board = RowBoard(self.k)  # a cut chunk's rows follow the cores (``steal``)
        try:
            results, _ = self._run(order, plan, lambda t, it, ch: self._pass_item(t, it, ch, board))
        finally:
            self.slots.fold()
            self.drifted = True
        if w0 is not None:
            self.w -= w0
            self.w /= self.sigma
            self.w += w0
        return results

    def _residency(self) -> None:
        """Each GPU picks the pieces it keeps on its device from the latest gaps (DuHL)."""
        self._chosen = True
        if not self.has_gpu:
            return
        gaps = self.source.piece_gaps(self.chunk_gaps)
        sizes = self.source.piece_sizes()
        largest = self.source.max_chunk_shape()
        alpha_of = self.state.alpha_of
        self._group.each(lambda t: self.units[t].choose(gaps, sizes, largest, alpha_of), "choose")

    def _close_epoch(self, gaps, seconds: float, io0: float, idle: float, hot=None):
        """End an epoch from each item's ``(chunk, gap, entropy)``: the chunks' gaps go to the
        source (they rank chunks for residency), the epoch is counted and recorded. ``hot``:
        ``_hot_round``'s ``(dual's quadratic term, lag, seconds)``: the record's primal is then
        the dual plus the rows' gap terms plus the lag (the certificate's identity,
        ``P - D = sum_i g_i + 1/2 ||w_H - v_H||^2``), its gap the stopping estimate (the rows'
        terms scaled by the last exact check)."""
        self.chunk_gaps[:] = 0.0
        ent = 0.0
        for k, gap, e in gaps:
            self.chunk_gaps[k] += gap
            ent += e
        self.source.update_gaps(self.chunk_gaps)
        self.epoch += 1
        gap, wsq = float(self.chunk_gaps.sum()), None
        if hot is not None:
            wsq, lag, step_s = hot
            seconds += step_s
        rec = EpochRecord.from_pass(
            epoch=self.epoch, w=self.w, entropy=ent, gap=gap, seconds=seconds,
            n_rows=self.state.n_rows, nnz=sum(self.nnz), io_wait=self.source.io_wait - io0,
            idle=idle, wsq=wsq,
        )  # fmt: skip
        if hot is not None:  # D(alpha) lags far below P early on: not a scale for the gap
            rec.primal += lag  # dual + rows' terms + lag, the primal's estimate
            rec.gap = gap * self.hot.calibration  # the rows' gaps, scaled by the last check
            rec.rel_gap = self.hot.rel_gap(self.hot.sum_g)
        return rec

    def confirm(self, rec: EpochRecord) -> EpochRecord:
        """Replace an epoch's estimated gap with the exact one (its time is added to the epoch)."""
        t0 = time.perf_counter()
        primal, dual, gap = self.exact_objective()
        if self.hot is not None:
            self.hot.calibrate(gap, primal)
        rec.primal, rec.dual, rec.gap, rec.exact = primal, dual, gap, True
        rec.rel_gap = gap / max(abs(primal), 1e-300)
        rec.seconds += time.perf_counter() - t0
        return rec

    def drop_device_alpha(self) -> None:
        """Forget every device copy of ``alpha`` (the host state was written directly)."""
        self._group.each(lambda t: self.units[t].drop_alpha(), "drop_alpha")
        if self.hot is not None:
            self.hot.fresh = False

    def sync_alpha(self) -> None:
        """Bring every ``alpha`` kept on a device home (before the host state is read)."""
        if self.has_gpu:
            self._group.each(lambda t: self.units[t].sync_alpha(self.state.alpha_of), "sync_alpha")

    def close(self) -> None:
        try:
            if not self._group.stuck:  # a stalled unit's thread takes no more work
                self._group.each(lambda t: self.units[t].close(), "close")
        finally:
            self._group.close()
            self.state.close()
            if self.slots is not None and len(self.slots.hot):
                self.source.relabel(None)  # the source's chunks as stored again
