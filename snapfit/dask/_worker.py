"""What runs on a Dask worker: one ``Part`` actor per worker and fit generation.

The actor reads its own share of the data (Parquet row groups by id, or array blocks handed to
its constructor by the scheduler) and owns the node trainer of ``snapfit.train`` whose units
are this worker's: its GPUs (``device="gpu"``) and CPU threads. Devices and the memory budget
are resolved here, on the worker (the default budget from the worker's own ``memory_limit``).
A Parquet share is kept resident when it fits that budget (rows shuffled across the whole
share every pass) and is otherwise streamed by the out-of-core engine
(``snapfit.stream.StreamSource``) within it. Between rounds the data, the dual variables and
the units stay here; only vectors of ``n_features + 1`` numbers travel.

A round asks two things of a part (see ``_driver`` for why):

``measure(w)``
    one pass at the global ``w``: the exact loss, entropy and gap sums of this share and its
    gradient share ``r_k = sum_{i in k} (a_i - p_i) y_i x_i`` (``_kernels.measure``, for the
    loss code the problem carries);
``step(g, theta)``
    the engine's coordinate passes on this share's subproblem, started from the view
    ``w + theta (s_k r_k - g)`` with curvature ``s_k = n / n_k``, until its gap is below the
    driver's target; returns ``dw = A_k dalpha``.
"""

from __future__ import annotations

import time

import numpy as np

from snapfit.dask import _kernels
from snapfit.data.chunk import Chunk, concat_chunks, split_rows
from snapfit.engine import Devices, InMemorySource, Problem, Trainer
from snapfit.engine.units import host_kernels
from snapfit.solvers import cpu
from snapfit.train import (
    make_trainer,
    open_dataset,
    plan_dataset,
    resolve_budget,
    resolve_devices,
)

#: Bytes per row a part keeps besides the engine's own: the saved alpha of the accepted point.
EXTRA_BYTES_PER_ROW = 8


def _array_chunk(block, targets: bool = False) -> Chunk:
    """A ``(X, y, weight)`` block (numpy or scipy.sparse X) as one CSR chunk: ``y`` 0/1 labels,
    or with ``targets`` real targets kept as they are (float32, as ``snapfit.Ridge`` keeps them)."""
    from snapfit.data.memory import csr_arrays

    X, y, weight = block
    if targets:
        indptr, indices, values, _, weight, _ = csr_arrays(X, None, weight)
        return Chunk(indptr, indices, values, np.asarray(y, dtype=np.float32), weight)
    indptr, indices, values, y_pm, weight, _ = csr_arrays(X, y, weight)
    return Chunk(indptr, indices, values, y_pm, weight)


def _devices(units: dict, worker) -> Devices:
    """This worker's units: its GPUs and threads (``n_jobs`` None: the worker's own threads)."""
    from snapfit.errors import ResourceError

    n_jobs = units.get("n_jobs")
    try:
        return resolve_devices(units.get("device", "cpu"),
                               worker.state.nthreads if n_jobs is None else n_jobs,
                               units.get("device_ids"),
                               deterministic=units.get("deterministic", True))  # fmt: skip
    except ResourceError as e:
        raise ResourceError(f"worker {worker.address}: {e}") from None


