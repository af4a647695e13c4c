import json

import numpy as np
import pytest

from snapfit import LogisticRegression
from snapfit.errors import DataError
from snapfit.report import load_history, plot_history


def _history(n=8, test=True):
    rows = []
    for k in range(n):
        gap = 10.0 ** -(k / 2)
        row = {"epoch": k + 1, "primal": 100 + 50 * gap, "dual": 100 - 50 * gap,
               "rel_gap": gap, "exact": k == n - 1, "seconds": 0.1}  # fmt: skip
        if test:
            row["test_logloss"] = 0.5 + 0.1 * gap
        rows.append(row)
    return rows


@pytest.mark.parametrize("test", [True, False])
def test_plot_history_png(tmp_path, test):
    out = tmp_path / "c.png"
    plot_history(_history(test=test), out, tol=1e-3, title="t")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and 5_000 < len(data) < 150_000


def test_plot_history_svg_and_empty(tmp_path):
    plot_history(_history(), tmp_path / "c.svg", fmt="svg")
    assert (tmp_path / "c.svg").read_text().lstrip().startswith("<?xml")
    with pytest.raises(DataError, match="empty"):
        plot_history([], tmp_path / "e.png")


def test_load_history_from_json_and_model(tmp_path):
    doc = {"history": _history(), "params": {"tol": 1e-3}}
    (tmp_path / "t.json").write_text(json.dumps(doc))
    history, facts = load_history(tmp_path / "t.json")
    assert history == doc["history"] and facts["tol"] == 1e-3
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = (X[:, 0] > 0).astype(int)
    model = LogisticRegression(max_iter=5, tol=1e-2).fit(X, y)
    model.save(tmp_path / "m.npz")
    history, facts = load_history(tmp_path / "m.npz")
    assert len(history) == model.n_iter_[0] and facts["tol"] == 1e-2


def test_load_history_rejects_other_files(tmp_path):
    (tmp_path / "x.json").write_text("[1, 2]")
    with pytest.raises(DataError, match="'history'"):
        load_history(tmp_path / "x.json")
    (tmp_path / "x.bin").write_bytes(b"\xff\x00\x01")
    with pytest.raises(DataError, match="neither a snapfit model"):
        load_history(tmp_path / "x.bin")


# ``python -m bench``'s pure pieces: the max_iter search and RESULTS.md from a results dict.


def _curve(k, optimum=0.3, rate=0.2):
    return optimum + 0.2 * np.exp(-rate * k)  # geometric convergence of the test log loss


@pytest.mark.parametrize("k_star_rate", [0.05, 0.2, 0.7])
def test_next_probe_finds_smallest_max_iter(k_star_rate):
    from bench.systems import next_probe

    optimum, target = 0.3, 0.3 + 1e-4
    truth = next(k for k in range(1, 1000) if _curve(k, optimum, k_star_rate) <= target)
    points, k = {}, 1
    while k is not None:
        assert k not in points
        points[k] = (float(k), _curve(k, optimum, k_star_rate))
        k = next_probe(points, target, optimum, cap=512)
    hits = [kk for kk, (_, ll) in points.items() if ll <= target]
    assert min(hits) == truth and truth - 1 in points
    assert len(points) <= 2 * np.log2(truth) + 4  # doubling + interpolation/bisection


def test_next_probe_stops_at_cap_and_predict_s():
    from bench.systems import next_probe, predict_s

    points = {k: (float(k), 0.5) for k in (1, 2, 4, 8)}
    assert next_probe(points, 0.3, 0.29, cap=8) is None
    assert next_probe(points, 0.3, 0.29, cap=12) == 12
    quad = {k: (k**2 / 10, 0.5) for k in (4, 8)}
    assert predict_s(quad, 16) == pytest.approx(25.6)  # t ~ k^2 extrapolated
    assert predict_s({4: (1.0, 0.5)}, 8) == pytest.approx(2.0)  # one point: linear


