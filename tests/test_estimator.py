"""snapfit.LogisticRegression: liblinear's optimum, scikit-learn's contract, inputs and labels."""

import warnings

import numpy as np
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import compute_class_weight
from sklearn.utils.estimator_checks import parametrize_with_checks

import snapfit
from snapfit.data import write_parquet
from snapfit.datasets.criteo_like import make_criteo_like
from snapfit.solvers import cpu
from tests.helpers import liblinear, primal


def dense_set():
    X, y = make_classification(600, 20, n_informative=8, random_state=0)
    return X, y, 1.0


def onehot_set():
    rng = np.random.default_rng(0)
    n, cards = 1500, [5, 20, 100, 500]
    idx = np.stack([sum(cards[:j]) + rng.integers(0, c, n) for j, c in enumerate(cards)], 1)
    X = sp.csr_matrix(
        (np.ones(idx.size), idx.ravel(), np.arange(n + 1) * len(cards)), shape=(n, sum(cards))
    )
    y = (X @ rng.normal(size=X.shape[1]) + rng.normal(size=n) > 0).astype(int)
    return X, y, 1.0


def criteo_set():
    X, y = make_criteo_like(2000, seed=3, hash_bits=16)
    return X, y, 0.1


DATASETS = {"dense": dense_set, "onehot": onehot_set, "criteo": criteo_set}
CONFIGS = {
    "plain": {},
    "no-intercept": {"fit_intercept": False},
    "class-and-sample-weight": {"class_weight": "balanced", "sample_weight": True},
    "intercept-scaling": {"intercept_scaling": 3.0, "class_weight": {0: 2.0, 1: 0.5}},
}
_cache: dict = {}


def reference(name, config):
    """Data, C, kwargs, sample weights and liblinear's primal optimum (cached per pair)."""
    key = (name, config)
    if key not in _cache:
        X, y, C = DATASETS[name]()
        kw = dict(CONFIGS[config])
        sw = None
        if kw.pop("sample_weight", False):
            sw = np.random.default_rng(5).uniform(0.2, 3.0, X.shape[0])
        cw = _class_weight(kw.get("class_weight"), y, sw)
        bias = kw.get("intercept_scaling", 1.0) if kw.get("fit_intercept", True) else 0.0

        def objective(m):
            return primal(X, y, m.coef_, np.ravel(m.intercept_)[0], C, sample_weight=sw,
                          class_weight=cw, bias=bias)  # fmt: skip

        p = objective(liblinear(X, y, C, sample_weight=sw, **kw))
        _cache[key] = (X, y, C, kw, sw, cw, bias, p)
    return _cache[key]


def _class_weight(cw, y, sw):
    if cw is None:
        return None
    classes = np.unique(y)
    weights = compute_class_weight(cw, classes=classes, y=y, sample_weight=sw)
    return dict(zip(classes, weights, strict=True))


@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("n_jobs", [1, 2])
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("name", list(DATASETS))
def test_reaches_liblinear_optimum(name, config, n_jobs, deterministic):
    X, y, C, kw, sw, cw, bias, p_ref = reference(name, config)
    est = snapfit.LogisticRegression(C=C, tol=1e-9, max_iter=20000, n_jobs=n_jobs,
                                     deterministic=deterministic, random_state=0, **kw)  # fmt: skip
    est.fit(X, y, sample_weight=sw)
    p = primal(X, y, est.coef_, est.intercept_[0], C, sample_weight=sw, class_weight=cw, bias=bias)
    assert abs(p - p_ref) / abs(p_ref) <= 1e-6
    assert est.history_[-1]["exact"] and est.history_[-1]["rel_gap"] <= 1e-9


def test_two_threads_keep_the_dual_ascending_and_reach_the_same_optimum():
    X, y, C = criteo_set()
    fits = {k: snapfit.LogisticRegression(C=C, tol=1e-9, max_iter=5000, n_jobs=k,
                                          deterministic=True, random_state=1).fit(X, y)
            for k in (1, 2)}  # fmt: skip
    for est in fits.values():
        duals = [h["dual"] for h in est.history_]
        assert all(b >= a - 1e-9 * abs(a) for a, b in zip(duals, duals[1:], strict=False))
    p = {k: est.history_[-1]["primal"] for k, est in fits.items()}
    assert abs(p[1] - p[2]) / p[1] <= 1e-8
    np.testing.assert_allclose(fits[1].coef_, fits[2].coef_, atol=1e-4)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n_jobs=st.sampled_from([1, 2]), C=st.floats(0.01, 10))