class Part:
    """One worker's share of one fit: its rows (resident or streamed), their dual variables
    and a ``Trainer``.

    ``ids`` are the driver's chunk ids (Parquet row groups or array blocks) this part owns, in
    the order its rows are laid out (alpha included); ``payload`` is the ``Dataset`` to read
    them from (``kind`` "parquet"), or the list of array blocks (resolved from futures by the
    scheduler) with 0/1 labels ("arrays") or real targets ("targets"). ``inherit``
    names an earlier ``Part`` of the same fit on this worker (after a lost worker a new
    generation starts) whose resident rows are reused instead of read again.
    ``units`` are the estimator's ``device``, ``n_jobs`` and ``device_ids``, resolved here;
    ``memory_budget`` / ``chunk_rows`` are the estimator's, applied to this worker's share.
    """

    def __init__(
        self,
        kind: str,
        payload,
        ids: list[int],
        inherit: str | None = None,
        *,
        units: dict,
        memory_budget=None,
        chunk_rows: int | None = None,
        width: int = 1,
    ):
        from distributed import get_worker

        t0 = time.perf_counter()
        worker = get_worker()
        self.address = worker.address
        self.devices = _devices(units, worker)
        limit = worker.memory_manager.memory_limit
        old = worker.state.actors.get(inherit) if inherit else None
        kept = old.resident_rows() if old is not None else {}
        self.ids = list(ids)
        self.read: list = []  # what THIS part read from storage: (file, row group) or block id
        self.chunk: Chunk | None = None  # the resident share (None when streamed)
        self.chunk_rows = chunk_rows
        self.source = None
        self.mode = "resident"
        self.budget: int | None = None  # bytes for a Parquet share (arrays are already here)
        if kind == "parquet":
            budget = self.budget = resolve_budget(memory_budget, limit=limit)
            self._open_parquet(payload, kept, budget, chunk_rows, width)
        else:
            chunks = []
            for j, k in enumerate(self.ids):
                if k in kept:
                    chunks.append(kept[k])
                else:
                    chunks.append(_array_chunk(payload[j], targets=kind == "targets"))
                    self.read.append(k)
            self._keep_resident(chunks)
        self.n_rows = int(sum(self.rows))
        self.trainer: Trainer | None = None
        self.scale = 1.0
        self.kept: dict[str, np.ndarray] = {}  # vectors left for a reduction tree to take
        self.w_measured = self.r = None
        self.saved: tuple | None = None  # (alpha, w, r, own) of the last accepted point
        # This share's w(alpha) when its threads share w (the exact base of each round's dw).
        self.own: np.ndarray | None = None
        self.load_seconds = time.perf_counter() - t0

    # -- data ------------------------------------------------------------------------------
    def _keep_resident(self, chunks: list[Chunk]) -> None:
        self.rows = [c.n_rows for c in chunks]
        self.chunk = concat_chunks(chunks)  # its source is made by start(), with n_features

    def _open_parquet(self, dataset, kept, budget: int, chunk_rows, width: int = 1) -> None:
        """This share through the single-node path: planned once by ``train.plan_dataset``
        (resident or streamed), opened by ``train.open_dataset``. A resident share is kept here
        as rows, so that a next generation on this worker reuses them (``inherit``)."""
        from snapfit.errors import ResourceError

        share = dataset.subset(self.ids)
        self.rows = [ref.n_rows for ref in share.chunks]
        budget -= EXTRA_BYTES_PER_ROW * sum(self.rows)
        if budget <= 0:
            raise ResourceError(
                f"worker {self.address}: memory_budget leaves nothing for its {sum(self.rows)} "
                "rows; raise memory_budget or add workers."
            )
        plan = plan_dataset(share, budget, n_units=self.devices.n_units, chunk_rows=chunk_rows,
                            hot=self.devices.shares_cpu and width == 1, width=width)  # fmt: skip
        if plan.resident:
            chunks = []
            for j, k in enumerate(self.ids):
                if k in kept:
                    chunks.append(kept[k])
                else:
                    chunks.append(share.read_chunk(j))
                    ref = share.chunks[j]
                    self.read.append((ref.file, ref.row_group))
            self._keep_resident(chunks)
            return
        self.mode = "stream"
        self.source = open_dataset(share, budget=budget, devices=self.devices,
                                   chunk_rows=chunk_rows, plan=plan)  # fmt: skip
        self.read = [(ref.file, ref.row_group) for ref in share.chunks]

    def resident_rows(self) -> dict[int, Chunk]:
        """Chunk id -> its rows, for a next generation on this worker (resident shares only)."""
        if self.chunk is None:
            return {}
        out, lo = {}, 0
        for k, n in zip(self.ids, self.rows, strict=True):
            out[k] = self.chunk.rows(lo, lo + n)
            lo += n
        return out

    def info(self) -> dict:
        if self.chunk is not None:
            n_pos = int((self.chunk.y > 0).sum())
            counts = (self.chunk.n_rows - n_pos, n_pos)
            nnz = self.chunk.nnz
        else:  # real targets (ridge) have no classes to count
            data = self.source.dataset
            # real targets (ridge) and class indices (one-vs-rest, counted by the client)
            counts = data.label_counts() if data.targets == "class" else (0, 0)
            nnz = int(data.nnz)
        return {
            "address": self.address,
            "ids": self.ids,
            "rows": self.rows,
            "nnz": nnz,
            "read": self.read,
            "mode": self.mode,
            "label_counts": counts,
            "load_seconds": self.load_seconds,
            "budget": self.budget,
            "units": self.devices.n_units,
            "sigma_units": self.devices.cocoa_units,
            "gpus": len(self.devices.gpu_ids),
        }

    # -- the fit ---------------------------------------------------------------------------
    def start(
        self,
        problem: Problem,
        *,
        scale: float = 1.0,
        epoch: int = 0,
        alpha: np.ndarray | None = None,
        warm_w: np.ndarray | None = None,
    ) -> dict:
        """Build the trainer; return this part's ``w(alpha)`` and its ``alpha``.

        ``problem.sigma`` is this part's units times ``scale`` (``n / n_k``). Starting points:
        zeros; ``alpha`` (a restored checkpoint; ``w`` is recomputed from it exactly, so the
        driver's sum is ``w(alpha)`` over all parts); or ``warm_w`` (the dual point paired
        with a previous model, ``Trainer.warm_start``).
        """
        if self.trainer is not None:
            self.trainer.close()  # closes its dual state too
        if self.chunk is not None:
            self.source = InMemorySource(split_rows(self.chunk, self.chunk_rows),
                                         problem.n_features)  # fmt: skip
        self.trainer = tr = make_trainer(self.source, problem, self.devices)
        self.scale = float(scale)
        self.saved = None
        tr.epoch = int(epoch)
        if alpha is not None:
            tr.set_alpha(alpha)  # w(alpha) exactly: the driver's sum is w(alpha) of all parts
        elif warm_w is not None:
            tr.warm_start(np.asarray(warm_w, dtype=np.float64))
        self.own = tr.coef().copy() if tr.slots is not None else None
        return {"w": _pack(tr.coef().copy()), "alpha": tr.alpha()}

    def measure(self, w, *, checkpoint: bool = False, keep: bool = False) -> dict:
        """The exact additive pieces of the objective at the global ``w`` and this share's
        gradient ``r`` (returned, or kept for a reduction tree); ``alpha`` if asked."""
        t0 = time.perf_counter()
        w = unpack(w)
        tr = self.trainer
        p = tr.problem
        w_in = tr.inward(w)  # the trainer's feature order (threads sharing w relabel features)
        r_of = [np.zeros_like(w_in) for _ in range(tr.k)]  # one gradient per unit's thread

        kern = host_kernels(p)
        kernel = _kernels.measure if p.n_classes == 1 else _kernels.measure_ovr

        def one(t, chunk, alpha):
            return kernel(*cpu.chunk_args(chunk), *kern.bounds, p.bias, alpha, w_in, r_of[t],
                          p.loss)  # fmt: skip

        # the trainer's own pass over the share, its units' threads in parallel
        sums = np.zeros(3)
        for part in tr.map_chunks(one):
            sums += part
        r_in = r_of[0]
        for r_t in r_of[1:]:
            r_in += r_t
        r = tr.outward(r_in)
        self.w_measured, self.r = w, r
        out = {"loss": sums[0], "ent": sums[1], "gap": sums[2]}
        if keep:
            self.kept["r"] = r
        else:
            out["r"] = _pack(r)
        if checkpoint:
            out["alpha"] = self.trainer.alpha()
        out["seconds"] = time.perf_counter() - t0
        return out

    def step(
        self,
        g,
        *,
        theta: float,
        gap: float,
        revert: bool = False,
        max_passes: int = 10,
        keep: bool = False,
    ) -> dict:
        """Engine passes on this share's subproblem; return ``dw = A_k dalpha``.

        ``revert``: the driver rejected the last measured point; go back to the last accepted
        one (alpha, ``w``, ``r``) first. Otherwise the measured point is the accepted one and is
        saved. The view starts at ``w + theta (s r - g)`` (``s = n / n_k``; ``theta = 0`` is
        plain CoCoA+) and passes run until the subproblem's gap estimate is at most this
        share's part of the global ``gap`` (``gap / s``), at most ``max_passes`` times.
        """
        t0 = time.perf_counter()
        tr = self.trainer
        if revert:
            if self.saved is None:
                raise RuntimeError("step(revert=True) before any accepted point")
            alpha, w, r, self.own = self.saved
            tr.write_alpha(alpha)
        else:
            w, r = self.w_measured, self.r
            self.saved = (tr.alpha(), w, r, self.own)
        s = self.scale
        view = w + theta * (s * r - unpack(g)) if theta else w.copy()
        dw = np.zeros_like(w)
        target = gap / s
        passes, local_gap = 0, float("nan")
        while passes < max_passes:
            tr.set_coef(view)
            rec = tr.run_epoch()
            # The engine merges its threads' views into view + A_k dalpha (curvature
            # threads * s); the subproblem's own view moves by s * A_k dalpha.
            delta = tr.coef() - view
            dw += delta
            view += s * delta
            passes += 1
            local_gap = rec.gap
            if local_gap <= target:
                break
        if self.own is not None:
            # Threads sharing w may have lost updates: the round's dw is this share's
            # w(alpha) now minus at the accepted point, exactly (one summing pass).
            tr.drifted = True
            tr.settle()
            dw = tr.coef() - self.own
            self.own = tr.coef().copy()
        out = {"passes": passes, "local_gap": local_gap,
               "seconds": time.perf_counter() - t0}  # fmt: skip
        if keep:
            self.kept["dw"] = dw
        else:
            out["dw"] = _pack(dw)
        return out

    def close(self) -> None:
        if self.trainer is not None:
            self.trainer.close()
            self.trainer = None
        if self.mode == "stream" and self.source is not None:
            self.source.close()


