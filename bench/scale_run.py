"""A Criteo day from disk under a fixed budget: the scale run (not part of CI).

    snapfit make-data criteo-like day.parquet --rows 200000000
    python bench/scale_run.py day.parquet --budget 2GB --n-jobs 2 [--ref-rows 4000000]

Two processes, one after the other, so each peak RSS is its own:

1. reference: the first ``--ref-rows`` rows of the same generator fitted in memory (arrays, one
   chunk) for a few epochs: the in-memory rate in nnz/s on this machine, now;
2. the scale fit: ``LogisticRegression(memory_budget=...)`` on the Parquet file, streamed,
   until the relative gap is ``--tol``; per epoch the seconds, the relative gap and the time
   waited for data; the first pass's seconds, the cache's bytes per row and format, and the
   process's peak RSS (``VmHWM``).

Printed as JSON and a few lines: s/epoch after the first pass against the total nnz divided by
the in-memory rate (the acceptance asks for at most 1.5x), and peak RSS against the budget.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def peak_rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def reference(rows: int, n_jobs: int, C: float) -> dict:
    """In-memory nnz/s on ``rows`` rows of the generator (median epoch after the first)."""
    import statistics

    from snapfit import LogisticRegression
    from snapfit.datasets import make_criteo_like

    X, y = make_criteo_like(rows, seed=0, hash_bits=20)
    est = LogisticRegression(C=C, n_jobs=n_jobs, max_iter=6, tol=1e-12, random_state=0,
                             fit_intercept=False)  # fmt: skip
    est.fit(X, y)
    secs = statistics.median(h["seconds"] for h in est.history_[1:])
    return {"rows": rows, "nnz": int(X.nnz), "epoch_s": secs, "nnz_per_s": X.nnz / secs,
            "peak_rss_bytes": peak_rss_bytes()}  # fmt: skip


def scale(path: str, budget: str, n_jobs: int, C: float, tol: float, max_iter: int) -> dict:
    from snapfit import LogisticRegression
    from snapfit.data import Dataset
    from snapfit.stream import StreamSource

    kept = {}
    real_init = StreamSource.__init__

    def init(self, *a, **kw):  # keep the source to read its first pass and cache after
        real_init(self, *a, **kw)
        kept["source"] = self

    StreamSource.__init__ = init
    ds = Dataset(path)
    t0 = time.perf_counter()
    est = LogisticRegression(C=C, n_jobs=n_jobs, memory_budget=budget, tol=tol,
                             max_iter=max_iter, random_state=0, fit_intercept=False)  # fmt: skip
    est.fit(path)
    total = time.perf_counter() - t0
    src = kept.get("source")
    cache = getattr(src, "cache", None)
    return {
        "rows": ds.n_rows, "nnz": ds.nnz, "budget": budget, "n_jobs": n_jobs,
        "fit_s": total, "mode": getattr(src, "mode", "resident"),
        "cache_format": getattr(src, "cache_format", None),
        "first_pass_s": getattr(cache, "ingest_seconds", None),
        "cache_bytes_per_row": getattr(cache, "bytes_per_row", None),
        "epochs": [{"epoch": h["epoch"], "seconds": h["seconds"], "rel_gap": h["rel_gap"],
                    "io_wait": h.get("io_wait")} for h in est.history_],  # fmt: skip
        "peak_rss_bytes": peak_rss_bytes(),
    }  # fmt: skip


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--budget", default="2GB")
    ap.add_argument("--n-jobs", type=int, default=2)
    ap.add_argument("--C", type=float, default=0.1)
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--max-iter", type=int, default=30)
    ap.add_argument("--ref-rows", type=int, default=4_000_000)
    ap.add_argument("--part", choices=["reference", "scale"], default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.part == "reference":
        print(json.dumps(reference(a.ref_rows, a.n_jobs, a.C)))
        return
    if a.part == "scale":
        print(json.dumps(scale(a.path, a.budget, a.n_jobs, a.C, a.tol, a.max_iter)))
        return
    out = {}
    for part in ("reference", "scale"):
        cmd = [sys.executable, __file__, a.path, "--budget", a.budget, "--n-jobs",
               str(a.n_jobs), "--C", str(a.C), "--tol", str(a.tol), "--max-iter",
               str(a.max_iter), "--ref-rows", str(a.ref_rows), "--part", part]  # fmt: skip
        res = subprocess.run(cmd, capture_output=True, text=True, check=True)
        out[part] = json.loads(res.stdout.strip().splitlines()[-1])
        print(f"{part}: {json.dumps(out[part])}", flush=True)
    ref, run = out["reference"], out["scale"]
    later = [e["seconds"] for e in run["epochs"][1:]] or [run["epochs"][0]["seconds"]]
    import statistics

    bound = run["nnz"] / ref["nnz_per_s"]
    print(f"in memory: {ref['nnz_per_s'] / 1e6:.1f} M nnz/s on {ref['rows']:,} rows; "
          f"scale: {run['rows']:,} rows, {run['nnz']:,} nnz, mode {run['mode']} "
          f"({run['cache_format']}), first pass {run['first_pass_s']:.0f} s, cache "
          f"{run['cache_bytes_per_row']:.0f} B/row")  # fmt: skip
    print(
        f"s/epoch after the first pass: median {statistics.median(later):.1f} against "
        f"{bound:.1f} at the in-memory rate: {statistics.median(later) / bound:.2f}x"
    )
    print(f"peak RSS {run['peak_rss_bytes'] / 1e9:.2f} GB for a budget of {run['budget']}")
    print("relative gap per epoch: " + ", ".join(f"{e['rel_gap']:.2e}" for e in run["epochs"]))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