def test_history_gap_nonnegative_dual_monotone_and_reproducible(seed, n_jobs, C):
    """deterministic=True: the same seed and n_jobs give the same model, bit for bit."""
    X, y = make_classification(200, 8, random_state=seed % 1000)
    make = lambda: snapfit.LogisticRegression(  # noqa: E731
        C=C, n_jobs=n_jobs, random_state=seed, max_iter=30, tol=1e-6, deterministic=True
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a, b = make().fit(X, y), make().fit(X, y)
    assert np.array_equal(a.coef_, b.coef_) and np.array_equal(a.intercept_, b.intercept_)
    assert all(h["gap"] >= 0 for h in a.history_)
    duals = [h["dual"] for h in a.history_]
    assert all(d2 >= d1 - 1e-9 * abs(d1) for d1, d2 in zip(duals, duals[1:], strict=False))


def test_deterministic_two_threads_on_criteo_like_rows_repeat_bit_for_bit():
    X, y, C = criteo_set()
    make = lambda: snapfit.LogisticRegression(C=C, n_jobs=2, deterministic=True,  # noqa: E731
                                              random_state=5, tol=1e-8, max_iter=500)  # fmt: skip
    a, b = make().fit(X, y), make().fit(X, y)
    assert np.array_equal(a.coef_, b.coef_) and np.array_equal(a.intercept_, b.intercept_)
    assert [h["dual"] for h in a.history_] == [h["dual"] for h in b.history_]


@pytest.mark.parametrize("n_jobs", [3, 4])
def test_more_threads_sharing_w_damp_hot_coordinates_and_reach_the_optimum(n_jobs):
    """Beyond two threads the hot coordinates get curvature (T/2 - 1) more: same optimum."""
    X, y, C, kw, sw, cw, bias, p_ref = reference("criteo", "plain")
    est = snapfit.LogisticRegression(C=C, tol=1e-9, max_iter=5000, n_jobs=n_jobs,
                                     random_state=0).fit(X, y)  # fmt: skip
    p = primal(X, y, est.coef_, est.intercept_[0], C, bias=bias)
    assert abs(p - p_ref) / abs(p_ref) <= 1e-6
    assert est.history_[-1]["exact"] and est.history_[-1]["rel_gap"] <= 1e-9


@pytest.mark.parametrize("stop", ["converged", "max_iter", "callback"])
def test_shared_threads_return_w_of_alpha(stop):
    """Threads sharing w may lose cold updates; whatever ends the fit, the model is rebuilt
    from the dual variables it returns: coef_ and intercept_ are w(alpha) to 1e-10."""
    X, y, C = criteo_set()
    kw = {"converged": {}, "max_iter": {"max_iter": 3}, "callback": {}}[stop]
    est = snapfit.LogisticRegression(C=C, n_jobs=2, deterministic=False, tol=1e-8,
                                     random_state=2, **kw)  # fmt: skip
    callbacks = [lambda rec, coef, b: rec.epoch >= 4] if stop == "callback" else []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y, callbacks=callbacks)
    alpha, c_pos, c_neg, _ = est._dual
    Xc = sp.csr_matrix(X, dtype=np.float32)
    w = np.zeros(X.shape[1] + 1)
    cpu.accumulate_w(Xc.indptr.astype(np.int64), Xc.indices, Xc.data, True,
                     np.where(y > 0, 1.0, -1.0).astype(np.float32), cpu.EMPTY_F32, False,
                     c_pos, c_neg, 1.0, alpha, w)  # fmt: skip
    np.testing.assert_allclose(est.coef_.ravel(), w[:-1], rtol=0, atol=1e-10)
    assert abs(est.intercept_[0] - w[-1]) <= 1e-10
    assert len(est.history_) == {"converged": len(est.history_), "max_iter": 3, "callback": 4}[stop]
    if stop == "converged":
        assert est.history_[-1]["exact"] and est.history_[-1]["rel_gap"] <= 1e-8


# Dual coordinate descent needs very many epochs on dense, uncentered, nearly collinear data
# such as scikit-learn's X ~ N(100, 1) with random labels (liblinear's dual solver has the same
# weakness); at max_iter=100 the fits are not converged enough for rtol=1e-7 comparisons.
# scikit-learn lists the same two checks as expected failures for its own LogisticRegression
# (and for LinearSVC/LinearSVR, its dual CD solvers), in PER_ESTIMATOR_XFAIL_CHECKS.
EXPECTED_FAILED = {
    "check_sample_weight_equivalence_on_dense_data": "dual CD converges slowly on N(100,1) data",
    "check_sample_weight_equivalence_on_sparse_data": "dual CD converges slowly on N(100,1) data",
}


@parametrize_with_checks(
    [snapfit.LogisticRegression()], expected_failed_checks=lambda est: EXPECTED_FAILED
)
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "lil", "dok", "bsr", "dense", "csr_array"])
def test_any_matrix_format_gives_the_same_model(fmt):
    X, y, C = onehot_set()
    ref = snapfit.LogisticRegression(C=C, random_state=0).fit(X, y)
    Xf = X.toarray() if fmt == "dense" else (
        sp.csr_array(X) if fmt == "csr_array" else X.asformat(fmt))  # fmt: skip
    est = snapfit.LogisticRegression(C=C, random_state=0).fit(Xf, y)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(est.predict_proba(Xf), ref.predict_proba(X), rtol=1e-12)


