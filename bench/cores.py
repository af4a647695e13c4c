"""This machine's two-core scaling for work that shares nothing, measured beside the fits.

    python -m bench.cores [--trials 5]

On bare metal two cores give two threads that share nothing ~2x one thread's rate; on a VM
whose vCPUs are hyperthreads of one core, or whose host runs other tenants, less, and it moves
from minute to minute (the bench machines' two vCPUs gave 1.35-2.74x in single trials,
medians 1.59-1.94x by machine and hour). A fit's two-thread speed-up means little without
it, so the bench measures it beside the fits it compares (one probe per round of fits,
``bench_solver.time_to_target``) and reports it with the speed-up. It is a reference, not a
bound: a memory-bound pass can scale better than this loop (two cores hide more memory
latency than one), and did in runs 27-29 (``docs/threads.md``).

A trial runs a compute-only loop (logarithms: no memory traffic, no shared cache lines, no
allocation) on one thread, then the same loop on two threads at once, and gives
``2 t1 / t2``; one-thread and two-thread runs alternate so a slow spell hits both.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
from numba import njit

N_STEPS = 40_000_000  # ~0.35 s of one core per run on the bench machines


@njit(nogil=True, cache=True)
def _spin(n: int) -> float:
    s = 0.0
    for i in range(n):
        s += np.log(1.0001 + i * 1e-9)
    return s


def _two(n: int) -> float:
    """Seconds for two threads each running ``_spin(n)`` at once."""
    threads = [threading.Thread(target=_spin, args=(n,)) for _ in range(2)]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.perf_counter() - t0


def core_scaling(trials: int = 5, n: int = N_STEPS) -> list[float]:
    """``2 t1 / t2`` of ``trials`` alternating one- and two-thread runs of ``_spin(n)``."""
    _spin(10)  # compiled (or loaded from the cache) before any clock
    out = []
    for _ in range(trials):
        t0 = time.perf_counter()
        _spin(n)
        t1 = time.perf_counter() - t0
        out.append(2.0 * t1 / _two(n))
    return out


def probe(trials: int = 5) -> list[float]:
    """``core_scaling`` in a fresh interpreter (as the fits run: one process each); an empty
    list when it fails (the bench reports no ceiling then rather than stopping)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cmd = [sys.executable, "-m", "bench.cores", "--trials", str(trials)]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=root, timeout=600)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1])["scaling"] if p.returncode == 0 and lines else []


def summary(values: list[float]) -> dict:
    """Median and quartiles of all trials (``None`` when there are none)."""
    if not values:
        return {"trials": 0, "median": None}
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    return {"trials": len(values), "median": float(med), "q1": float(q1), "q3": float(q3),
            "all": [round(v, 3) for v in values]}  # fmt: skip


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5)
    a = ap.parse_args(argv)
    print(json.dumps({"scaling": core_scaling(a.trials)}), flush=True)


if __name__ == "__main__":
    main()
