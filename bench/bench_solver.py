"""Time to target test log loss: snapfit vs snap ML (1 and 2 threads) vs liblinear, one run.

    python -m bench.bench_solver --rows 4000000 [--C 0.1] [--repeats 3]

Target: the test log loss of a tightly converged reference fit (snapfit, one thread,
``tol=1e-8``) plus ``1e-4``. Each snapfit fit judges the test log loss of its model after every
epoch in the engine's callback (that time is excluded) and stops at its first epoch on target;
its time to target is the fit clock there (set-up included, as in the others' ``fit``). Fit
``r`` of a system runs from the seed of ``random_state=r``, so the median is over three paths,
not three clocks of one path (``systems._own_targets`` says why). snap ML and liblinear have
no epoch hook:
``max_iter`` is searched (``systems.next_probe``: extrapolation, then interpolation and
bisection) with ``tol=0`` and the time is that of the smallest ``max_iter`` that reaches the
target; a searched system may be given a budget of seconds of fits (``systems.sweep``), past
which it is reported as not reaching the target within it. Every time is the median of
``--repeats`` fits, all systems in the same invocation, so the ratios share the machine's
conditions; snapfit's fits are interleaved (round ``r`` runs fit ``r`` of each snapfit system,
one process each), so that a slow spell of a shared machine does not fall on one system's fits.

``model="svm"``: the hinge-loss linear SVM (snapfit, snap ML's ``SupportVectorMachine``,
liblinear's ``LinearSVC``), judged by its training primal: the target is ``P* (1 + delta)``,
``P*`` from a snapfit fit whose duality gap certifies it to ``SVM_REF_TOL`` (``svm_target``).
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from bench.cores import probe, summary
from bench.sets import make_set, meta_of
from bench.systems import merge_fits, run_job

CURVE = ("snapfit-1", "snapfit-2", "snapfit-2s", "snapfit-ooc")
SWEEP = ("snapml-1", "snapml-2", "liblinear")
# The hinge-loss SVM's systems (the others fit logistic regression only) and its defaults: the
# target's relative primal excess, the reference's relative duality gap (certifying P* to it,
# far inside the target) and the searched systems' max_iter cap (hinge needs hundreds of epochs
# at C=0.1 on these sets).
SVM_SYSTEMS = ("snapfit-1", "snapfit-2", "snapfit-2s", "snapml-1", "snapml-2", "liblinear")
SVM_DELTA = 1e-3
SVM_REF_TOL = 1e-6
SVM_CAP = 2048


def svm_target(primal_ref: float, rel_gap: float, delta: float = SVM_DELTA) -> dict:
    """The SVM's target from the reference fit: ``P* = primal_ref`` is within ``rel_gap`` of the
    optimum (its duality gap says so), the target is ``P* (1 + delta)``. A reference not tighter
    than a tenth of ``delta`` could move the target by more than the bench resolves: refused."""
    if not rel_gap <= delta / 10:
        raise ValueError(
            f"reference relative gap {rel_gap:.1e} is not below delta/10 = "
            f"{delta / 10:.0e}: tighten SVM_REF_TOL or raise its max_iter"
        )
    return {"optimum": primal_ref, "target": primal_ref * (1.0 + delta), "ref_rel_gap": rel_gap}


def budget_of(set_dir: str, frac: float = 0.2) -> dict:
    """``frac`` of the decoded training data: the out-of-core budget asked for. The job raises it
    to the engine's minimum when the engine refuses it (``systems._stream_source``) and reports
    the budget it used; ``used_budget`` turns that into the fraction of the data it really is."""
    from snapfit.data import Dataset
    from snapfit.stream.budget import chunk_nbytes
    from snapfit.stream.stats import DataStats

    ds = Dataset(f"{set_dir}/train.parquet")
    has_values, has_weight = DataStats.read(ds, sample=False).flags
    data = sum(chunk_nbytes(r.n_rows, r.nnz, has_values, has_weight) for r in ds.chunks)
    return {"asked": int(frac * data), "asked_frac": frac, "data_bytes": data}


def used_budget(budget: dict, result: dict) -> dict:
    """``budget`` completed with what the out-of-core job used (``budget_used``), if it ran."""
    used = result.get("budget_used")
    if used is None:
        return budget
    return {**budget, "budget": used, "frac": used / budget["data_bytes"],
            "raised_to_minimum": used > budget["asked"]}  # fmt: skip


def marginal_epoch_s(points) -> float | None:
    """Least-squares slope of fit seconds over ``max_iter``: seconds per extra iteration."""
    if len(points) < 2:
        return None
    k = np.array([p[0] for p in points], float)
    t = np.array([p[1] for p in points], float)
    return float(np.polyfit(k, t, 1)[0])


def time_to_target(set_dir: str, *, C: float = 0.1, repeats: int = 3, delta: float | None = None,
                   systems=CURVE + SWEEP, budget_s=None, log=print,
                   intercept: bool = True, model: str = "logistic") -> dict:  # fmt: skip
    """All systems against one target on ``set_dir``. ``budget_s`` maps a searched system to the
    seconds of fits its whole measurement may take (see ``systems.sweep``). ``intercept=False``:
    every system fits ``w`` alone (no constant feature). ``model="svm"``: the hinge-loss SVM to
    a relative primal excess ``delta`` (default ``SVM_DELTA``); logistic regression's target is
    the test log loss plus ``delta`` (default 1e-4)."""
    meta = meta_of(set_dir)
    svm = model == "svm"
    if delta is None:
        delta = SVM_DELTA if svm else 1e-4
    ref_tol = SVM_REF_TOL if svm else 1e-8
    log(f"time to target on {meta['name']}: reference fit (snapfit-1, tol={ref_tol:g})")
    # The SVM's reference runs thousands of epochs: no copy of w per epoch ("converge").
    ref = run_job(dict(system="snapfit-1", set=set_dir, C=C, mode="converge" if svm else "curve",
                       n_jobs=1, tol=ref_tol, max_iter=20000 if svm else 3000, repeats=1,
                       intercept=intercept, model=model))  # fmt: skip
    if "error" in ref:
        raise RuntimeError(f"reference fit failed: {ref['error']}")
    if svm:
        goal = svm_target(ref["primal"], ref["rel_gap"], delta)
    else:
        goal = {"optimum": ref["test_logloss"], "target": ref["test_logloss"] + delta}
    optimum, target = goal["optimum"], goal["target"]
    out = {"set": meta, "C": C, "delta": delta, "repeats": repeats, **goal,
           "reference": _slim(ref), "systems": {},
           "intercept": intercept, "model": model}  # fmt: skip
    out["budget"] = budget_of(set_dir)

    def spec_of(name):
        n_jobs = 1 if name in ("snapfit-1", "snapml-1", "liblinear") else 2
        spec = dict(system=name, set=set_dir, C=C, n_jobs=n_jobs, repeats=repeats, target=target,
                    intercept=intercept, model=model)  # fmt: skip
        if name in CURVE:
            tol, cap = (ref_tol / 10, SVM_CAP) if svm else (1e-6, 500)
            spec.update(mode="curve", tol=tol, max_iter=cap, budget=out["budget"]["asked"])
        else:
            cap = SVM_CAP if svm else 256 if name != "liblinear" else 64
            spec.update(mode="sweep", optimum=optimum, max_iter_cap=cap)
            if budget_s and name in budget_s:
                spec["budget_s"] = budget_s[name]
        return spec

    # snapfit's fits are interleaved: round r runs fit r of every snapfit system (one job each),
    # so a slow spell of this shared machine lands on every system alike, not on one system's
    # block of fits.
    # With one thread and two threads compared, each round also measures the machine's own
    # two-core scaling (``bench.cores``): what its cores give threads that share nothing.
    curve = [name for name in systems if name in CURVE]
    parts: dict[str, list] = {name: [] for name in curve}
    cores: list[float] | None = [] if "snapfit-1" in curve and len(curve) > 1 else None
    for r in range(repeats):
        for name in curve:
            log(f"  {name} fit {r + 1} of {repeats} ...")
            parts[name].append(run_job({**spec_of(name), "repeats": 1, "first_seed_run": r}))
        if cores is not None:
            cores += probe()
    if cores is not None:
        out["cores"] = summary(cores)
    for name in systems:
        if name in CURVE:
            r = merge_fits(parts[name])
        else:
            log(f"  {name} ...")
            r = run_job(spec_of(name))
        if name == "snapfit-ooc":
            out["budget"] = used_budget(out["budget"], r)
        out["systems"][name] = _slim(r)
        log(f"  {name}: {_line(r)}  [{r['wall_s']:.0f} s]")
    out["ratios"] = ratios(out["systems"], meta["nnz"])
    if svm:
        out["ratios"].update(over_snapml(out["systems"]))
    if out.get("cores", {}).get("median"):
        out["ratios"]["machine_two_core_scaling"] = out["cores"]["median"]
    if not svm:
        out["best_path_logloss"] = min(ref.get("curve_logloss") or [optimum])
    return out


def _slim(r: dict) -> dict:
    return {k: v for k, v in r.items() if k not in ("history", "epoch_times_all")}


def _line(r: dict) -> str:
    if "error" in r:
        return f"error: {r['error']}"
    if r.get("not_reached"):
        return r["not_reached"]
    t = r.get("tt_target_s", r.get("fit_s"))
    k = r.get("k_star")
    return f"time to target {t if t is None else round(t, 2)} s at {k} iterations"


def ratios(res: dict, nnz: int) -> dict:
    """snapfit's best time over snap ML's best and liblinear's; epoch rates in nnz/s (snap ML's
    both as ``nnz * k / fit time`` and from the slope of fit time over ``max_iter``)."""

    def tt(name):
        r = res.get(name, {})
        return r.get("tt_target_s") or (r.get("fit_s") if r.get("k_star") else None)

    snap = [t for t in (tt("snapfit-1"), tt("snapfit-2"), tt("snapfit-2s")) if t]
    ml = [t for t in (tt("snapml-1"), tt("snapml-2")) if t]
    out = {}
    if snap and ml:
        out["snapfit_best_over_snapml_best"] = min(snap) / min(ml)
    two = [t for t in (tt("snapfit-2"), tt("snapfit-2s")) if t]
    if two and tt("snapfit-1"):
        out["snapfit1_over_snapfit2_best"] = tt("snapfit-1") / min(two)  # the 2-thread speed-up
        # ... and the share of it an epoch's speed gives (the rest: epochs, set-up)
        best = min(("snapfit-2", "snapfit-2s"), key=lambda n: tt(n) or float("inf"))
        e1, e2 = res["snapfit-1"].get("epoch_s"), res[best].get("epoch_s")
        if e1 and e2:
            out["snapfit1_over_snapfit2_best_per_epoch"] = e1 / e2
    if snap and tt("liblinear"):
        out["snapfit_best_over_liblinear"] = min(snap) / tt("liblinear")
    s1, m1 = res.get("snapfit-1", {}), res.get("snapml-1", {})
    if s1.get("nnz_per_s") and m1.get("nnz_per_s"):
        out["snapfit1_nnz_per_s"] = s1["nnz_per_s"]
        out["snapml1_nnz_per_s"] = m1["nnz_per_s"]
        out["snapfit1_over_snapml1_rate"] = s1["nnz_per_s"] / m1["nnz_per_s"]
        slope = marginal_epoch_s(m1.get("points", []))
        if slope and slope > 0:
            out["snapml1_nnz_per_s_marginal"] = nnz / slope
            out["snapfit1_over_snapml1_marginal_rate"] = s1["nnz_per_s"] * slope / nnz
    return out


def over_snapml(res: dict) -> dict:
    """Each system's time to target over snap ML's best in the same run (``<name>_over_snapml``)."""
    times = {n: r.get("tt_target_s") or (r.get("fit_s") if r.get("k_star") else None)
             for n, r in res.items()}  # fmt: skip
    ml = [t for n, t in times.items() if n.startswith("snapml") and t]
    if not ml:
        return {}
    return {f"{n}_over_snapml_best": t / min(ml) for n, t in times.items() if t}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--C", type=float, default=0.1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None, help="write the results here")
    a = ap.parse_args(argv)
    res = time_to_target(make_set("criteo-like", a.rows), C=a.C, repeats=a.repeats)
    text = json.dumps(res, indent=1)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text)
    print(json.dumps(res["ratios"], indent=1))


if __name__ == "__main__":
    main()
