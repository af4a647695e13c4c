"""Every benchmarked system behind one call, run in its own process for a clean peak RSS.

``python -m bench.systems SPEC_JSON`` runs one job and prints one JSON line; ``run_job`` in the
parent starts that process and reads the line. A job names a system, a data set directory,
``C`` and a mode:

* ``converge``: one fit with the system's own stopping rule (``tol``, ``max_iter``);
* ``curve``: snapfit only; the engine's epoch callback copies ``w`` after every epoch and the
  test log loss of each copy is computed after the fit, so evaluation costs no fit time;
* ``fixed``: one fit with ``max_iter`` (``passes`` for VW) and ``tol=0``, for the sweeps.

All systems minimise snapfit's objective ``1/2 ||w||^2 + 1/2 b^2 + C sum_i log(1+exp(-y_i
(w.x_i + b)))`` (the intercept a regularized constant feature, as in liblinear): snapfit,
snap ML (``regularizer=1/C``, ``fit_intercept=True`` appends a constant feature) and liblinear
natively; lbfgs and saga (which leave the intercept unpenalized) get a column of ones and
``fit_intercept=False``; VW gets a constant feature, ``--noconstant`` and ``--bfgs --l2 1/C``.
A spec with ``intercept=False`` fits ``w`` alone in every system (``b = 0``); VW, whose files
carry the constant feature, is not run then. A spec with ``model="svm"`` fits the hinge-loss
linear SVM instead (snapfit's ``loss="hinge"``, snap ML's ``SupportVectorMachine``, liblinear's
``LinearSVC(dual=True)``; same ``C`` mapping) and is judged by its training primal
(``judge_of``). ``primal`` is recomputed here with one formula for all of them.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import time
import warnings

import numpy as np
import scipy.sparse as sp

SYSTEMS = (
    "snapfit-1", "snapfit-2", "snapfit-2s", "snapfit-ooc", "snapml-1", "snapml-2",
    "liblinear", "saga", "lbfgs", "vw",
)  # fmt: skip


def peak_rss_mb() -> float:
    """This process's peak RSS: ``VmHWM``, which starts afresh at exec (``ru_maxrss`` does not:
    it keeps the forking parent's peak, which made every system read the same)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM")) / 1024.0
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def margins(X, y01, w: np.ndarray, b: float) -> np.ndarray:
    return np.where(y01 > 0, 1.0, -1.0) * (X @ w + b)


def primal(X, y01, w, b, C: float, loss: str = "logistic") -> float:
    """``1/2 (||w||^2 + b^2) + C sum_i loss(y_i (w.x_i + b))``: logistic, or ``"hinge"``."""
    m = margins(X, y01, w, b)
    terms = np.maximum(0.0, 1.0 - m) if loss == "hinge" else np.logaddexp(0.0, -m)
    return float(0.5 * (w @ w + b * b) + C * terms.sum())


def is_svm(spec) -> bool:
    return spec.get("model", "logistic") == "svm"


def loss_of(spec) -> str:
    return "hinge" if is_svm(spec) else "logistic"


def metric_of(spec) -> str:
    """What a fit to a target is judged by, as it appears in result keys (``curve_<metric>``,
    ``stopped_<metric>_all``): the test log loss, or the SVM's training primal."""
    return "primal" if is_svm(spec) else "logloss"


def judge_of(spec, X, y, Xte, yte):
    """``(w, b) -> value`` that a fit to a target must bring to ``spec["target"]`` or below:
    logistic regression's test log loss (the model's use), the SVM's training primal (hinge has
    no likelihood to hold out; the primal is what all three SVMs minimize)."""
    if is_svm(spec):
        return lambda w, b: primal(X, y, w, b, spec["C"], "hinge")
    return lambda w, b: logloss(Xte, yte, w, b)


def logloss(X, y01, w, b) -> float:
    return float(np.logaddexp(0.0, -margins(X, y01, w, b)).mean())


def _seed(run: int = 0) -> int:
    """The solver seed the estimator derives from ``random_state=run`` (run 0: the reference
    fit's)."""
    from sklearn.utils import check_random_state

    return int(check_random_state(run).randint(np.iinfo(np.int32).max))


