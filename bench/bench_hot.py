"""The trainer's hot block (``hot_columns=True``) against today's rule, on CPU units.

    python -m bench.bench_hot [--kinds criteo-like,criteo-40] [--rows 1000000] [--C 0.1]
        [--intercept both|yes|no] [--repeats 1] [--json OUT]

Systems, each a fit through ``snapfit.train.train`` on one in-memory chunk (``bench.sets``'
rows, the estimator's path) to an exact relative duality gap of 1e-4:

* ``1 thread`` and ``2 units``: today's rule, one CPU thread / two CoCoA+ units (``sigma' = 2``,
  ``deterministic=True``);
* ``hot 1 thread`` and ``hot 2 units``: the same with the hot block (``snapfit.engine.hot``).

Reported apart, per system: epochs, the exact checks among them, the median seconds of an
epoch without an exact check (the pass and, under the hot block, the hot step), and the fit's
seconds (setup, epochs and exact checks). Each repeat runs every system once, then the
machine's two-core scaling (``bench.cores``), so ratios share the machine's conditions.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from bench import cores
from bench.sets import fit_inputs, load_xy, make_set

TARGET = 1e-4
SYSTEMS = {
    "1 thread": (1, False),
    "2 units": (2, False),
    "hot 1 thread": (1, True),
    "hot 2 units": (2, True),
}


def one(X, y, C, bias, n_jobs, hot, seed) -> dict:
    from snapfit.engine import Devices
    from snapfit.train import train

    source, problem = fit_inputs(X, y, C, bias, tol=TARGET, max_iter=1000, seed=seed,
                                 hot_columns=hot)  # fmt: skip
    t0 = time.perf_counter()
    res = train(source, problem, devices=Devices(n_cpu=n_jobs), keep_alpha=False)
    fit_s = time.perf_counter() - t0
    plain = [r.seconds for r in res.history if not r.exact]
    return {
        "epochs": int(res.n_iter),
        "exact_checks": sum(r.exact for r in res.history),
        "epoch_s": float(np.median(plain)) if plain else float("nan"),
        "fit_s": fit_s,
        "converged": bool(res.converged),
        "primal": float(res.history[-1].primal),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default="criteo-like,criteo-40")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--C", type=float, default=0.1)
    ap.add_argument("--intercept", choices=["both", "yes", "no"], default="both")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    from snapfit.solvers import cpu

    cpu.cd_pass  # noqa: B018 - numba's cache loads on first use; warm it outside the timing
    intercepts = {"both": (True, False), "yes": (True,), "no": (False,)}[a.intercept]
    rows = []
    print("| data | intercept | system | epochs | exact checks | s/epoch | fit s | primal |")
    print("|---|---|---|---|---|---|---|---|")
    for kind in a.kinds.split(","):
        X, y = load_xy(f"{make_set(kind, a.rows)}/train.npz")
        for icpt in intercepts:
            for rep in range(a.repeats):
                for name, (n_jobs, hot) in SYSTEMS.items():
                    r = one(X, y, a.C, 1.0 if icpt else 0.0, n_jobs, hot, seed=rep)
                    r.update(kind=kind, intercept=icpt, system=name, repeat=rep)
                    rows.append(r)
                    print(f"| {kind} | {'yes' if icpt else 'no'} | {name} | {r['epochs']} | "
                          f"{r['exact_checks']} | {r['epoch_s']:.3f} | {r['fit_s']:.1f} | "
                          f"{r['primal']:.6f} |", flush=True)  # fmt: skip
                scaling = cores.probe(3)
                rows.append({"kind": kind, "intercept": icpt, "repeat": rep, "cores": scaling})
                print(f"two-core scaling of this machine: {cores.summary(scaling)}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