def _bench_results():
    meta = {"name": "s-1000", "rows": 1000, "test_rows": 200, "n_features": 50, "nnz": 9000}
    budget = {"asked": 2_000, "asked_frac": 0.2, "data_bytes": 10_000, "budget": 30_000,
              "frac": 3.0, "raised_to_minimum": True}  # fmt: skip

    def fit(primal, **kw):
        return {"primal": primal, "n_iter": 7, "fit_s": 0.5, "epoch_s": 0.07, "nnz_per_s": 1e6,
                "peak_rss_mb": 300.0, "data_rss_mb": 50.0, "rss_method": "VmHWM",
                "test_logloss": 0.4, "wall_s": 3.0, "cpu_s": 2.5, "spec": {"tol": 1e-4},
                "source": "StreamSource", **kw}  # fmt: skip

    from bench.report import LABELS

    agree = {"set": meta, "budget": budget, "rtol": 1e-5, "one_process_cpu_s": 9.0,
             "systems": {n: fit(10.0) for n in LABELS}}  # fmt: skip
    agree["systems"]["vw"] = fit(10.001)
    for r in agree["systems"].values():
        r["primal_rel_excess"] = (r["primal"] - 10.0) / 10.0
    missed = {"points": [[1, 5.0, 0.6]], "k_star": None, "search_s": 5.0, "wall_s": 7.0,
              "cpu_s": 6.0, "not_reached": "not reached within a 6 s search budget"}  # fmt: skip
    curve = {"curve_logloss": [0.5, 0.41, 0.4002, 0.4], "epoch_times": [0.1, 0.2, 0.3, 0.4],
             "k_star": 3, "tt_target_all": [0.3, 0.31, 0.29], "tt_target_s": 0.3}  # fmt: skip
    target = {"set": meta, "C": 0.1, "delta": 1e-3, "repeats": 3, "optimum": 0.4,
              "target": 0.401, "best_path_logloss": 0.4, "budget": budget,
              "reference": {"n_iter": 9, "wall_s": 4.0, "cpu_s": 3.0}, "ratios": {"r": 0.5},
              "systems": {"snapfit-1": fit(1.0, **curve),
                          "snapfit-2": fit(1.0, **curve, stopped_logloss_all=[0.4005, 0.4012],
                                           k_star_all=[3, 2, 4]),
                          "snapml-1": {"points": [[1, 0.1, 0.6], [2, 0.2, 0.4005]],
                                       "k_star": 2, "fit_s": 0.2, "fit_s_all": [0.2] * 3,
                                       "search_s": 0.3, "epoch_s": 0.1, "nnz_per_s": 1e6,
                                       "wall_s": 2.0, "cpu_s": 1.5},
                          "liblinear": missed}}  # fmt: skip
    table = {"set": meta, "budget": budget,
             "systems": {n: fit(1.0, primal_rel_excess=0.0) for n in LABELS}}  # fmt: skip
    table["systems"]["saga"] = {"error": "boom", "wall_s": 1.0}
    return {"mode": "quick", "C": 0.1, "command": "python -m bench --quick", "total_s": 400.0,
            "loadavg_start": [0.2], "loadavg_end": [0.3], "agree": agree, "table": [table],
            "target": [target, dict(target, set=dict(meta, name="c40-1000", kind="criteo-40"))],
            "machine": {k: "x" for k in ("cpu", "cores", "ram_gb",
            "platform", "python", "numpy", "scipy", "scikit-learn", "snapml", "vowpalwabbit",
            "numba", "pyarrow", "snapfit")},
            "timings": {"data_s": 5.0, "agree_s": 20.0, "table_s": {"s-1000": 100.0},
                        "target_s": 200.0}}  # fmt: skip


