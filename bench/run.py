"""The whole benchmark: ``python -m bench --quick`` (<= ~10 min on 2 cores) or ``python -m bench``.

Three parts, all in one invocation so every ratio shares the machine's conditions:

1. objective check: every system fitted tightly on a small Criteo-like set; their primal values
   at snapfit's objective must agree (printed with relative differences);
2. systems table: every system on Criteo-like, converted Criteo TSV and one-hot svmlight sets,
   each with its own stopping rule: seconds per epoch, nnz/s, peak RSS, primal, test log loss;
3. time to target (``bench_solver.py``): snapfit vs snap ML vs liblinear on the largest sets of
   two shapes: ``make-data``'s Criteo-like rows (~33 entries, missing fields) and the same
   generator with every field present (``criteo-40``: 39 entries + intercept, as in the
   independent comparison), epochs and s/epoch reported apart.

Data is made under ``bench/data/`` (git-ignored) on first use; results go to ``bench/results/``
(``results.json``, ``RESULTS.md``, PNG plots; see ``bench/report.py``). Every job's wall time
and every part's are kept in ``results.json`` (``timings``) and shown in ``RESULTS.md``.
``--dry-run`` prints the plan without running anything; ``--scale 0.01`` runs a mode's plan on
sets 100x smaller (a check that it starts and finishes; its timings mean nothing).
``--model svm`` times the hinge-loss linear SVM to a primal target instead (part 3 only).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

from bench.bench_solver import (
    CURVE,
    SVM_SYSTEMS,
    SWEEP,
    budget_of,
    time_to_target,
    used_budget,
)
from bench.sets import make_set, meta_of
from bench.systems import SYSTEMS, children_cpu_s, run_job

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

# Row counts of the sets; ``target_budget_s``: seconds of fits a swept system's whole time-to-target
# measurement (search and timed fits) may take; a probe that would overrun it is not started and
# the system is reported as "not reached within" it (``systems.sweep``). Quick mode
# aims at well under 10 min on 2 cores, data included: lbfgs and VW cost about the same per set
# whatever its rows (their per-iteration work is dominated by the 2^20-feature vectors: scipy's
# L-BFGS-B update, VW's weight array), and liblinear's fits grow faster than linearly with
# max_iter (~100 s per fit at 500k rows), hence its search budget.
MODES = {
    "quick": {
        "agree": ("tiny", 5_000),
        "table": [("criteo-like", 50_000), ("criteo-tsv", 25_000), ("onehot-svm", 25_000)],
        "target": [("criteo-like", 250_000), ("criteo-40", 250_000)],
        "target_budget_s": {"snapml-1": 150.0, "snapml-2": 150.0, "liblinear": 90.0},
    },
    "full": {
        "agree": ("tiny", 20_000),
        "table": [("criteo-like", 1_000_000), ("criteo-tsv", 1_000_000), ("onehot-svm", 1_000_000)],
        "target": [("criteo-like", 4_000_000), ("criteo-40", 4_000_000)],
        "target_budget_s": {"snapml-1": 3600.0, "snapml-2": 3600.0, "liblinear": 4 * 3600.0},
    },
}
# The objective check's pass mark: every system's primal within this of the lowest, relative.
AGREE_RTOL = 1e-5

# Tight settings for the objective check, each about the cheapest that lands well inside
# AGREE_RTOL (lbfgs stops on its own: float32 data floors it near 1e-6, see RESULTS.md).
TIGHT = {
    "snapfit-1": {"tol": 1e-10, "max_iter": 5000},
    "snapfit-2": {"tol": 1e-10, "max_iter": 5000},
    "snapfit-2s": {"tol": 1e-10, "max_iter": 5000},
    "snapfit-ooc": {"tol": 1e-10, "max_iter": 5000},
    "snapml-1": {"tol": 1e-10, "max_iter": 10000},
    "snapml-2": {"tol": 1e-10, "max_iter": 10000},
    "liblinear": {"tol": 1e-8, "max_iter": 1000},
    "lbfgs": {"tol": 1e-10, "max_iter": 20000},
    "saga": {"tol": 1e-8, "max_iter": 500},
    "vw": {"max_iter": 200, "termination": 0},
}
# Each system's usual stopping rule for the systems table (the rules differ in meaning; the
# like-for-like comparison is the time to target). lbfgs: scikit-learn's default max_iter.
USUAL = {
    "snapfit-1": {"tol": 1e-4, "max_iter": 300},
    "snapfit-2": {"tol": 1e-4, "max_iter": 300},
    "snapfit-2s": {"tol": 1e-4, "max_iter": 300},
    "snapfit-ooc": {"tol": 1e-4, "max_iter": 300},
    "snapml-1": {"tol": 1e-4, "max_iter": 300},
    "snapml-2": {"tol": 1e-4, "max_iter": 300},
    "liblinear": {"tol": 1e-4, "max_iter": 100},
    "lbfgs": {"tol": 1e-4, "max_iter": 100},
    "saga": {"tol": 1e-4, "max_iter": 50},
    "vw": {"max_iter": 20},
}


def n_jobs_of(system: str) -> int:
    return 2 if system in ("snapfit-2", "snapfit-2s", "snapfit-ooc", "snapml-2") else 1


def run_systems(set_dir: str, settings: dict, *, C: float, repeats: int, log,
                rtol: float | None = None, one_process: bool = False) -> dict:  # fmt: skip
    """Every system on ``set_dir``, each in its own process (for its peak RSS) unless
    ``one_process`` (the objective check, which reports no memory: saves ~2-3 s of imports per
    system)."""
    budget = budget_of(set_dir)
    out = {"set": meta_of(set_dir), "budget": budget, "systems": {}}
    specs = [dict(system=name, set=set_dir, C=C, mode="converge", n_jobs=n_jobs_of(name),
                  repeats=repeats, budget=budget["asked"], **settings[name])
             for name in SYSTEMS]  # fmt: skip
    if one_process:
        t0, cpu0 = time.perf_counter(), children_cpu_s()
        results = run_job(specs)
        out["one_process_wall_s"] = time.perf_counter() - t0
        out["one_process_cpu_s"] = children_cpu_s() - cpu0
    else:
        results = (run_job(spec) for spec in specs)
    for name, r in zip(SYSTEMS, results, strict=True):
        r.pop("history", None)
        r.pop("epoch_times_all", None)
        if one_process:
            r.pop("peak_rss_mb", None)
            r.pop("data_rss_mb", None)
        out["systems"][name] = r
        if name == "snapfit-ooc":
            out["budget"] = used_budget(budget, r)
        msg = r.get("error") or f"primal {r['primal']:.10g}, {r['n_iter']} it, {r['fit_s']:.2f} s"
        log(f"  {name:12s} {msg}  [{r['wall_s']:.0f} s]")
    best = min((r["primal"] for r in out["systems"].values() if "primal" in r), default=None)
    for r in out["systems"].values():
        if "primal" in r:
            r["primal_rel_excess"] = (r["primal"] - best) / abs(best)
    if rtol is not None:
        out["rtol"] = rtol
        for name, r in out["systems"].items():
            r["agrees"] = "primal" in r and r["primal_rel_excess"] <= rtol
            log(f"  {name:12s} {'PASS' if r['agrees'] else 'FAIL'} "
                f"({r.get('primal_rel_excess', float('nan')):.1e} vs {rtol:g})")  # fmt: skip
        out["all_agree"] = all(r["agrees"] for r in out["systems"].values())
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


def scaled(kind_rows, scale: float):
    kind, rows = kind_rows
    return kind, max(1000, int(rows * scale))


def parts_sets(cfg: dict, skip) -> list[tuple[str, int]]:
    """The data sets the parts not skipped will use (only those are made)."""
    return ([cfg["agree"]] if "agree" not in skip else []) + (
        cfg["table"] if "table" not in skip else []) + (
        cfg["target"] if "target" not in skip else [])  # fmt: skip


def plan(cfg: dict, a) -> list[str]:
    sets = parts_sets(cfg, a.skip)
    lines = ["sets: " + ", ".join(f"{k}-{n}" for k, n in sets)]
    if "agree" not in a.skip:
        lines.append(f"objective check on {'-'.join(map(str, cfg['agree']))}: "
                     + ", ".join(SYSTEMS) + f"; one tight fit each, pass mark {AGREE_RTOL:g} "
                     "relative")  # fmt: skip
    if "table" not in a.skip:
        lines.append(f"systems table: {len(SYSTEMS)} systems x {len(cfg['table'])} sets, "
                     f"{a.repeats} fits each")  # fmt: skip
    if "target" not in a.skip:
        names = ", ".join("-".join(map(str, kr)) for kr in cfg["target"])
        lines.append(f"time to target ({a.model}) on {names}: "
                     + ", ".join(a.systems or systems_of(a.model))
                     + f"; budgets (s of fits) {cfg['target_budget_s']}")  # fmt: skip
    return lines


def systems_of(model: str) -> tuple:
    return SVM_SYSTEMS if model == "svm" else CURVE + SWEEP


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sets, <= ~10 min on 2 cores")
    ap.add_argument("--C", type=float, default=0.1)
    ap.add_argument("--repeats", type=int, default=3, help="fits per timing (median taken)")
    ap.add_argument("--skip", nargs="*", default=[], choices=["agree", "table", "target"])
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every set's rows")
    ap.add_argument("--out", default=RESULTS, help="results directory")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    ap.add_argument("--budget", nargs="*", default=[], metavar="SYSTEM=SECONDS",
                    help="time-to-target budget of a searched system (snapml-1, snapml-2, "
                         "liblinear), replacing the mode's")  # fmt: skip
    ap.add_argument("--systems", nargs="*", default=None, metavar="SYSTEM",
                    help="time to target for these systems only (default: all)")  # fmt: skip
    ap.add_argument("--no-intercept", action="store_true",
                    help="time to target with w alone, no constant feature, in every system "
                         "(needs --skip agree table)")  # fmt: skip
    ap.add_argument("--model", choices=["logistic", "svm"], default="logistic",
                    help="svm: the hinge-loss linear SVM's time to a primal target (needs "
                         "--skip agree table)")  # fmt: skip
    a = ap.parse_args(argv)
    for flag, on in (("--no-intercept", a.no_intercept), ("--model svm", a.model == "svm")):
        if on and not {"agree", "table"} <= set(a.skip):
            ap.error(f"{flag} measures the time to target only: add --skip agree table")
    known = systems_of(a.model)
    targets = tuple(a.systems) if a.systems else known
    unknown = sorted(set(targets) - set(known))
    if unknown:
        ap.error(f"--systems: unknown for {a.model} {', '.join(unknown)}; choose from "
                 f"{', '.join(known)}")  # fmt: skip
    if a.repeats < 3:
        ap.error("--repeats must be at least 3: every time is a median of 3 or more fits")
    mode = "quick" if a.quick else "full"
    cfg = dict(MODES[mode])
    cfg["target_budget_s"] = dict(cfg["target_budget_s"])
    for item in a.budget:
        name, _, sec = item.partition("=")
        if name not in SWEEP or not sec.replace(".", "", 1).isdigit():
            ap.error(f"--budget {item!r}: expected SYSTEM=SECONDS with SYSTEM one of "
                     f"{', '.join(SWEEP)}")  # fmt: skip
        cfg["target_budget_s"][name] = float(sec)
    cfg["agree"] = scaled(cfg["agree"], a.scale)
    for part in ("table", "target"):
        cfg[part] = [scaled(kr, a.scale) for kr in cfg[part]]
    log = lambda msg: print(msg, flush=True)  # noqa: E731
    command = "python -m bench" + (" --quick" if a.quick else "")
    command += f" --scale {a.scale:g}" if a.scale != 1.0 else ""
    command += f" --C {a.C:g}" if a.C != 0.1 else ""
    command += f" --repeats {a.repeats}" if a.repeats != 3 else ""
    command += f" --skip {' '.join(a.skip)}" if a.skip else ""
    command += f" --budget {' '.join(a.budget)}" if a.budget else ""
    command += f" --systems {' '.join(targets)}" if a.systems else ""
    command += " --no-intercept" if a.no_intercept else ""
    command += f" --model {a.model}" if a.model != "logistic" else ""
    if a.dry_run:
        log(f"{command} ({mode} mode) would run:")
        for line in plan(cfg, a):
            log("  " + line)
        return
    t_start = time.time()
    res = {"mode": mode, "C": a.C, "repeats": a.repeats, "machine": machine_info(),
           "intercept": not a.no_intercept, "model": a.model,
           "command": command, "scale": a.scale, "loadavg_start": os.getloadavg(),
           "timings": {}}  # fmt: skip
    timings = res["timings"]
    log(f"snapfit bench ({mode}); load average {res['loadavg_start']}")
    sets = parts_sets(cfg, a.skip)
    for kind, rows in sets:
        make_set(kind, rows, log=log)
    timings["data_s"] = time.time() - t_start
    if "agree" not in a.skip:
        t0 = time.time()
        log("objective check (tight fits, one each)")
        d = make_set(*cfg["agree"])
        res["agree"] = run_systems(d, TIGHT, C=a.C, repeats=1, log=log, rtol=AGREE_RTOL,
                                   one_process=True)  # fmt: skip
        timings["agree_s"] = time.time() - t0
    if "table" not in a.skip:
        res["table"] = []
        timings["table_s"] = {}
        for kind, rows in cfg["table"]:
            t0 = time.time()
            log(f"systems on {kind}-{rows}")
            d = make_set(kind, rows)
            res["table"].append(run_systems(d, USUAL, C=a.C, repeats=a.repeats, log=log))
            timings["table_s"][f"{kind}-{rows}"] = time.time() - t0
    if "target" not in a.skip:
        t0 = time.time()
        res["target"] = [
            time_to_target(
                make_set(*kr),
                C=a.C,
                repeats=a.repeats,
                systems=targets,
                budget_s=cfg["target_budget_s"],
                log=log,
                intercept=not a.no_intercept,
                model=a.model,
            )  # fmt: skip
            for kr in cfg["target"]
        ]
        timings["target_s"] = time.time() - t0
    res["loadavg_end"] = os.getloadavg()
    os.makedirs(a.out, exist_ok=True)
    from bench.report import write_report

    t0 = time.time()
    res["total_s"] = t0 - t_start  # drawing the report (a few seconds) comes on top
    write_report(res, a.out)
    timings["report_s"] = time.time() - t0
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    log(f"done in {time.time() - t_start:.0f} s; see {os.path.relpath(a.out)}/RESULTS.md")


if __name__ == "__main__":
    sys.exit(main())