def _warm_numba() -> None:
    """Compile snapfit's kernels before timing (the on-disk numba cache makes this short)."""
    import snapfit

    X = sp.random(200, 50, density=0.1, format="csr", random_state=0, dtype=np.float32)
    snapfit.LogisticRegression(max_iter=2, n_jobs=2).fit(X, np.arange(200) % 2)


# The out-of-core budget each set ended up with, found once per job (see ``_stream_source``).
_BUDGET_USED: dict[str, int] = {}
# What a run that stops at its own first epoch on target is judged by (``judge_of``).
_STOP_JUDGE = None


def _stream_source(spec):
    """The streaming engine on the set's Parquet file, always (the estimator would keep sets
    this small resident). Asked for 20 % of the data, the engine may refuse: its minimum is the
    ``w`` views plus two read buffers, which small sets with 2^20 features do not reach; the
    budget is then raised to the minimum the engine names, reported as ``budget_used`` (a refused
    budget fails while planning, before any data is read, so the retries cost no real time)."""
    from snapfit.data import Dataset
    from snapfit.errors import ResourceError
    from snapfit.train import stream_dataset

    ds = Dataset(os.path.join(spec["set"], "train.parquet"))
    budget = _BUDGET_USED.get(spec["set"], int(spec["budget"]))
    for _ in range(8):
        try:
            src = stream_dataset(ds, budget, n_units=spec["n_jobs"])
            _BUDGET_USED[spec["set"]] = budget
            return src
        except ResourceError as e:
            m = re.search(r"minimum here is (\d+) MB", str(e))
            budget = max(int(1.02 * int(m.group(1)) * 10**6) if m else 0, int(budget * 1.5))
    raise ResourceError(f"no working out-of-core budget up to {budget / 1e6:.0f} MB")


def _snapfit_source(spec, X, y):
    from bench.sets import memory_source

    if spec["system"] == "snapfit-ooc":
        return _stream_source(spec)
    return memory_source(X, y)


def run_snapfit(spec, X, y) -> dict:
    """The estimator's path (``snapfit.train.train``) with an epoch hook that keeps ``w``."""
    from snapfit.engine import Devices, Problem
    from snapfit.solvers.dual import LOSSES
    from snapfit.train import train

    _warm_numba()
    C, keep = spec["C"], spec["mode"] == "curve"
    snaps, times, hook = [], [], [0.0]
    t0 = time.perf_counter()
    source = _snapfit_source(spec, X, y)
    source_kind = type(source).__name__
    problem = Problem(
        n_features=source.n_features, c_pos=C, c_neg=C, bias=1.0 if _intercept(spec) else 0.0,
        tol=spec.get("tol", 1e-4),
        max_iter=spec.get("max_iter", 1000), seed=_seed(spec.get("seed_run", 0)),
        loss=LOSSES[loss_of(spec)],
    )  # fmt: skip

    curve = []
    judge = _STOP_JUDGE if spec.get("stop_at_target") else None

    def cb(rec, w):
        h0 = time.perf_counter()
        times.append(h0 - t0 - hook[0])
        if keep:
            snaps.append(w.copy())
        hit = False
        if judge is not None:  # judged in the hook, whose time the fit does not count
            curve.append(judge(w[:-1], w[-1]))
            hit = curve[-1] <= spec["target"]
        hook[0] += time.perf_counter() - h0
        return hit

    # snapfit-2s: the threads share w (deterministic=False, snapfit.engine.shared).
    devices = Devices(n_cpu=spec["n_jobs"], share_cpu=spec["system"] == "snapfit-2s")
    res = train(source, problem, devices=devices, callbacks=[cb])
    fit_s = time.perf_counter() - t0 - hook[0]
    hist = [r.as_dict() for r in res.history]
    out = _common(fit_s, res.n_iter, res.w[:-1], float(res.w[-1]))
    out.update(
        epoch_s=float(np.median([h["seconds"] for h in hist])),
        nnz_per_s=float(np.median([h["nnz_per_s"] for h in hist])),
        primal_reported=hist[-1]["primal"], rel_gap=hist[-1]["rel_gap"],
        gap_exact=hist[-1]["exact"], epoch_times=times, history=hist,
    )  # fmt: skip
    out["source"] = source_kind
    if judge is not None:
        out[f"curve_{metric_of(spec)}"] = curve
        out["k_star"] = res.n_iter if curve and curve[-1] <= spec["target"] else None
    if spec["system"] == "snapfit-ooc":
        out["budget_used"] = _BUDGET_USED[spec["set"]]
    out["_snaps"] = snaps
    return out


