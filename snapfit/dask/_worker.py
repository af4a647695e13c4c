"""What runs on a Dask worker: one ``Part`` actor per worker and fit generation.

The actor reads its own share of the data (Parquet row groups by id, or array blocks handed to
its constructor by the scheduler), keeps it resident as ONE chunk (as ``ResidentSource`` does:
rows shuffled across the whole share converge in fewer passes than row group by row group) and
owns a ``Trainer`` whose threads are this worker's CoCoA+ units. Between rounds the data, the
dual variables and the threads stay here; only ``w`` comes in and ``dw`` goes out.
"""

from __future__ import annotations

import time

import numpy as np

from snapfit.data.chunk import Chunk
from snapfit.engine import InMemorySource, Problem, Trainer
from snapfit.engine.source import concat_chunks


def _array_chunk(block) -> Chunk:
    """A ``(X, y01, weight)`` block (numpy or scipy.sparse X, 0/1 labels) as one CSR chunk."""
    from snapfit.data.memory import csr_arrays

    X, y, weight = block
    indptr, indices, values, y_pm, weight, _ = csr_arrays(X, y, weight)
    return Chunk(indptr, indices, values, y_pm, weight)


class Part:
    """One worker's share of one fit: resident rows, their dual variables, a ``Trainer``.

    ``ids`` are the driver's chunk ids (Parquet row groups or array blocks) this part owns, in
    the order their rows are packed here; ``payload`` is the ``Dataset`` to read them from, or
    the list of array blocks (resolved from futures by the scheduler before this runs).
    ``inherit`` names an earlier ``Part`` on this worker (after a lost worker, a new generation
    starts) whose resident chunks are reused instead of read again.
    """

    def __init__(self, kind: str, payload, ids: list[int], inherit: str | None = None):
        from distributed import get_worker

        t0 = time.perf_counter()
        worker = get_worker()
        self.address = worker.address
        old = worker.state.actors.get(inherit) if inherit else None
        kept = dict(old.by_id) if old is not None else {}
        self.ids = list(ids)
        self.read: list = []  # what THIS part read from storage: (file, row group) or block id
        self.by_id: dict[int, Chunk] = {}
        for j, k in enumerate(self.ids):
            if k in kept:
                self.by_id[k] = kept[k]
            elif kind == "parquet":
                self.by_id[k] = payload.read_chunk(k)
                ref = payload.chunks[k]
                self.read.append((ref.file, ref.row_group))
            else:
                self.by_id[k] = _array_chunk(payload[j])
                self.read.append(k)
        chunks = [self.by_id[k] for k in self.ids]
        self.rows = [c.n_rows for c in chunks]
        self.chunk = concat_chunks(chunks) if chunks else None
        self.trainer: Trainer | None = None
        self.dw: np.ndarray | None = None
        self.load_seconds = time.perf_counter() - t0

    def info(self) -> dict:
        y = self.chunk.y
        n_pos = int((y > 0).sum())
        return {
            "address": self.address,
            "ids": self.ids,
            "rows": self.rows,
            "nnz": self.chunk.nnz,
            "read": self.read,
            "label_counts": (len(y) - n_pos, n_pos),
            "load_seconds": self.load_seconds,
        }

    def start(
        self,
        problem: Problem,
        *,
        epoch: int = 0,
        alpha: np.ndarray | None = None,
        warm_w: np.ndarray | None = None,
    ) -> dict:
        """Build the trainer; return this part's ``w(alpha)`` and its ``alpha`` (checkpoint).

        Starting points: zeros; ``alpha`` (a restored checkpoint; ``w`` is recomputed from it
        exactly, so the driver's sum is ``w(alpha)`` over all parts); or ``warm_w`` (the dual
        point paired with a previous model, ``Trainer.warm_start``).
        """
        if self.trainer is not None:
            self.trainer.close()
        self.trainer = tr = Trainer(InMemorySource([self.chunk], problem.n_features), problem)
        tr.epoch = int(epoch)
        if alpha is not None:
            tr.warm_start_alpha(np.asarray(alpha, dtype=np.float64))
        elif warm_w is not None:
            tr.warm_start(warm_w)
        return {"w": tr.w.copy(), "alpha": np.array(tr.state.alpha)}

    def step(self, w: np.ndarray, *, checkpoint: bool, keep_dw: bool = False) -> dict:
        """One CoCoA+ round: a pass over this part from the global ``w``; return ``dw`` and the
        additive pieces of the objective (entropy sum, gap sum) and, if asked, ``alpha``."""
        tr = self.trainer
        tr.w[:] = w
        rec = tr.run_epoch()
        wsq = float(tr.w @ tr.w)
        # run_epoch reports dual = -||w_local||^2 / 2 - entropy; the entropy sum over this
        # part's rows is what adds up across parts (w is the driver's business).
        ent = -rec.dual - 0.5 * wsq
        dw = tr.w - w
        out = {"ent": ent, "gap": rec.gap, "seconds": rec.seconds, "epoch": tr.epoch}
        if keep_dw:
            self.dw = dw  # collected by a tree of tasks (``_driver._tree_sum``)
        else:
            out["dw"] = _pack(dw)
        if checkpoint:
            out["alpha"] = np.array(tr.state.alpha)
        return out

    def objective(self, w: np.ndarray) -> tuple[float, float]:
        """Exact additive pieces at the global ``w``: (sum of C_i-weighted losses, entropy)."""
        tr = self.trainer
        tr.w[:] = w
        primal, dual, _ = tr.exact_objective()
        half = 0.5 * float(w @ w)
        return primal - half, -dual - half

    def close(self) -> None:
        if self.trainer is not None:
            self.trainer.close()
            self.trainer = None


def _pack(dw: np.ndarray):
    """``dw`` as a dense array, or ``(indices, values, size)`` when that is smaller: a share of
    a few rows touches few of 2**20+ hashed features."""
    nz = np.flatnonzero(dw)
    if len(nz) * 12 < dw.nbytes:
        return (nz.astype(np.int32), dw[nz], len(dw))
    return dw


def unpack(p) -> np.ndarray:
    if isinstance(p, tuple):
        idx, val, n = p
        out = np.zeros(n)
        out[idx] = val
        return out
    return p


def packed_nbytes(p) -> int:
    return sum(a.nbytes for a in p[:2]) if isinstance(p, tuple) else p.nbytes


def take_dw(key: str):
    """Task body pinned to an actor's worker: hand over the ``dw`` its last step kept."""
    from distributed import get_worker

    part = get_worker().state.actors[key]
    dw, part.dw = part.dw, None
    if dw is None:
        raise RuntimeError(f"actor {key} holds no dw; was step() called with keep_dw=True?")
    return dw


def add(*arrays):
    """Task body of the reduction tree: the sum of its children's ``dw``."""
    out = arrays[0].copy()
    for a in arrays[1:]:
        out += a
    return out
