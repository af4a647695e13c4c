"""Out-of-core vs in-memory on Criteo-like data: overlap efficiency and time-to-target.

    python bench/bench_stream.py --rows 4000000 --hash-bits 20 --budget-frac 0.2 [--out DIR]

Reports medians over epochs (the machine is shared: single timings are noisy). Every timed
epoch ``e`` runs three ways on the SAME chunks (the deal of epoch ``e``), back to back:

* compute-only: the epoch's chunks assembled in memory beforehand, then one engine epoch over
  them (a separate trainer started from the same ``w``, so the streamed run is not disturbed);
* streamed: the real out-of-core epoch (reads overlapped with the solver threads);
* read-only: the same epoch streamed with no math.

overlap efficiency = max(read-only, compute-only) / streamed, from the medians, and paired (per
epoch, then the median). The compute-only epoch reads chunks assembled long before (cold in the
CPU caches) where the streamed one gets them just written, so it can be the slower of the two.
The all-resident epoch (the whole data as one chunk, what an in-memory fit runs) is reported
too; it is slower per epoch here (random rows over the whole data miss the caches), so it is
not the reference.

time-to-target ratio = out-of-core fit seconds / in-memory fit seconds, both from the Parquet
file to ``tol`` (first pass included), with the epochs each needed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import warnings

import numpy as np

from snapfit import LogisticRegression
from snapfit.data import Dataset
from snapfit.datasets.criteo_like import make_criteo_like_parquet
from snapfit.engine import Devices, InMemorySource, Problem
from snapfit.engine.source import ResidentSource
from snapfit.engine.state import DualState
from snapfit.engine.workers import plan_epoch
from snapfit.stream import StreamSource
from snapfit.stream.plan import resident_peak_nbytes
from snapfit.stream.stats import DataStats
from snapfit.train import make_trainer, stream_dataset


class _Assembled(InMemorySource):
    """One epoch's chunks copied out of the streaming source, with their rows' norms and
    alpha: the compute-only reference, trained on with the same plan."""

    def __init__(self, src: StreamSource, order):
        chunks, self._sq, self._alpha = [None] * src.n_chunks, {}, {}
        for k, chunk in src.epoch(order):
            live = src._live[k]
            chunks[k] = type(chunk)(*[None if a is None else a.copy() for a in chunk])
            self._sq[k], self._alpha[k] = live.sqnorm.copy(), live.alpha.copy()
            src.release(k)
        super().__init__(chunks, src.n_features)

    def make_state(self) -> DualState:
        state = DualState([c.n_rows for c in self.chunks])
        for k in range(self.n_chunks):
            lo, hi = state.offsets[k], state.offsets[k + 1]
            state.alpha[lo:hi], state.sqnorm[lo:hi] = self._alpha[k], self._sq[k]
            state.has_sqnorm[k] = True
        return state


def overlap(src: StreamSource, problem: Problem, epochs: int) -> dict:
    devices = Devices(n_cpu=2)
    tr = make_trainer(src, problem, devices)
    stream, compute, reads, waits = [], [], [], []
    try:
        for _ in range(epochs):
            rng = np.random.default_rng([problem.seed, tr.epoch, 2**31 - 2])
            order, _ = plan_epoch(tr.nnz, tr.k, rng)  # the order run_epoch will draw
            pre = _Assembled(src, order)
            ref = make_trainer(pre, problem, devices)
            ref.w[:], ref.epoch, ref.nnz = tr.w, tr.epoch, tr.nnz  # same plan and start
            compute.append(ref.run_epoch().seconds)
            ref.close()
            del pre, ref
            rec = tr.run_epoch()
            stream.append(rec.seconds)
            waits.append(rec.io_wait)
            t0 = time.perf_counter()
            for k, _ in src.epoch(order):
                src.release(k)
            reads.append(time.perf_counter() - t0)
    finally:
        tr.close()
    med = statistics.median
    return {
        "stream_epoch_s": med(stream),
        "compute_only_s": med(compute),
        "read_only_s": med(reads),
        "overlap_efficiency": max(med(reads), med(compute)) / med(stream),
        # The same per epoch, then the median: each epoch's three runs share the machine's load.
        "overlap_efficiency_paired": med(
            max(r, c) / s for r, c, s in zip(reads, compute, stream, strict=True)
        ),
        "stream_epochs_s": [round(x, 3) for x in stream],
        "compute_epochs_s": [round(x, 3) for x in compute],
        "read_epochs_s": [round(x, 3) for x in reads],
        "io_wait_s": [round(x, 3) for x in waits],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--budget-frac", type=float, default=0.2)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--C", type=float, default=0.1)
    ap.add_argument("--epochs", type=int, default=5, help="epochs timed for the overlap")
    ap.add_argument("--chunk-rows", type=int, default=None)
    ap.add_argument("--hash-bits", type=int, default=18)
    ap.add_argument("--row-group-rows", type=int, default=1 << 16)
    ap.add_argument("--mode", default="auto", choices=["auto", "cache", "parquet"])
    ap.add_argument("--skip-ttt", action="store_true", help="overlap only, no time-to-target")
    ap.add_argument("--out", default=tempfile.gettempdir())
    a = ap.parse_args()
    path = os.path.join(a.out, f"criteo_like_{a.rows}_{a.hash_bits}_{a.row_group_rows}.parquet")
    if not os.path.exists(path):
        make_criteo_like_parquet(path, a.rows, seed=0, hash_bits=a.hash_bits,
                                 row_group_rows=a.row_group_rows)  # fmt: skip
    ds = Dataset(path)
    decoded = (resident_peak_nbytes(DataStats.read(ds, sample=False), 2) - 12 * ds.n_rows) // 2
    budget = int(a.budget_frac * decoded)
    res = {"rows": ds.n_rows, "nnz": ds.nnz, "n_features": ds.n_features,
           "decoded_MB": decoded / 1e6, "budget_MB": budget / 1e6}  # fmt: skip

    problem = Problem(n_features=ds.n_features, c_pos=a.C, c_neg=a.C, seed=0)
    with stream_dataset(ds, budget, n_units=2, chunk_rows=a.chunk_rows, mode=a.mode) as src:
        res.update(mode=src.mode, ingest_s=src.cache.ingest_seconds, plan=src.plan.describe(),
                   minimum_budget_MB=src.plan.minimum / 1e6, n_chunks=src.n_chunks)  # fmt: skip
        res.update(overlap(src, problem, a.epochs))
    tr = make_trainer(ResidentSource(ds), problem, Devices(n_cpu=2))
    res["all_resident_epoch_s"] = statistics.median(tr.run_epoch().seconds for _ in range(3))
    tr.close()
    if not a.skip_ttt:
        kw = dict(C=a.C, tol=a.tol, max_iter=300, random_state=0, n_jobs=2)
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        mem = LogisticRegression(memory_budget=10 * decoded, **kw).fit(path)
        t_mem = time.perf_counter() - t0
        os.environ["SNAPFIT_STREAM"] = a.mode
        t0 = time.perf_counter()
        ooc = LogisticRegression(memory_budget=budget, chunk_rows=a.chunk_rows, **kw).fit(path)
        t_ooc = time.perf_counter() - t0
        res.update(in_memory_s=t_mem, in_memory_epochs=int(mem.n_iter_[0]), out_of_core_s=t_ooc,
                   out_of_core_epochs=int(ooc.n_iter_[0]), time_to_target_ratio=t_ooc / t_mem,
                   io_wait_s=sum(h["io_wait"] for h in ooc.history_))  # fmt: skip
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
