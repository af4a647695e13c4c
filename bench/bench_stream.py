"""Out-of-core vs in-memory on Criteo-like data: overlap efficiency and time-to-target.

    python bench/bench_stream.py --rows 1000000 --budget-frac 0.2 [--out DIR]

Reports medians over epochs (the machine is shared: single timings are noisy):
* overlap efficiency = max(read-only epoch, compute-only epoch) / streamed epoch, where
  read-only streams every chunk and does no math, and compute-only is an all-resident epoch;
* time-to-target ratio = out-of-core fit seconds / in-memory fit seconds (both from the Parquet
  file, first pass included), with the epochs each needed.
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
from snapfit.engine import Problem
from snapfit.engine.loop import Trainer
from snapfit.stream import StreamSource
from snapfit.stream.choose import resident_peak_nbytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--budget-frac", type=float, default=0.2)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--C", type=float, default=0.1)
    ap.add_argument("--epochs", type=int, default=5, help="epochs timed for the overlap")
    ap.add_argument("--chunk-rows", type=int, default=1 << 15)
    ap.add_argument("--hash-bits", type=int, default=18)
    ap.add_argument("--row-group-rows", type=int, default=1 << 16)
    ap.add_argument("--out", default=tempfile.gettempdir())
    a = ap.parse_args()
    path = os.path.join(a.out, f"criteo_like_{a.rows}_{a.hash_bits}_{a.row_group_rows}.parquet")
    if not os.path.exists(path):
        make_criteo_like_parquet(path, a.rows, seed=0, hash_bits=a.hash_bits,
                                 row_group_rows=a.row_group_rows)  # fmt: skip
    ds = Dataset(path)
    decoded = (resident_peak_nbytes(ds, 2) - 12 * ds.n_rows) // 2
    budget = int(a.budget_frac * decoded)
    res = {"rows": ds.n_rows, "nnz": ds.nnz, "decoded_MB": decoded / 1e6, "budget_MB": budget / 1e6}

    problem = Problem(n_features=ds.n_features, c_pos=a.C, c_neg=a.C, n_jobs=2, seed=0)
    with StreamSource(ds, budget, n_jobs=2, chunk_rows=a.chunk_rows) as src:
        res["ingest_s"] = src.cache.ingest_seconds
        res["plan"] = src.plan.describe()
        tr = Trainer(src, problem, state=src.make_state())
        stream = [tr.run_epoch().seconds for _ in range(a.epochs)]
        tr.close()
        reads = []
        for e in range(a.epochs):
            src.make_state()
            t0 = time.perf_counter()
            for k, _ in src.epoch(list(np.random.default_rng(e).permutation(src.n_chunks))):
                src.release(k)
            reads.append(time.perf_counter() - t0)
    from snapfit.engine.source import ResidentSource

    tr = Trainer(ResidentSource(ds), problem)
    compute = [tr.run_epoch().seconds for _ in range(a.epochs)]
    tr.close()
    med = statistics.median
    res.update(stream_epoch_s=med(stream), read_only_s=med(reads), compute_only_s=med(compute))
    res["overlap_efficiency"] = max(med(reads), med(compute)) / med(stream)

    kw = dict(C=a.C, tol=a.tol, max_iter=300, random_state=0, n_jobs=2)
    warnings.simplefilter("ignore")
    t0 = time.perf_counter()
    mem = LogisticRegression(memory_budget=10 * decoded, **kw).fit(path)
    t_mem = time.perf_counter() - t0
    t0 = time.perf_counter()
    ooc = LogisticRegression(memory_budget=budget, chunk_rows=a.chunk_rows, **kw).fit(path)
    t_ooc = time.perf_counter() - t0
    res.update(in_memory_s=t_mem, in_memory_epochs=int(mem.n_iter_[0]), out_of_core_s=t_ooc,
               out_of_core_epochs=int(ooc.n_iter_[0]), time_to_target_ratio=t_ooc / t_mem,
               io_wait_s=sum(h["io_wait"] for h in ooc.history_))  # fmt: skip
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
