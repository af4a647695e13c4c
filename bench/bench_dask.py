"""Rounds, seconds and bytes per round of a Dask fit with 1 vs 2 local workers.

    python bench/bench_dask.py [--rows 20000] [--tol 1e-6] [--repeat 3] [--data criteo|sparse]
                               [--plain]

Each configuration starts a LocalCluster (processes, 1 thread per worker), warms it up (imports
and kernels on every worker, excluded from the timings), fits to ``tol`` (the exact relative
duality gap, measured every round) and prints the median over ``--repeat`` runs of the fit's
wall time, its rounds, the engine passes a worker ran (the slowest worker per round, summed),
and the mean bytes sent + received per round. The single-process estimator on the same data
is the reference (its epochs and seconds, and the relative primal difference of each fit).
``--plain`` adds plain CoCoA+ rounds (no gradient correction) capped at ``--plain-rounds``.
"""

from __future__ import annotations

import argparse
import logging
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


def _runs(client, path, params, repeat, **fit_kw):
    from snapfit.dask import DaskLogisticRegression

    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        est = DaskLogisticRegression(client=client, **params).fit(path, **fit_kw)
        secs = time.perf_counter() - t0
        h = est.history_
        out.append({
            "seconds": secs,
            "rounds": len(h),
            "passes": sum(r["passes"] for r in h),
            "bytes": float(np.mean([r["bytes_sent"] + r["bytes_received"] for r in h])),
            "rel_gap": h[-1]["rel_gap"],
            "primal": h[-1]["primal"],
        })  # fmt: skip
    return out


def _line(label, runs, primal_ref):
    med = {k: statistics.median(r[k] for r in runs) for k in ("seconds", "rounds", "passes")}
    kb = statistics.median(r["bytes"] for r in runs) / 1e3
    worst_gap = max(r["rel_gap"] for r in runs)
    diff = max(abs(r["primal"] - primal_ref) / abs(primal_ref) for r in runs)
    return (f"{label}: {med['rounds']:.0f} rounds, {med['passes']:.0f} passes, "
            f"{med['seconds']:.2f} s (median of {len(runs)}), {kb:.0f} kB/round, "
            f"final rel gap {worst_gap:.2g}, primal vs local {diff:.1e}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--C", type=float, default=0.1)
    ap.add_argument("--max-iter", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data", choices=["criteo", "sparse"], default="criteo")
    ap.add_argument("--plain", action="store_true", help="also run plain CoCoA+ rounds")
    ap.add_argument("--plain-rounds", type=int, default=300)
    args = ap.parse_args()

    from distributed import Client, LocalCluster

    from snapfit import LogisticRegression
    from snapfit.dask import warm_up

    warnings.simplefilter("ignore")
    logging.getLogger("distributed").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as d:
        path = _data(args.data, args.rows, d)
        params = dict(C=args.C, tol=args.tol, max_iter=args.max_iter, random_state=0)
        LogisticRegression(**dict(params, max_iter=2)).fit(path)  # kernels compiled or loaded
        t0 = time.perf_counter()
        ref = LogisticRegression(**dict(params, tol=min(args.tol, 1e-10), max_iter=2000)).fit(path)
        ref_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        local = LogisticRegression(**params).fit(path)
        local_s = time.perf_counter() - t0
        primal_ref = ref.history_[-1]["primal"]
        print(f"{args.data} {args.rows} rows, C={args.C}, tol={args.tol:g}")
        print(f"local (1 process, 1 thread): {int(local.n_iter_[0])} epochs to tol, "
              f"{local_s:.2f} s; reference optimum {int(ref.n_iter_[0])} epochs, "
              f"{ref_s:.2f} s")  # fmt: skip
        for n in (1, 2):
            with LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                              dashboard_address=None) as cl, Client(cl) as c:  # fmt: skip
                warm_up(c)
                runs = _runs(c, path, params, args.repeat)
                print(_line(f"{n} worker(s)", runs, primal_ref))
                if args.plain and n > 1:
                    plain = dict(params, max_iter=args.plain_rounds)
                    runs = _runs(c, path, plain, 1, correction=False)
                    print(_line(f"{n} workers, plain CoCoA+", runs, primal_ref))


if __name__ == "__main__":
    main()
