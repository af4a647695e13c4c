"""Rounds, seconds and bytes per round of a Dask fit with 1 vs 2 local workers.

    python bench/bench_dask.py [--rows 20000] [--tol 1e-6] [--repeat 3] [--data criteo|sparse]

Each configuration starts a LocalCluster (processes, 1 thread per worker), fits to ``tol``
(the exact relative duality gap) and prints the median over ``--repeat`` runs of the fit's wall
time (cluster start excluded), the rounds, and the mean bytes sent + received per round.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings

import numpy as np
import scipy.sparse as sp


def _data(kind: str, rows: int, directory: str) -> str:
    path = os.path.join(directory, f"{kind}.parquet")
    if kind == "criteo":
        from snapfit.datasets.criteo_like import make_criteo_like_parquet

        make_criteo_like_parquet(path, rows, seed=0, hash_bits=16, row_group_rows=rows // 8)
    else:
        from snapfit.data import write_parquet

        rng = np.random.default_rng(0)
        idx = rng.integers(0, 4096, size=(rows, 12))
        X = sp.csr_matrix(
            (np.ones(idx.size, np.float32), idx.ravel(), np.arange(0, idx.size + 1, 12)),
            shape=(rows, 4096),
        )
        y = (X @ rng.normal(size=4096) + rng.logistic(size=rows) > 0).astype(np.int8)
        write_parquet(path, X, y, row_group_rows=rows // 8)
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--C", type=float, default=0.1)
    ap.add_argument("--max-iter", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data", choices=["criteo", "sparse"], default="sparse")
    args = ap.parse_args()

    from distributed import Client, LocalCluster

    from snapfit import LogisticRegression
    from snapfit.dask import DaskLogisticRegression

    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as d:
        path = _data(args.data, args.rows, d)
        params = dict(C=args.C, tol=args.tol, max_iter=args.max_iter, random_state=0)
        t0 = time.perf_counter()
        local = LogisticRegression(**params).fit(path)
        print(f"{args.data} {args.rows} rows, C={args.C}, tol={args.tol:g}")
        print(f"local (1 process, 1 thread): {int(local.n_iter_[0])} epochs, "
              f"{time.perf_counter() - t0:.2f} s")  # fmt: skip
        for n in (1, 2):
            with LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                              dashboard_address=None) as cl, Client(cl) as c:  # fmt: skip
                secs, rounds, nbytes, gaps = [], [], [], []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    est = DaskLogisticRegression(client=c, **params).fit(path)
                    secs.append(time.perf_counter() - t0)
                    h = est.history_
                    rounds.append(len(h))
                    nbytes.append(np.mean([r["bytes_sent"] + r["bytes_received"] for r in h]))
                    gaps.append(h[-1]["rel_gap"])
                print(f"{n} worker(s): {statistics.median(rounds):.0f} rounds, "
                      f"{statistics.median(secs):.2f} s (median of {args.repeat}), "
                      f"{statistics.median(nbytes) / 1e3:.0f} kB/round, "
                      f"final rel gap {max(gaps):.2g}")  # fmt: skip


if __name__ == "__main__":
    main()
