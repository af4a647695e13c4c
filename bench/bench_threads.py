"""Two CPU threads against one: epochs, seconds per epoch and time to target.

    python -m bench.bench_threads [--rows 1000000] [--C 0.1] [--repeats 3] [--json OUT]

Systems, all snapfit on the same Criteo-like rows (``bench.sets``, kind ``criteo-like``: 13
integer fields and 26 hashed categoricals in 2^20 features), ``C`` 0.1, no intercept:

* ``1 thread``;
* ``2 threads, deterministic``: CoCoA+ units on private views (``deterministic=True``);
* ``2 threads, shared``: threads sharing ``w`` (the default, ``snapfit.engine.shared``).

Two targets, from one fit per run with ``tol=1e-4`` (the estimators' default):

* **gap**: the exact relative duality gap at most 1e-4, i.e. the fit's own stop. Epochs are
  ``n_iter_``; the time is the fit's wall clock (set-up, the shared threads' counting pass and
  every exact check with its ``w(alpha)`` rebuild included), less the test scoring below;
* **log loss**: the test log loss within 1e-4 of the optimum's (a reference fit, one thread,
  ``tol=1e-9``). Each epoch's model is scored by the fit's callback, outside the clock; the
  time is the epochs' own seconds summed up to the first epoch that reaches it.

``s/epoch`` is the median over a run's epochs that made no exact check. ``CPU s to gap`` is
the process's CPU time for the gap fit (scoring excluded): on a machine whose cores other work
also uses, it shows what the threads cost, whatever share of the cores they got; divided by
the threads it is the time an idle machine would take. Every number is the
median of ``--repeats`` runs, all systems interleaved in one invocation so that the ratios
share the machine's conditions (on a shared, loaded machine the seconds move; the ratios are
the result).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

SYSTEMS = {
    "1 thread": {"n_jobs": 1},
    "2 threads, deterministic": {"n_jobs": 2, "deterministic": True},
    "2 threads, shared": {"n_jobs": 2, "deterministic": False},
}
GAP_TOL = 1e-4
LOGLOSS_TOL = 1e-4


def log_loss(X, y, coef) -> float:
    """Mean test log loss of ``coef`` (no intercept), labels in {0, 1}."""
    m = np.asarray(X @ coef).ravel() * np.where(y > 0, 1.0, -1.0)
    return float(np.mean(np.logaddexp(0.0, -m)))


def reference(X, y, Xte, yte, C: float) -> dict:
    """The optimum: one thread to a relative gap of 1e-9."""
    from snapfit import LogisticRegression

    est = LogisticRegression(C=C, fit_intercept=False, tol=1e-9, max_iter=1000, random_state=0)
    est.fit(X, y)
    last = est.history_[-1]
    return {"primal": last["primal"], "rel_gap": last["rel_gap"], "epochs": int(est.n_iter_[0]),
            "test_logloss": log_loss(Xte, yte, est.coef_.ravel())}  # fmt: skip


def one_run(X, y, Xte, yte, C: float, params: dict, best_logloss: float, seed: int) -> dict:
    """One fit to the gap target, its test log loss scored after every epoch."""
    from snapfit import LogisticRegression

    losses: list[float] = []
    scoring = [0.0, 0.0]

    def score(rec, coef, intercept):
        t0, c0 = time.perf_counter(), time.process_time()
        losses.append(log_loss(Xte, yte, coef))
        scoring[0] += time.perf_counter() - t0
        scoring[1] += time.process_time() - c0

    est = LogisticRegression(C=C, fit_intercept=False, tol=GAP_TOL, max_iter=500,
                             random_state=seed, **params)  # fmt: skip
    t0, c0 = time.perf_counter(), time.process_time()
    est.fit(X, y, callbacks=[score])
    wall = time.perf_counter() - t0 - scoring[0]
    cpu_s = time.process_time() - c0 - scoring[1]
    hist = est.history_
    seconds = np.array([h["seconds"] for h in hist])
    reached = [i for i, ll in enumerate(losses) if ll - best_logloss <= LOGLOSS_TOL]
    first = reached[0] if reached else None
    plain = [h["seconds"] for h in hist if not h["exact"]] or list(seconds)
    return {
        "gap_epochs": int(est.n_iter_[0]),
        "gap_seconds": wall,
        "gap_cpu_seconds": cpu_s,
        "gap_reached": bool(hist[-1]["exact"] and hist[-1]["rel_gap"] <= GAP_TOL),
        "ll_epochs": None if first is None else first + 1,
        "ll_seconds": None if first is None else float(seconds[: first + 1].sum()),
        "s_per_epoch": float(np.median(plain)),
        "final_rel_gap": hist[-1]["rel_gap"],
        "test_logloss": losses,
    }


def median(runs: list[dict], key: str):
    vals = [r[key] for r in runs if r[key] is not None]
    if len(vals) < len(runs):
        return None  # not reached in every run
    return float(np.median(vals))


def table(summary: dict) -> str:
    one = summary["1 thread"]
    lines = [
        "| system | epochs to gap 1e-4 | time to gap 1e-4 | epochs to test log loss | "
        "time to test log loss | s / epoch | speed-up to gap (vs 1 thread) | CPU s to gap |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, s in summary.items():
        ll_e = "-" if s["ll_epochs"] is None else f"{s['ll_epochs']:g}"
        ll_t = "-" if s["ll_seconds"] is None else f"{s['ll_seconds']:.1f} s"
        lines.append(
            f"| {name} | {s['gap_epochs']:g} | {s['gap_seconds']:.1f} s | {ll_e} | {ll_t} | "
            f"{s['s_per_epoch']:.2f} | {one['gap_seconds'] / s['gap_seconds']:.2f}x | "
            f"{s['gap_cpu_seconds']:.1f} |"
        )
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--C", type=float, default=0.1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write every run's numbers here")
    args = ap.parse_args(argv)

    from bench.sets import load_xy, make_set, meta_of

    set_dir = make_set("criteo-like", args.rows)
    X, y = load_xy(f"{set_dir}/train.npz")
    Xte, yte = load_xy(f"{set_dir}/test.npz")
    meta = meta_of(set_dir)
    print(f"{meta['name']}: {meta['rows']} rows, {meta['nnz'] / meta['rows']:.1f} nnz/row, "
          f"{meta['n_features']} features, test {meta['test_rows']} rows", flush=True)  # fmt: skip
    ref = reference(X, y, Xte, yte, args.C)
    print(f"optimum: primal {ref['primal']:.10g} (rel gap {ref['rel_gap']:.1e}, "
          f"{ref['epochs']} epochs), test log loss {ref['test_logloss']:.6f}",
          flush=True)  # fmt: skip
    runs: dict[str, list[dict]] = {name: [] for name in SYSTEMS}
    for rep in range(args.repeats):
        for name, params in SYSTEMS.items():
            r = one_run(X, y, Xte, yte, args.C, params, ref["test_logloss"], seed=rep)
            runs[name].append(r)
            print(f"run {rep + 1} {name}: {r['gap_epochs']} epochs, {r['gap_seconds']:.1f} s to "
                  f"gap; log loss target at epoch {r['ll_epochs']}; "
                  f"{r['s_per_epoch']:.2f} s/epoch", flush=True)  # fmt: skip
    keys = (
        "gap_epochs",
        "gap_seconds",
        "gap_cpu_seconds",
        "ll_epochs",
        "ll_seconds",
        "s_per_epoch",
    )
    summary = {name: {k: median(rs, k) for k in keys} for name, rs in runs.items()}
    print()
    print(table(summary))
    out = {"set": meta, "C": args.C, "reference": ref, "runs": runs, "summary": summary}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
