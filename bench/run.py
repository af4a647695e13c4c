"""The whole benchmark: ``python -m bench --quick`` (<= ~10 min on 2 cores) or ``python -m bench``.

Three parts, all in one invocation so every ratio shares the machine's conditions:

1. objective check: every system fitted tightly on a small Criteo-like set; their primal values
   at snapfit's objective must agree (printed with relative differences);
2. systems table: every system on Criteo-like, converted Criteo TSV and one-hot svmlight sets,
   each with its own stopping rule: seconds per epoch, nnz/s, peak RSS, primal, test log loss;
3. time to target (``bench_solver.py``): snapfit vs snap ML vs liblinear on the largest set.

Data is made under ``bench/data/`` (git-ignored) on first use; results go to ``bench/results/``
(``results.json``, ``RESULTS.md``, PNG plots; see ``bench/report.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

from bench.bench_solver import budget_of, time_to_target
from bench.sets import make_set, meta_of
from bench.systems import SYSTEMS, run_job

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

MODES = {
    "quick": {
        "agree": ("tiny", 5_000),
        "table": [("criteo-like", 100_000), ("criteo-tsv", 50_000), ("onehot-svm", 50_000)],
        "target": ("criteo-like", 500_000),
    },
    "full": {
        "agree": ("tiny", 20_000),
        "table": [("criteo-like", 1_000_000), ("criteo-tsv", 1_000_000), ("onehot-svm", 1_000_000)],
        "target": ("criteo-like", 4_000_000),
    },
}

# Tight settings for the objective check; VW's L-BFGS needs many passes (see RESULTS.md).
TIGHT = {
    "snapfit-1": {"tol": 1e-10, "max_iter": 5000},
    "snapfit-2": {"tol": 1e-10, "max_iter": 5000},
    "snapfit-ooc": {"tol": 1e-10, "max_iter": 5000},
    "snapml-1": {"tol": 1e-10, "max_iter": 10000},
    "snapml-2": {"tol": 1e-10, "max_iter": 10000},
    "liblinear": {"tol": 1e-10, "max_iter": 1000},
    "lbfgs": {"tol": 1e-10, "max_iter": 20000},
    "saga": {"tol": 1e-9, "max_iter": 2000},
    "vw": {"max_iter": 300, "termination": 0},
}
# Each system's usual stopping rule for the systems table (the rules differ in meaning; the
# like-for-like comparison is the time to target).
USUAL = {
    "snapfit-1": {"tol": 1e-4, "max_iter": 300},
    "snapfit-2": {"tol": 1e-4, "max_iter": 300},
    "snapfit-ooc": {"tol": 1e-4, "max_iter": 300},
    "snapml-1": {"tol": 1e-4, "max_iter": 300},
    "snapml-2": {"tol": 1e-4, "max_iter": 300},
    "liblinear": {"tol": 1e-4, "max_iter": 100},
    "lbfgs": {"tol": 1e-4, "max_iter": 300},
    "saga": {"tol": 1e-4, "max_iter": 50},
    "vw": {"max_iter": 20},
}


def n_jobs_of(system: str) -> int:
    return 2 if system in ("snapfit-2", "snapfit-ooc", "snapml-2") else 1


def run_systems(set_dir: str, settings: dict, *, C: float, repeats: int, log) -> dict:
    budget = budget_of(set_dir)
    out = {"set": meta_of(set_dir), "budget": budget, "systems": {}}
    for name in SYSTEMS:
        spec = dict(system=name, set=set_dir, C=C, mode="converge", n_jobs=n_jobs_of(name),
                    repeats=repeats, budget=budget["budget"], **settings[name])  # fmt: skip
        t0 = time.perf_counter()
        r = run_job(spec)
        r.pop("history", None)
        r.pop("epoch_times_all", None)
        out["systems"][name] = r
        msg = r.get("error") or f"primal {r['primal']:.10g}, {r['n_iter']} it, {r['fit_s']:.2f} s"
        log(f"  {name:12s} {msg}  [{time.perf_counter() - t0:.0f} s]")
    best = min((r["primal"] for r in out["systems"].values() if "primal" in r), default=None)
    for r in out["systems"].values():
        if "primal" in r:
            r["primal_rel_excess"] = (r["primal"] - best) / abs(best)
    return out


def machine_info() -> dict:
    import numpy
    import scipy
    import sklearn

    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), platform.processor())  # fmt: skip
    mem = next(int(ln.split()[1]) for ln in open("/proc/meminfo") if ln.startswith("MemTotal"))

    def version(mod):
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version(mod)
        except PackageNotFoundError:
            return "missing"

    return {
        "cpu": cpu, "cores": os.cpu_count(), "ram_gb": round(mem / 2**20, 1),
        "python": platform.python_version(), "numpy": numpy.__version__,
        "scipy": scipy.__version__, "scikit-learn": sklearn.__version__,
        "snapml": version("snapml"), "vowpalwabbit": version("vowpalwabbit"),
        "numba": version("numba"), "pyarrow": version("pyarrow"), "snapfit": version("snapfit"),
        "platform": platform.platform(),
    }  # fmt: skip


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sets, <= ~10 min on 2 cores")
    ap.add_argument("--C", type=float, default=0.1)
    ap.add_argument("--repeats", type=int, default=3, help="fits per timing (median taken)")
    ap.add_argument("--skip", nargs="*", default=[], choices=["agree", "table", "target"])
    a = ap.parse_args(argv)
    mode = "quick" if a.quick else "full"
    cfg = MODES[mode]
    log = lambda msg: print(msg, flush=True)  # noqa: E731
    t_start = time.time()
    res = {"mode": mode, "C": a.C, "repeats": a.repeats, "machine": machine_info(),
           "command": "python -m bench" + (" --quick" if a.quick else ""),
           "loadavg_start": os.getloadavg()}  # fmt: skip
    log(f"snapfit bench ({mode}); load average {res['loadavg_start']}")
    sets = [cfg["agree"], *cfg["table"], cfg["target"]]
    for kind, rows in sets:
        make_set(kind, rows, log=log)
    res["data_s"] = time.time() - t_start
    if "agree" not in a.skip:
        log("objective check (tight fits, one each)")
        d = make_set(*cfg["agree"])
        res["agree"] = run_systems(d, TIGHT, C=a.C, repeats=1, log=log)
    if "table" not in a.skip:
        res["table"] = []
        for kind, rows in cfg["table"]:
            log(f"systems on {kind}-{rows}")
            d = make_set(kind, rows)
            res["table"].append(run_systems(d, USUAL, C=a.C, repeats=a.repeats, log=log))
    if "target" not in a.skip:
        res["target"] = time_to_target(make_set(*cfg["target"]), C=a.C, repeats=a.repeats, log=log)
    res["loadavg_end"] = os.getloadavg()
    res["total_s"] = time.time() - t_start
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    from bench.report import write_report

    write_report(res, RESULTS)
    log(f"done in {res['total_s']:.0f} s; see {os.path.relpath(RESULTS)}/RESULTS.md")


if __name__ == "__main__":
    sys.exit(main())