def test_parquet_path_dir_glob_and_table_equal_arrays(tmp_path):
    X, y = make_criteo_like(1500, seed=4, hash_bits=16)
    for part, (lo, hi) in enumerate([(0, 700), (700, 1500)]):
        write_parquet(tmp_path / f"part{part}.parquet", X[lo:hi], y[lo:hi], row_group_rows=300,
                      n_features=X.shape[1])  # fmt: skip
    ref = snapfit.LogisticRegression(C=0.1, random_state=0, tol=1e-6).fit(X, y)
    table = pq.read_table(tmp_path / "part0.parquet")
    for source in (str(tmp_path), str(tmp_path / "*.parquet"),
                   [tmp_path / "part0.parquet", tmp_path / "part1.parquet"]):  # fmt: skip
        est = snapfit.LogisticRegression(C=0.1, random_state=0, tol=1e-6).fit(source)
        np.testing.assert_array_equal(est.coef_, ref.coef_)
        assert est.classes_.tolist() == [0, 1]
    est = snapfit.LogisticRegression(C=0.1, random_state=0, tol=1e-6).fit(table)
    part = snapfit.LogisticRegression(C=0.1, random_state=0, tol=1e-6).fit(X[:700], y[:700])
    np.testing.assert_allclose(est.coef_[0, : table.num_rows], part.coef_[0, : table.num_rows])
    with pytest.raises(ValueError, match="without y"):
        snapfit.LogisticRegression().fit(str(tmp_path), y)


@pytest.mark.parametrize(
    "labels", [["spam", "ham"], [-1, 1], [0, 1], [3.0, 7.0], [True, False]], ids=str
)
def test_any_two_labels(labels):
    X, y01 = make_classification(300, 5, random_state=1)
    y = np.asarray(labels)[y01]
    est = snapfit.LogisticRegression(random_state=0).fit(X, y)
    assert sorted(est.classes_.tolist()) == sorted(set(np.asarray(labels).tolist()))
    assert set(est.predict(X).tolist()) <= set(est.classes_.tolist())
    assert est.score(X, y) > 0.8
    proba = est.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_allclose(proba[:, 1] > 0.5, est.decision_function(X) > 0)


def test_label_errors():
    X, _ = make_classification(60, 4, random_state=0)
    with pytest.raises(ValueError, match="only one class"):
        snapfit.LogisticRegression().fit(X, np.ones(60))


def test_max_iter_warns_and_warm_start_continues():
    X, y, C = criteo_set()
    with pytest.warns(ConvergenceWarning, match="increase max_iter"):
        est = snapfit.LogisticRegression(C=C, max_iter=2, tol=1e-9, warm_start=True,
                                         random_state=0).fit(X, y)  # fmt: skip
    first = est.history_[-1]["dual"]
    est.set_params(max_iter=500)
    est.fit(X, y)
    cold = snapfit.LogisticRegression(C=C, max_iter=500, tol=1e-9, random_state=0).fit(X, y)
    # the same rows: the previous dual point is reused, so the dual continues from where it was
    assert est.history_[0]["dual"] >= first
    assert est.n_iter_[0] <= cold.n_iter_[0] - 2
    # another C: the dual point is rescaled into the new bounds and the fit still converges
    est.set_params(C=C * 2).fit(X, y)
    ref = snapfit.LogisticRegression(C=C * 2, max_iter=500, tol=1e-9, random_state=0).fit(X, y)
    assert (
        abs(est.history_[-1]["primal"] - ref.history_[-1]["primal"])
        <= 1e-7 * ref.history_[-1]["primal"]
    )
    # other rows: falls back to the dual point paired with coef_
    est.fit(X[:1000], y[:1000])
    assert est.history_[-1]["rel_gap"] <= 1e-9


def test_parameter_validation_message():
    with pytest.raises(ValueError, match="'C' parameter of LogisticRegression must be"):
        snapfit.LogisticRegression(C=-1).fit(np.eye(2), [0, 1])


def test_gpu_request_without_gpu_is_a_clear_error():
    with pytest.raises(snapfit.errors.ResourceError, match="GPU"):
        snapfit.LogisticRegression(device="gpu").fit(np.eye(2), [0, 1])


def test_verbose_prints_epochs(capsys):
    X, y, C = dense_set()
    snapfit.LogisticRegression(C=C, verbose=1, random_state=0).fit(X, y)
    out = capsys.readouterr().out
    assert "epoch    1" in out and "rel_gap" in out and "(exact)" in out
