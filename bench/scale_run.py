"""A Criteo day from disk under a fixed budget: the scale run (not part of CI).

    snapfit make-data criteo-like day.parquet --rows 200000000
    python bench/scale_run.py day.parquet --budget 2GB --n-jobs 2 [--ref-rows 4000000]

Two processes, one after the other, so each peak RSS is its own:

1. reference: the first ``--ref-rows`` rows of the same generator fitted in memory (arrays, one
   chunk) for a few epochs, ``--ref-fits`` times (default 3): the in-memory rate in nnz/s on
   this machine, now, the median of the fits' (one short fit on a shared host measured 116M
   and, minutes later, 174M nnz/s);
2. the scale fit: ``LogisticRegression(memory_budget=...)`` on the Parquet file, streamed,
   until the relative gap is ``--tol``; per epoch the seconds, the relative gap and the time
   waited for data; the first pass's seconds, the cache's bytes per row and format, and the
   process's peak RSS (``VmHWM``), and its RSS sampled every second, so the peak of each phase
   (set-up and first pass, the epochs, the end of the fit) is seen apart.

``--shared`` runs both parts with threads sharing ``w`` (``deterministic=False``) instead of
CoCoA+ threads: at this scale the epochs wait for data anyway, so the fewer epochs of the shared
scheme are what counts.

Printed as JSON and a few lines: s/epoch after the first pass against the total nnz divided by
the in-memory rate (the acceptance asks for at most 1.5x), and peak RSS against the budget.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time


def status_bytes(key: str = "VmHWM") -> int:
    """A size from ``/proc/self/status``: ``VmHWM`` (peak RSS), ``VmRSS`` (RSS now)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


class RssSampler:
    """RSS every ``every`` seconds in a daemon thread: ``samples`` of ``(seconds, bytes)``."""

    def __init__(self, every: float = 1.0):
        self.t0 = time.perf_counter()
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every,), daemon=True)
        self._thread.start()

    def _run(self, every: float) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter() - self.t0, status_bytes("VmRSS")))
            self._stop.wait(every)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def peak(self, lo: float, hi: float) -> int | None:
        """Largest sample in ``[lo, hi)`` seconds, None when no sample fell there."""
        return max((b for t, b in self.samples if lo <= t < hi), default=None)


def reference(rows: int, n_jobs: int, C: float, shared: bool = False, fits: int = 3) -> dict:
    """In-memory nnz/s on ``rows`` rows of the generator: each fit's median epoch after the
    first, the median over ``fits`` fits."""
    import statistics

    from snapfit import LogisticRegression
    from snapfit.datasets import make_criteo_like

    X, y = make_criteo_like(rows, seed=0, hash_bits=20)
    per_fit = []
    for r in range(fits):
        est = LogisticRegression(C=C, n_jobs=n_jobs, max_iter=6, tol=1e-12, random_state=r,
                                 fit_intercept=False, deterministic=not shared)  # fmt: skip
        est.fit(X, y)
        per_fit.append(statistics.median(h["seconds"] for h in est.history_[1:]))
    secs = statistics.median(per_fit)
    return {"rows": rows, "nnz": int(X.nnz), "epoch_s": secs, "fits_epoch_s": per_fit,
            "nnz_per_s": X.nnz / secs, "peak_rss_bytes": status_bytes()}  # fmt: skip


def scale(
    path: str, budget: str, n_jobs: int, C: float, tol: float, max_iter: int, shared: bool = False
) -> dict:
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
    sampler = RssSampler()
    t0 = time.perf_counter()
    ends: list[float] = []  # seconds since t0 at the end of each epoch

    def cb(rec, coef, intercept):
        ends.append(time.perf_counter() - t0)
        print(f"epoch {rec.epoch}: {rec.seconds:.1f} s ({rec.idle:.1f} s idle), relative gap "
              f"{rec.rel_gap:.3e}, RSS "
              f"{status_bytes('VmRSS') / 1e9:.2f} GB", file=sys.stderr, flush=True)  # fmt: skip

    est = LogisticRegression(C=C, n_jobs=n_jobs, memory_budget=budget, tol=tol,
                             max_iter=max_iter, random_state=0, fit_intercept=False,
                             deterministic=not shared)  # fmt: skip
    est.fit(path, callbacks=[cb])
    total = time.perf_counter() - t0
    sampler.stop()
    start = (ends[0] - est.history_[0]["seconds"]) if ends else total  # the first epoch's start
    last = ends[-1] if ends else total
    # Phases on the sampler's clock (it started just before t0).
    off = t0 - sampler.t0
    peaks = {"setup_and_first_pass": sampler.peak(0.0, off + start),
             "epochs": sampler.peak(off + start, off + last),
             "end": sampler.peak(off + last, float("inf"))}  # fmt: skip
    src = kept.get("source")
    cache = getattr(src, "cache", None)
    return {
        "rows": ds.n_rows, "nnz": ds.nnz, "budget": budget, "n_jobs": n_jobs,
        "fit_s": total, "mode": getattr(src, "mode", "resident"),
        "cache_format": getattr(src, "cache_format", None),
        "first_pass_s": getattr(cache, "ingest_seconds", None),
        "cache_bytes_per_row": getattr(cache, "bytes_per_row", None),
        "epochs": [{"epoch": h["epoch"], "seconds": h["seconds"], "rel_gap": h["rel_gap"],
                    "io_wait": h.get("io_wait"), "idle": h.get("idle")}
                   for h in est.history_],  # fmt: skip
        "peak_rss_bytes": status_bytes(), "peak_rss_by_phase": peaks, "shared": shared,
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
    ap.add_argument("--ref-fits", type=int, default=3)
    ap.add_argument("--shared", action="store_true", help="threads share w (deterministic=False)")
    ap.add_argument("--part", choices=["reference", "scale"], default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.part == "reference":
        print(json.dumps(reference(a.ref_rows, a.n_jobs, a.C, a.shared, a.ref_fits)))
        return
    if a.part == "scale":
        print(json.dumps(scale(a.path, a.budget, a.n_jobs, a.C, a.tol, a.max_iter, a.shared)))
        return
    out = {}
    for part in ("reference", "scale"):
        cmd = [sys.executable, __file__, a.path, "--budget", a.budget, "--n-jobs",
               str(a.n_jobs), "--C", str(a.C), "--tol", str(a.tol), "--max-iter",
               str(a.max_iter), "--ref-rows", str(a.ref_rows), "--ref-fits", str(a.ref_fits),
               "--part", part]  # fmt: skip
        cmd += ["--shared"] if a.shared else []
        # stdout carries the part's JSON; its stderr (epochs as they end) goes to ours
        res = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)
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
    phases = ", ".join(f"{k} " + ("-" if v is None else f"{v / 1e9:.2f} GB")
                       for k, v in run["peak_rss_by_phase"].items())  # fmt: skip
    peak = run["peak_rss_bytes"] / 1e9
    print(f"peak RSS {peak:.2f} GB for a budget of {run['budget']}; {phases}")
    print("relative gap per epoch: " + ", ".join(f"{e['rel_gap']:.2e}" for e in run["epochs"]))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