def _pack(v: np.ndarray):
    """``v`` as a dense array, or ``(indices, values, size)`` when that is smaller: a share of
    a few rows touches few of 2**20+ hashed features."""
    nz = np.flatnonzero(v)
    if len(nz) * 12 < v.nbytes:
        return (nz.astype(np.int32), v[nz], len(v))
    return v


def unpack(p) -> np.ndarray:
    if isinstance(p, tuple):
        idx, val, n = p
        out = np.zeros(n)
        out[idx] = val
        return out
    return p


def packed_nbytes(p) -> int:
    return sum(a.nbytes for a in p[:2]) if isinstance(p, tuple) else p.nbytes


def take(key: str, name: str):
    """Task body pinned to an actor's worker: hand over the vector its last call kept."""
    from distributed import get_worker

    part = get_worker().state.actors[key]
    v = part.kept.pop(name, None)
    if v is None:
        raise RuntimeError(f"actor {key} holds no kept {name!r}")
    return v


def add(*arrays):
    """Task body of the reduction tree: the sum of its children's vectors."""
    out = arrays[0].copy()
    for a in arrays[1:]:
        out += a
    return out


def decision_block(x, coef, intercept):
    """Task body of ``predict`` on a dask array: the block's ``x . coef + intercept``."""
    import scipy.sparse as sp

    out = np.asarray(x @ coef) if sp.issparse(x) else np.asarray(x) @ coef
    return (out.ravel() if np.ndim(coef) == 1 else out) + intercept  # (rows, K): one-vs-rest


