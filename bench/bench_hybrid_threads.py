"""Two CPU threads sharing ``w`` with hot columns out (the hybrid) against one thread.

    python -m bench.bench_hybrid_threads [--kinds criteo-like,criteo-40] [--rows 1000000]
        [--C 0.1] [--intercept] [--repeats 3] [--cap 2048] [--hot-steps 128] [--p P] [--json OUT]

Systems, on the same rows (``bench.sets``), all driven by ``hybrid.run`` (one in-memory chunk,
a fresh permutation per epoch, the exact certificate after every epoch):

* ``1 thread``: sequential dual CD, no hot column (``cpu.cd_pass``'s loop and prefetches:
  today's one thread);
* ``hybrid 1 thread`` and ``hybrid 2 threads``: hot columns as a primal block
  (``snapfit.solvers.hybrid_threads.ThreadPass``), ``M`` from 20,000 rows.

Epochs are those to a certified relative duality gap of 1e-4; ``s/epoch`` the median of the
epochs' pass, hot steps and ``M`` (the exact checks left out: a fit makes one or two, and they
cost the same in every system; the rebuild of ``w_S`` after lost updates is reported apart);
time to target = epochs x s/epoch. ``pass_s`` is the threads' share of an epoch (the
segments); the rest of ``s/epoch`` is the hot steps and ``M``, which one thread does between
segments. Each repeat runs every system once, then the machine's two-core scaling
(``bench.cores``), so ratios share the machine's conditions; medians over
repeats are reported with every run's ratio.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from bench import cores
from bench.sets import load_xy, make_set

TARGET = 1e-4


def one(args, sq, d, C, bias, threads, hybrid_on, cap, hot_steps, seed, max_epochs, p=None) -> dict:
    from snapfit.solvers import hybrid
    from snapfit.solvers.hybrid_threads import ThreadPass

    made = []

    def factory(*state):
        made.append(ThreadPass(*state, n_threads=threads))
        return made[-1]

    t0 = time.perf_counter()
    r = hybrid.run(
        args, sq, d, C, C, bias, threads, tol=TARGET, max_epochs=max_epochs, seed=seed,
        hot=None if hybrid_on else np.zeros(0, np.int64), cap=cap, hot_steps=hot_steps,
        device=factory, m_rows=20_000, p=p,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    made[0].close()
    epochs = r.epochs_to(TARGET)
    s_epoch = float(np.median(r.seconds))
    return {
        "epochs": epochs, "s_epoch": s_epoch,
        "time": None if epochs is None else epochs * s_epoch,
        "n_hot": r.n_hot, "segments": r.segments, "rebuild_s": made[0].rebuild_s / len(r.seconds),
        "pass_s": made[0].pass_s / len(r.seconds),
        "wall": wall, "max_identity": max(r.identity),
    }  # fmt: skip


SYSTEMS = {"1 thread": (1, False), "hybrid 1 thread": (1, True), "hybrid 2 threads": (2, True)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default="criteo-like,criteo-40")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--C", type=float, default=0.1)
    ap.add_argument("--intercept", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cap", type=int, default=2048)
    ap.add_argument("--hot-steps", type=int, default=128)
    ap.add_argument("--p", type=float, help="hot share (default: hybrid.hot_share)")
    ap.add_argument("--max-epochs", type=int, default=200)
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    from snapfit.solvers.emulate import csr_args

    bias = 1.0 if a.intercept else 0.0
    out = {"rows": a.rows, "C": a.C, "intercept": a.intercept, "cap": a.cap,
           "hot_steps": a.hot_steps, "kinds": {}}  # fmt: skip
    for kind in a.kinds.split(","):
        X, y = load_xy(f"{make_set(kind, a.rows)}/train.npz")
        args, sq = csr_args(X, y)
        runs = []
        for rep in range(a.repeats):
            run = {}
            for name in a.systems.split(","):
                threads, on = SYSTEMS[name]
                run[name] = one(args, sq, X.shape[1], a.C, bias, threads, on, a.cap,
                                a.hot_steps, rep, a.max_epochs, a.p)  # fmt: skip
                print(kind, rep, name, json.dumps(run[name]), flush=True)
            run["cores"] = cores.summary(cores.probe(3))["median"]
            print(kind, rep, "cores", run["cores"], flush=True)
            runs.append(run)
        out["kinds"][kind] = runs
        print(table(kind, runs), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


def table(kind: str, runs: list[dict]) -> str:
    names = [k for k in runs[0] if k != "cores"]
    lines = [f"{kind}: | system | epochs to 1e-4 | s/epoch | time to target | vs 1 thread |",
             "|---|---|---|---|---|"]  # fmt: skip
    base = [r["1 thread"]["time"] for r in runs] if "1 thread" in names else None
    for name in names:
        ep = [r[name]["epochs"] for r in runs]
        se = [r[name]["s_epoch"] for r in runs]
        tt = [r[name]["time"] for r in runs]
        ratio = ""
        if base and None not in tt:
            ratio = ", ".join(f"{b / t:.2f}" for b, t in zip(base, tt, strict=True))
        med = np.median([t for t in tt if t is not None]) if None not in tt else None
        lines.append(f"| {name} | {ep} | {np.median(se):.3f} | {med} | {ratio} |")
    lines.append(f"two-core scaling per repeat: {[r['cores'] for r in runs]}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