def _intercept(spec) -> bool:
    return bool(spec.get("intercept", True))


def _common(fit_s, n_iter, w, b) -> dict:
    return {"fit_s": fit_s, "n_iter": int(n_iter), "peak_rss_mb": peak_rss_mb(),
            "_w": np.asarray(w, dtype=np.float64).ravel(), "_b": float(b)}  # fmt: skip


def run_snapml(spec, X, y) -> dict:
    from snapml import LogisticRegression, SupportVectorMachine

    kw = dict(
        regularizer=1.0 / spec["C"], n_jobs=spec["n_jobs"], fit_intercept=_intercept(spec),
        intercept_scaling=1.0, tol=spec.get("tol", 1e-4), max_iter=spec.get("max_iter", 1000),
        random_state=0,
    )  # fmt: skip
    m = SupportVectorMachine(loss="hinge", **kw) if is_svm(spec) else LogisticRegression(
        dual=True, **kw)  # fmt: skip
    t0 = time.perf_counter()
    m.fit(X, y)
    fit_s = time.perf_counter() - t0
    n_iter = int(np.ravel(m.n_iter_)[0])
    b = float(np.ravel(m.intercept_)[0]) if _intercept(spec) else 0.0
    out = _common(fit_s, n_iter, m.coef_, b)
    out.update(epoch_s=fit_s / n_iter, nnz_per_s=X.nnz * n_iter / fit_s)
    return out


def with_ones(X):
    return sp.hstack([X, np.ones((X.shape[0], 1), X.dtype)], format="csr")