def rowgroup_decision(dataset, k: int, coef, intercept) -> np.ndarray:
    """Task body of ``predict`` on Parquet paths: read row group ``k`` here and score it."""
    from snapfit.scoring import chunk_scores

    return chunk_scores(coef, intercept, dataset.read_chunk(k))


def has_gpu() -> bool:
    """Whether numba sees a usable GPU on this worker."""
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:  # noqa: BLE001 - no driver, no toolkit: no GPU
        return False


def warm() -> float:
    """Run every kernel once on a tiny share (JIT or cache load); the seconds it took. The
    worker imported this module to run it, so the imports are paid by then too."""
    t0 = time.perf_counter()
    indptr = np.arange(0, 9, 2, dtype=np.int64)
    chunk = Chunk(indptr, np.array([0, 1, 1, 2, 0, 2, 1, 3], np.int32),
                  np.ones(8, np.float32), np.array([1, -1, 1, -1], np.float32), None)  # fmt: skip
    tr = make_trainer(InMemorySource([chunk], 4), Problem(n_features=4, sigma=2.0), Devices())
    try:
        tr.run_epoch()
        r = np.zeros(5)
        args = (*cpu.chunk_args(chunk), 1.0, 1.0, 1.0, tr.state.alpha)
        _kernels.measure(*args, tr.w, r, 0)  # the loss passed, as a fit passes it
        cpu.accumulate_w(*args, r, 0)
    finally:
        tr.close()
    return time.perf_counter() - t0