def test_bench_report_checks_agreement_and_shows_time(tmp_path):
    from bench.report import write_report

    write_report(_bench_results(), str(tmp_path))
    md = (tmp_path / "RESULTS.md").read_text()
    from bench.report import LABELS

    n = len(LABELS)  # every system once; vw misses the objective, saga's table job failed
    assert f"**{n - 1} of {n} systems pass**" in md and "| 1.0e-04 | **FAIL** |" in md
    assert md.count("| PASS |") == n - 1
    assert "**not reached within a 6 s search budget**" in md
    assert "raised to that" in md and "300% of the decoded data" in md
    assert "## Where the time went" in md
    assert f"| systems table, s-1000 | 100 | {2.5 * (n - 1):.0f} |" in md
    assert "error: boom" in md
    assert "### s-1000" in md and "### c40-1000" in md  # one time-to-target block per shape
    assert "deterministic) 0.400500, 0.401200 (**not all below the target**)" in md
    assert "| 3 (3, 2, 4) |" in md  # each run's epochs when the runs took their own paths
    for png in ("time_to_target_s-1000.png", "time_to_target_criteo-40.png", "pass_rates.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("budget", [None, 30.0])
def test_sweep_reuses_the_hit_and_keeps_its_budget(monkeypatch, budget):
    import bench.systems as S

    fits = []

    def fake_fit(spec, X, y):  # liblinear-like: fits grow as max_iter^2
        k = spec["max_iter"]
        fits.append(k)
        return {"fit_s": k * k / 50, "_w": k, "_b": 0.0, "epoch_s": k / 50, "nnz_per_s": 1.0}

    monkeypatch.setattr(S, "fit_once", fake_fit)
    monkeypatch.setattr(S, "logloss", lambda X, y, w, b: _curve(w))
    spec = {"target": 0.3 + 1e-4, "optimum": 0.3, "repeats": 3, "max_iter_cap": 256}
    if budget:
        spec["budget_s"] = budget
    out = S.sweep(spec, None, None, None, None)
    if budget is None:
        k = out["k_star"]
        assert _curve(k) <= spec["target"] < _curve(k - 1)
        assert fits.count(k) == 3 and out["fit_s_all"] == [k * k / 50] * 3
    else:
        assert out["k_star"] is None and "not reached within a budget of 30 s" in out["not_reached"]
        assert sum(k * k / 50 for k in fits) <= budget


@pytest.mark.parametrize("system", ["snapfit-1", "snapfit-2s"])
def test_runs_on_their_own_paths_each_stop_at_their_own_epoch_on_target(monkeypatch, system):
    """Every snapfit fit to a target judges its own epochs, fit r from random_state=r's seed."""
    import bench.sets
    import bench.systems as S

    paths = iter([(4, [1.0, 2.0, 3.0, 4.0]), (2, [1.5, 3.0]), (3, [1.2, 2.4, 3.6])])
    seen = []

    def fake_fit(spec, X, y):
        seen.append(dict(spec))
        assert S._STOP_JUDGE is not None  # what the callback judges each epoch by
        k, times = next(paths)
        return {"k_star": k, "epoch_times": times, "fit_s": times[-1], "epoch_s": 1.0,
                "nnz_per_s": 1.0, "_w": np.zeros(2), "_b": float(k)}  # fmt: skip

    monkeypatch.setattr(S, "fit_once", fake_fit)
    monkeypatch.setattr(bench.sets, "load_xy", lambda path: (None, None))
    monkeypatch.setattr(S, "logloss", lambda X, y, w, b: 0.3 + b / 1000)
    monkeypatch.setattr(S, "primal", lambda X, y, w, b, C, loss="logistic": 1.0)
    monkeypatch.setattr(S, "peak_rss_mb", lambda: 1.0)
    spec = {"system": system, "set": "s", "C": 0.1, "target": 0.31, "repeats": 3,
            "mode": "curve"}  # fmt: skip
    out = S.run(spec)
    assert all(s["stop_at_target"] and s["mode"] == "converge" for s in seen)
    assert [s["seed_run"] for s in seen] == [0, 1, 2]
    assert len({S._seed(r) for r in range(3)}) == 3
    assert out["k_star_all"] == [4, 2, 3] and out["k_star"] == 3
    assert out["tt_target_all"] == [4.0, 3.0, 3.6] and out["tt_target_s"] == 3.6
    assert out["stopped_logloss_all"] == [0.304, 0.302, 0.303] and S._STOP_JUDGE is None


def test_snapfit_fits_to_the_target_are_interleaved_and_merged(monkeypatch):
    """Round r runs fit r of every snapfit system (its own job, seed of random_state=r); each
    system's entry joins its fits and takes the medians again."""
    import bench.bench_solver as B

    calls = []

    def fake_job(spec):
        calls.append((spec["system"], spec.get("first_seed_run")))
        if spec.get("tol") == 1e-8:  # the reference fit
            return {"test_logloss": 0.3, "curve_logloss": [0.4, 0.3], "wall_s": 1.0}
        r = spec["first_seed_run"]
        k = {"snapfit-1": 10 + r, "snapfit-2s": 5 - r}[spec["system"]]
        return {"k_star": k, "k_star_all": [k], "tt_target_all": [float(k)],
                "tt_target_s": float(k), "fit_s_all": [k + 0.5], "fit_s": k + 0.5,
                "epoch_s_all": [1.0 + r], "epoch_s": 1.0 + r, "nnz_per_s_all": [2.0],
                "nnz_per_s": 2.0, "stopped_logloss_all": [0.3 - r / 1e4],
                "peak_rss_mb": 100.0 + r, "wall_s": 3.0, "cpu_s": 2.0}  # fmt: skip

    monkeypatch.setattr(B, "run_job", fake_job)
    monkeypatch.setattr(B, "meta_of", lambda path: {"name": "s", "nnz": 10})
    monkeypatch.setattr(B, "budget_of", lambda path: {"asked": 1})
    out = B.time_to_target("s", systems=("snapfit-1", "snapfit-2s"), log=lambda *a: None)
    assert calls == [("snapfit-1", None), ("snapfit-1", 0), ("snapfit-2s", 0),
                     ("snapfit-1", 1), ("snapfit-2s", 1), ("snapfit-1", 2),
                     ("snapfit-2s", 2)]  # fmt: skip
    one, two = out["systems"]["snapfit-1"], out["systems"]["snapfit-2s"]
    assert one["k_star_all"] == [10, 11, 12] and one["k_star"] == 11
    assert one["tt_target_all"] == [10.0, 11.0, 12.0] and one["tt_target_s"] == 11.0
    assert two["k_star_all"] == [5, 4, 3] and two["tt_target_s"] == 4.0
    assert one["epoch_s_all"] == [1.0, 2.0, 3.0] and one["epoch_s"] == 2.0
    assert one["peak_rss_mb"] == 102.0 and one["wall_s"] == 9.0
    assert one["stopped_logloss_all"] == [0.3, 0.3 - 1e-4, 0.3 - 2e-4]
    assert out["ratios"]["snapfit1_over_snapfit2_best"] == 11.0 / 4.0


def test_a_missed_or_failed_fit_is_what_the_merged_entry_says():
    from bench.systems import merge_fits

    hit = {"k_star_all": [3], "tt_target_all": [3.0], "stopped_logloss_all": [0.3],
           "fit_s_all": [1.0], "epoch_s_all": [1.0], "nnz_per_s_all": [1.0],
           "peak_rss_mb": 1.0, "k_star": 3, "tt_target_s": 3.0}  # fmt: skip
    miss = {**hit, "k_star_all": [None], "k_star": None, "not_reached": "1 of 1 runs missed"}
    del miss["tt_target_all"], miss["tt_target_s"]
    merged = merge_fits([hit, miss, hit])
    assert merged["k_star"] is None and merged["not_reached"] == "1 of 3 runs missed the target"
    assert "tt_target_s" not in merged
    assert merge_fits([hit, {"error": "boom"}]) == {"error": "boom"}


# ``python -m bench --model svm``: the hinge-loss SVM's pieces.


@pytest.fixture(scope="module")
def small_criteo():
    import scipy.sparse as sp

    from snapfit.datasets.criteo_like import make_criteo_like

    X, y = make_criteo_like(3000, seed=3, hash_bits=12)
    X = sp.csr_matrix(X, dtype=np.float32)
    X.indices, X.indptr = X.indices.astype(np.int32), X.indptr.astype(np.int32)  # as bench.sets
    return X, y


@pytest.mark.parametrize("intercept", [True, False])
def test_svm_systems_minimize_the_bench_primal_with_regularizer_one_over_C(small_criteo, intercept):
    """snapfit, snap ML (``regularizer=1/C``) and liblinear fitted tightly reach one optimum of
    the bench's hinge primal; snapfit's own primal is that formula (the intercept regularized).
    Snap ML is not a dependency: where it is not installed (CI) snapfit meets liblinear."""
    import importlib.util

    import bench.systems as S

    X, y = small_criteo
    base = {"model": "svm", "C": 0.1, "mode": "converge", "n_jobs": 1, "intercept": intercept,
            "set": "unused"}  # fmt: skip
    tight = {"snapfit-1": {"tol": 1e-9, "max_iter": 20000},
             "snapml-1": {"tol": 1e-12, "max_iter": 20000},
             "liblinear": {"tol": 1e-10, "max_iter": 200000}}  # fmt: skip
    if importlib.util.find_spec("snapml") is None:
        del tight["snapml-1"]
    P = {}
    for name, kw in tight.items():
        r = S.fit_once({**base, "system": name, **kw}, X, y)
        P[name] = S.primal(X, y, r["_w"], r["_b"], 0.1, "hinge")
        if name == "snapfit-1":
            assert r["primal_reported"] == pytest.approx(P[name], rel=1e-9)
            assert intercept or r["_b"] == 0.0
    best = min(P.values())
    assert all(p <= best * (1 + 1e-6) for p in P.values()), P
    assert S.primal(X, y, np.zeros(X.shape[1]), 0.0, 0.1, "hinge") == pytest.approx(0.1 * len(y))


def test_svm_target_is_relative_to_a_certified_optimum():
    from bench.bench_solver import svm_target

    goal = svm_target(200.0, 1e-6, delta=1e-3)
    assert goal["optimum"] == 200.0 and goal["target"] == pytest.approx(200.2)
    with pytest.raises(ValueError, match="not below delta/10"):
        svm_target(200.0, 5e-4, delta=1e-3)  # a loose reference could move the target


def test_svm_sweep_judges_the_training_primal(monkeypatch):
    """The searched SVMs are judged by the hinge primal on the training rows, not a test loss."""
    import bench.systems as S

    def fake_fit(spec, X, y):
        k = spec["max_iter"]
        return {"fit_s": k / 10, "_w": k, "_b": 0.0, "epoch_s": 0.1, "nnz_per_s": 1.0}

    def fake_primal(X, y, w, b, C, loss="logistic"):
        assert (X, y, C, loss) == ("Xtrain", "ytrain", 0.1, "hinge")
        return 100.0 * (1 + np.exp(-0.05 * w))

    monkeypatch.setattr(S, "fit_once", fake_fit)
    monkeypatch.setattr(S, "primal", fake_primal)
    monkeypatch.setattr(S, "logloss", lambda *a: pytest.fail("the SVM has no test log loss"))
    spec = {"model": "svm", "C": 0.1, "target": 100.1, "optimum": 100.0, "repeats": 3,
            "max_iter_cap": 2048}  # fmt: skip
    out = S.sweep(spec, "Xtrain", "ytrain", "Xtest", "ytest")
    k = out["k_star"]
    assert fake_primal("Xtrain", "ytrain", k, 0, 0.1, "hinge") <= 100.1
    assert fake_primal("Xtrain", "ytrain", k - 1, 0, 0.1, "hinge") > 100.1
    assert out["primal"] <= 100.1 and "best_primal" in out and "test_logloss" not in out


def test_over_snapml_ratios_and_svm_systems_on_the_command_line():
    from bench.bench_solver import over_snapml
    from bench.run import main

    res = {"snapfit-1": {"tt_target_s": 2.0, "k_star": 5},
           "snapml-1": {"fit_s": 4.0, "k_star": 9}, "snapml-2": {"fit_s": 5.0, "k_star": 9},
           "liblinear": {"k_star": None, "not_reached": "budget"}}  # fmt: skip
    assert over_snapml(res) == {"snapfit-1_over_snapml_best": 0.5,
                                "snapml-1_over_snapml_best": 1.0,
                                "snapml-2_over_snapml_best": 1.25}  # fmt: skip
    assert over_snapml({"snapfit-1": {"tt_target_s": 2.0}}) == {}
    with pytest.raises(SystemExit):
        main(["--model", "svm"])  # the time to target only: --skip agree table
    with pytest.raises(SystemExit):
        main(["--model", "svm", "--skip", "agree", "table", "--systems", "saga", "--dry-run"])


def test_bench_report_of_the_svm(tmp_path):
    from bench.report import write_report

    res = _bench_results()
    del res["agree"], res["table"]
    t = res["target"][0]
    t.update(model="svm", optimum=100.0, target=100.1, ref_rel_gap=1e-7)
    del t["best_path_logloss"]
    t["systems"]["snapfit-2"]["stopped_primal_all"] = t["systems"]["snapfit-2"].pop(
        "stopped_logloss_all"
    )
    t["systems"]["snapfit-2"]["stopped_primal_all"] = [100.05, 100.09]
    res["target"] = [t]
    res["timings"] = {"data_s": 1.0, "target_s": 10.0}
    write_report(res, str(tmp_path))
    md = (tmp_path / "RESULTS.md").read_text()
    assert "Hinge-loss linear SVM, C=0.1" in md and "= optimum × (1 + 0.001)" in md
    assert "Primal of the models returned" in md and "(all at or below the target)" in md
    assert "liblinear's solver 3" in md
    assert (tmp_path / "time_to_target_s-1000.png").read_bytes()[:4] == b"\x89PNG"