def run_sklearn(spec, X, y) -> dict:
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    solver = spec["system"]
    # lbfgs and saga do not penalize their own intercept: a column of ones instead
    aug = solver != "liblinear" and _intercept(spec)
    Xf = with_ones(X) if aug else X
    tol = spec.get("tol", 1e-4) or 1e-300  # liblinear refuses tol=0
    kw = dict(C=spec["C"], fit_intercept=_intercept(spec) and not aug, intercept_scaling=1.0,
              tol=tol, max_iter=spec.get("max_iter", 1000), random_state=0)  # fmt: skip
    if is_svm(spec):
        if solver != "liblinear":
            raise ValueError(f"{solver} fits logistic regression only")
        m = LinearSVC(loss="hinge", dual=True, **kw)
    else:
        m = LogisticRegression(solver=solver, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        m.fit(Xf, y)
        fit_s = time.perf_counter() - t0
    coef = m.coef_.ravel()
    w, b = (coef[:-1], coef[-1]) if aug else (coef, float(np.ravel(m.intercept_)[0]))
    n_iter = int(np.ravel(m.n_iter_)[0])
    out = _common(fit_s, n_iter, w, b)
    out.update(epoch_s=fit_s / max(n_iter, 1), nnz_per_s=X.nnz * n_iter / fit_s)
    return out


def vw_files(set_dir: str, X, y) -> str:
    """``train.vw`` (VW text, features named by column, one constant feature) and its cache."""
    path = os.path.join(set_dir, "train.vw")
    if os.path.exists(path + ".cache"):
        return path
    const = X.shape[1]
    with open(path + ".tmp", "w") as f:
        for i in range(X.shape[0]):
            a, b = X.indptr[i], X.indptr[i + 1]
            feats = " ".join(
                f"{j}:{v:.7g}" for j, v in zip(X.indices[a:b], X.data[a:b], strict=True)
            )
            f.write(f"{1 if y[i] > 0 else -1} |f {feats} {const}:1\n")
    os.replace(path + ".tmp", path)
    _vw(f"-d {path} --cache_file {path}.cache --passes 1 -b {vw_bits(X)} --noconstant --quiet")
    return path


def vw_bits(X) -> int:
    """Hash bits that fit features 0..n_features (VW maps an integer feature name ``j`` to
    ``j + hash(namespace)`` modulo ``2**bits``: one-to-one, no collision, when they fit)."""
    return int(X.shape[1]).bit_length()


def _vw(args: str):
    from vowpalwabbit import Workspace

    ws = Workspace(args)
    ws.run_parser()
    return ws


def vw_weights(ws, n_features: int) -> np.ndarray:
    """Weights of features 0..n_features (the last is the constant), by VW's own hashing."""
    ns = ws.hash_space("f")
    idx = [ws.hash_feature(str(j), ns) for j in range(n_features + 1)]
    return np.array([ws.get_weight(i) for i in idx])


def run_vw(spec, X, y) -> dict:
    if not _intercept(spec):
        raise ValueError("VW runs with its constant feature only (bench without --no-intercept)")
    path = vw_files(spec["set"], X, y)
    passes = spec.get("max_iter", 50)
    args = (
        f"--cache_file {path}.cache --passes {passes} -b {vw_bits(X)} --noconstant --bfgs "
        f"--loss_function logistic --l2 {1.0 / spec['C']:.10g} --holdout_off --quiet"
    )
    if spec["mode"] == "fixed" or "termination" in spec:
        args += f" --termination {spec.get('termination', 0)}"
    t0 = time.perf_counter()
    ws = _vw(args)
    fit_s = time.perf_counter() - t0
    rss = peak_rss_mb()
    wb = vw_weights(ws, X.shape[1])
    ws.finish()
    out = _common(fit_s, passes, wb[:-1], wb[-1])
    out.update(peak_rss_mb=rss, epoch_s=fit_s / passes, nnz_per_s=X.nnz * passes / fit_s)
    return out


def fit_once(spec: dict, X, y) -> dict:
    system = spec["system"]
    if system.startswith("snapfit"):
        return run_snapfit(spec, X, y)
    if system.startswith("snapml"):
        return run_snapml(spec, X, y)
    if system == "vw":
        return run_vw(spec, X, y)
    return run_sklearn(spec, X, y)


def next_probe(points: dict, target: float, optimum: float, cap: int) -> int | None:
    """The next ``max_iter`` to try, from the probes so far (``{k: (seconds, log loss)}``), or
    None when the smallest ``k`` reaching ``target`` is known (or ``cap`` misses it).

    The test log loss excess over the optimum falls roughly geometrically in ``k``: before the
    first hit, the last two probes are extrapolated to where the excess reaches the target
    (overshooting by 15 %, at most doubling); once a miss ``lo`` and a hit ``hi`` bracket it,
    the excess is interpolated in log when both are positive (each step cutting at least an
    eighth off the bracket), else bisected. Assumes the log loss falls with ``k`` (true here
    past the first few epochs)."""
    delta = target - optimum
    hits = sorted(k for k, (_, ll) in points.items() if ll <= target)
    misses = sorted(k for k, (_, ll) in points.items() if ll > target)
    if not hits:
        k = misses[-1]
        if k >= cap:
            return None
        nxt = 2 * k
        if len(misses) >= 2:
            k0 = misses[-2]
            e0, e1 = points[k0][1] - optimum, points[k][1] - optimum
            if e0 > e1 > 0:
                rate = np.log(e0 / e1) / (k - k0)
                est = k + np.log(e1 / delta) / rate
                nxt = int(min(max(np.ceil(1.15 * est), k + 1), 2 * k))
        return min(nxt, cap)
    hi = hits[0]
    lo = max((k for k in misses if k < hi), default=0)
    if hi - lo <= 1:
        return None
    e_lo, e_hi = (points[lo][1] - optimum if lo else 0.0), points[hi][1] - optimum
    if lo == 0 or e_hi <= 0:
        return (lo + hi) // 2
    est = lo + (hi - lo) * np.log(e_lo / delta) / np.log(e_lo / e_hi)
    # Each step cuts at least an eighth off the bracket, so a poor model still converges.
    margin = (hi - lo) // 8
    return int(min(max(np.ceil(est), lo + 1 + margin), hi - 1 - margin))


def predict_s(points: dict, k: int) -> float:
    """Seconds a fit with ``max_iter=k`` should take, from the two largest probes below ``k``:
    ``t ~ k^p`` with ``p`` between 1 and 3 (liblinear's Newton steps need more CG steps as they
    converge, so its fits grow faster than linearly)."""
    below = sorted(kk for kk in points if kk < k)[-2:]
    if not below:
        return 0.0
    k2, t2 = below[-1], points[below[-1]][0]
    p = 1.0
    if len(below) == 2:
        k1, t1 = below[0], points[below[0]][0]
        if t1 > 0 and t2 > t1:
            p = float(np.clip(np.log(t2 / t1) / np.log(k2 / k1), 1.0, 3.0))
    return t2 * (k / k2) ** p


def sweep(spec: dict, X, y, Xte, yte) -> dict:
    """Smallest ``max_iter`` (tol=0) whose model reaches ``spec["target"]`` (test log loss, or the
    SVM's primal: ``judge_of``), found by ``next_probe``; every fit's (max_iter, seconds, value)
    is kept. The probe at the answer
    is one of the ``repeats`` timed fits; the others run after it.

    ``budget_s`` bounds the seconds of fits of the whole measurement: until a probe hits, a probe
    is started only if it and what a hit would still cost (a couple of bracketing probes and the
    timed fits, ``repeats + 2`` fits of its predicted length, ``predict_s``) fit in what is left.
    Otherwise the system is reported as not reaching the target within that budget."""
    points: dict[int, tuple[float, float]] = {}
    runs: dict[int, dict] = {}
    t_spent, budget_s = 0.0, spec.get("budget_s", float("inf"))
    repeats = spec.get("repeats", 3)
    judge, metric = judge_of(spec, X, y, Xte, yte), metric_of(spec)

    def fit(k: int) -> dict:
        return fit_once({**spec, "mode": "fixed", "max_iter": k, "tol": 0.0}, X, y)

    k, cap = 1, spec.get("max_iter_cap", 256)
    while k is not None:
        runs[k] = fit(k)
        points[k] = (runs[k]["fit_s"], judge(runs[k].pop("_w"), runs[k].pop("_b")))
        t_spent += runs[k]["fit_s"]
        k = next_probe(points, spec["target"], spec["optimum"], cap)
        reached = any(ll <= spec["target"] for _, ll in points.values())
        if k is not None and not reached:
            if t_spent + (repeats + 2) * predict_s(points, k) > budget_s:
                break
    hits = sorted(kk for kk, (_, ll) in points.items() if ll <= spec["target"])
    best = min(points, key=lambda kk: points[kk][1])
    out = {"points": sorted([kk, t, ll] for kk, (t, ll) in points.items()),
           "k_star": hits[0] if hits else None, "search_s": t_spent,
           f"best_{metric}": points[best][1], "best_max_iter": best}  # fmt: skip
    if not hits:
        seen = f"best {'primal' if metric == 'primal' else 'test log loss'} {points[best][1]:.6f}"
        out["not_reached"] = f"not reached by max_iter {max(points)} ({seen})"
        if k is not None:
            out["not_reached"] = (
                f"not reached within a budget of {budget_s:.0f} s of fits ({t_spent:.0f} s spent "
                f"up to max_iter {max(points)}, {seen}; the next probe, max_iter {k}, would "
                f"take ~{predict_s(points, k):.0f} s, and {repeats + 2}x that with its timed fits)"
            )
        out["peak_rss_mb"] = peak_rss_mb()
        return out
    k = hits[0]
    timed = [runs[k]] + [fit(k) for _ in range(repeats - 1)]
    out["fit_s_all"] = [r["fit_s"] for r in timed]
    out["fit_s"] = float(np.median(out["fit_s_all"]))
    out["primal" if metric == "primal" else "test_logloss"] = points[k][1]
    out["epoch_s"] = float(np.median([r["epoch_s"] for r in timed]))
    out["nnz_per_s"] = float(np.median([r["nnz_per_s"] for r in timed]))
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def run(spec: dict) -> dict:
    """One job in this process (``repeats`` fits, default 3); see the module docstring."""
    from bench.sets import load_xy

    X = y = None
    if spec["system"] != "snapfit-ooc" or spec["mode"] == "sweep":
        X, y = load_xy(os.path.join(spec["set"], "train.npz"))
    base_rss = peak_rss_mb()
    if spec["mode"] == "sweep":
        Xte, yte = load_xy(os.path.join(spec["set"], "test.npz"))
        return {**sweep(spec, X, y, Xte, yte), "data_rss_mb": base_rss, "spec": spec}
    if "target" in spec:
        runs = _own_targets(spec, X, y)
    else:
        runs = [fit_once(spec, X, y) for _ in range(spec.get("repeats", 3))]
    out = runs[0]
    out["data_rss_mb"] = base_rss
    out["rss_method"] = "VmHWM"
    for key in ("fit_s", "epoch_s", "nnz_per_s"):
        _with_median(out, key, [r[key] for r in runs])
    if "epoch_times" in out:  # snapfit: seconds since fit start at each epoch end, per run
        out["epoch_times_all"] = [r["epoch_times"] for r in runs]
        n = min(len(t) for t in out["epoch_times_all"])
        out["epoch_times_median"] = np.median([t[:n] for t in out["epoch_times_all"]], 0).tolist()
    if X is None:
        X, y = load_xy(os.path.join(spec["set"], "train.npz"))
    Xte, yte = load_xy(os.path.join(spec["set"], "test.npz"))
    w, b = out.pop("_w"), out.pop("_b")
    out["primal"] = primal(X, y, w, b, spec["C"], loss_of(spec))
    if not is_svm(spec):
        out["test_logloss"] = logloss(Xte, yte, w, b)
    snaps = out.pop("_snaps", None)
    curve = f"curve_{metric_of(spec)}"
    if snaps and curve not in out:
        judge = judge_of(spec, X, y, Xte, yte)
        out[curve] = [judge(s[:-1], s[-1]) for s in snaps]
    out["spec"] = spec
    return out


def _own_targets(spec: dict, X, y) -> list[dict]:
    """``repeats`` fits of a snapfit system, fit ``r`` from the seed of ``random_state=r``: each
    judges the test log loss after each of its epochs (outside the timed fit) and stops at its
    own first epoch on target. The first run's dict gets the median epochs and time, all runs',
    and the judged value (``judge_of``) of each model returned (``w(alpha)`` rebuilt for
    sharing threads).

    Why a seed per fit: the epochs to a target depend on the path a seed gives (on 4M
    criteo-40 rows, solver seeds 0-4: one thread 12, 15, 15, 14, 14 epochs, CoCoA+ threads
    20-21; from ``random_state=0``'s seed, which every fit used before, 13 and 23), so three
    fits from one seed measured the clock's noise only, and that seed's luck decided every ratio
    between systems. Threads sharing ``w`` take a path that also depends on their timing."""
    from bench.sets import load_xy

    global _STOP_JUDGE
    Xte, yte = load_xy(os.path.join(spec["set"], "test.npz"))
    judge = _STOP_JUDGE = judge_of(spec, X, y, Xte, yte)
    try:
        first = spec.get("first_seed_run", 0)
        runs = [fit_once({**spec, "mode": "converge", "stop_at_target": True, "seed_run": r},
                         X, y) for r in range(first, first + spec.get("repeats", 3))]  # fmt: skip
    finally:
        _STOP_JUDGE = None
    ks = [r.get("k_star") for r in runs]
    times = [r["epoch_times"][k - 1] if k else None for r, k in zip(runs, ks, strict=True)]
    _target_summary(runs[0], ks, times)
    runs[0][f"stopped_{metric_of(spec)}_all"] = [judge(r["_w"], r["_b"]) for r in runs]
    return runs


def _with_median(out: dict, key: str, values: list) -> None:
    """``out[key + "_all"]`` = the fits' values, ``out[key]`` their median."""
    out[key + "_all"] = values
    out[key] = float(np.median(values))


def _target_summary(out: dict, ks: list, times: list) -> None:
    """``out``'s time-to-target keys from each fit's epochs to the target (``None``: missed)
    and its time there: the median epochs and time, or which fits missed."""
    for key in ("not_reached", "tt_target_all", "tt_target_s"):
        out.pop(key, None)
    out["k_star_all"] = ks
    if all(ks):
        out["k_star"] = sorted(ks)[len(ks) // 2]
        out["tt_target_all"] = times
        out["tt_target_s"] = float(np.median(times))
    else:
        out["k_star"] = None
        out["not_reached"] = f"{ks.count(None)} of {len(ks)} runs missed the target"


def merge_fits(parts: list[dict]) -> dict:
    """One system's time-to-target entry from jobs of one fit each (``run`` with ``repeats=1``,
    fit ``r`` from ``first_seed_run=r``; see ``bench.bench_solver``): the first job's dict with
    every per-fit list joined and the medians taken again. The first error found is the entry."""
    for p in parts:
        if "error" in p:
            return p
    out = dict(parts[0])
    for key in ("fit_s", "epoch_s", "nnz_per_s"):
        _with_median(out, key, [v for p in parts for v in p[key + "_all"]])
    ks = [k for p in parts for k in p["k_star_all"]]
    # A part that missed has no times: one None per fit of it.
    times = [t for p in parts for t in p.get("tt_target_all", [None] * len(p["k_star_all"]))]
    _target_summary(out, ks, times)
    for key in [k for k in parts[0] if k.startswith("stopped_")]:
        out[key] = [v for p in parts for v in p[key]]
    out["peak_rss_mb"] = max(p["peak_rss_mb"] for p in parts)
    for key in ("wall_s", "cpu_s"):
        out[key] = sum(p.get(key, 0.0) for p in parts)
    return out


def run_many(specs: list) -> list:
    """``run`` for each spec in turn, in this process, each error caught as data."""
    out = []
    for spec in specs:
        t0 = time.perf_counter()
        try:
            r = run(spec)
        except Exception as e:  # noqa: BLE001 - one system's failure is a result, not a crash
            r = {"error": f"{type(e).__module__}.{type(e).__name__}: {e}", "spec": spec}
        out.append({**r, "wall_s": time.perf_counter() - t0})
    return out


def run_job(spec, timeout: float = 6 * 3600):
    """``run(spec)`` in a fresh interpreter (peak RSS per system); errors come back as data.
    ``wall_s`` is the job's wall time: start-up, loading, every fit and the evaluation;
    ``cpu_s`` its CPU time (all threads), which a shared machine inflates far less than wall
    time. A list of specs runs in one process (``run_many``; no per-system peak RSS then) and
    gives a list."""
    if isinstance(spec, list):
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        specs = [{**s, "set": os.path.relpath(s["set"], root)} for s in spec]
        r = run_job({"many": specs}, timeout)
        if "error" in r:
            return [{**r, "spec": s} for s in specs]
        return r["results"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # Relative to the checkout (the job runs there), so no machine path reaches the results.
    if "set" in spec:
        spec = {**spec, "set": os.path.relpath(spec["set"], root)}
    cmd = [sys.executable, "-m", "bench.systems", json.dumps(spec)]
    t0, cpu0 = time.perf_counter(), children_cpu_s()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=root)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f} s", "spec": spec, "wall_s": timeout}
    took = {"wall_s": time.perf_counter() - t0, "cpu_s": children_cpu_s() - cpu0}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stderr or p.stdout).strip().replace(root + os.sep, "").splitlines()[-1:]
        return {"error": " | ".join(tail) or f"exit {p.returncode}", "spec": spec, **took}
    return {**json.loads(lines[-1]), **took}


def children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


if __name__ == "__main__":
    job = json.loads(sys.argv[1])
    result = {"results": run_many(job["many"])} if "many" in job else run(job)
    print(json.dumps(result), flush=True)
