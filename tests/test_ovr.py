"""One-vs-rest over K classes in one pass (``snapfit.solvers.ovr``): the K problems of a fit
equal K binary fits of the same seed, reach liblinear's one-vs-rest optimum, and read the data
once per epoch; any K labels; predictions, probabilities, model files, warm starts."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_iris, load_wine
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression as SkLR
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC as SkSVC

import snapfit
from snapfit import estimator as estimator_io
from snapfit import svm
from snapfit.data import Dataset, write_parquet
from snapfit.datasets.criteo_like import make_criteo_like
from snapfit.engine.source import InMemorySource
from snapfit.errors import DataError
from snapfit.stream import decode as decode_mod
from snapfit.stream.plan import resident_peak_nbytes
from snapfit.stream.stats import DataStats


def wine():
    X, y = load_wine(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def ovr_primal(X, y, coef, intercept, C, loss, sw=None, cw=None, bias=1.0):
    """Sum over classes k of liblinear's problem k: class k's weight on its positives, ``C``
    on the rest, the intercept a regularized feature of value ``bias``."""
    classes = np.unique(y)
    total = 0.0
    for k, cls in enumerate(classes):
        pos = y == cls
        ypm = np.where(pos, 1.0, -1.0)
        c = np.full(len(y), C) if sw is None else C * sw
        if cw:
            c = np.where(pos, c * cw.get(cls, 1.0), c)
        m = ypm * (X @ coef[k] + intercept[k])
        if loss == "logistic":
            lk = np.logaddexp(0.0, -m)
        else:
            u = np.maximum(0.0, 1.0 - m)
            lk = u if loss == "hinge" else u * u
        b2 = (intercept[k] / bias) ** 2 if bias else 0.0
        total += 0.5 * (coef[k] @ coef[k] + b2) + np.sum(c * lk)
    return total


def quiet_fit(est, X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(X, y, **kw)


@pytest.mark.parametrize("make", [snapfit.LogisticRegression, snapfit.LinearSVC])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("n_jobs", [1, 2])
def test_k_problems_in_one_pass_equal_k_binary_fits(make, weighted, n_jobs):
    X, y = wine()
    labels = np.array(["red", "rose", "white"])[y]
    sw = np.random.default_rng(0).uniform(0.2, 2.0, len(y)) if weighted else None
    cw = {"red": 2.0, "white": 0.5} if weighted else None
    kw = dict(C=0.3, tol=0.0, max_iter=12, random_state=3, n_jobs=n_jobs, chunk_rows=40)
    multi = quiet_fit(make(class_weight=cw, **kw), X, labels, sample_weight=sw)
    assert multi.coef_.shape == (3, X.shape[1]) and multi.intercept_.shape == (3,)
    assert multi.n_iter_[0] == 12
    for k, cls in enumerate(multi.classes_):
        # liblinear's problem k: class k's weight on its positives, C (weight 1) on the rest
        bw = {True: cw.get(cls, 1.0), False: 1.0} if weighted else None
        one = quiet_fit(make(class_weight=bw, **kw), X, labels == cls, sample_weight=sw)
        np.testing.assert_allclose(multi.coef_[k], one.coef_[0], rtol=0, atol=1e-9)
        assert abs(multi.intercept_[k] - one.intercept_[0]) <= 1e-9


@pytest.mark.parametrize(
    ("make", "loss"),
    [(snapfit.LinearSVC, "hinge"), (snapfit.LinearSVC, "squared_hinge"),
     (snapfit.LogisticRegression, "logistic")],
)  # fmt: skip
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
def test_reaches_liblinears_one_vs_rest_optimum(make, loss, fit_intercept, weighted):
    X, y = wine()
    sw = np.random.default_rng(1).uniform(0.2, 2.0, len(y)) if weighted else None
    cw = {0: 2.0, 2: 0.5} if weighted else None
    C = 0.1
    kw = dict(C=C, fit_intercept=fit_intercept, class_weight=cw)
    est = make(tol=1e-10, max_iter=20_000, random_state=0, **kw)
    if loss != "logistic":
        est.set_params(loss=loss)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if loss == "logistic":  # liblinear's one-vs-rest, by hand (scikit-learn's is gone)
            refs = [SkLR(C=C, solver="liblinear", tol=1e-12, max_iter=10_000,
                         fit_intercept=fit_intercept,
                         class_weight={True: (cw or {}).get(k, 1.0), False: 1.0})
                    .fit(X, y == k, sample_weight=sw) for k in range(3)]  # fmt: skip
            coef = np.vstack([r.coef_ for r in refs])
            icpt = np.concatenate([np.atleast_1d(r.intercept_) for r in refs])
        else:
            ref = SkSVC(loss=loss, dual=True, tol=1e-12, max_iter=200_000, **kw)
            ref.fit(X, y, sample_weight=sw)
            coef, icpt = ref.coef_, np.atleast_1d(ref.intercept_) * np.ones(3)
    est.fit(X, y, sample_weight=sw)
    bias = 1.0 if fit_intercept else 0.0
    p_ref = ovr_primal(X, y, coef, icpt, C, loss, sw, cw, bias)
    p = ovr_primal(X, y, est.coef_, est.intercept_, C, loss, sw, cw, bias)
    assert p <= p_ref * (1 + 1e-6)
    assert est.history_[-1]["primal"] == pytest.approx(p, rel=1e-7)  # the certificate's primal
    np.testing.assert_array_equal(est.predict(X), est.to_sklearn().predict(X))


def count_passes(monkeypatch):
    """Counts the passes every in-memory source makes over its chunks."""
    seen = []
    original = InMemorySource.epoch

    def epoch(self, order):
        seen.append(1)
        return original(self, order)

    monkeypatch.setattr(InMemorySource, "epoch", epoch)
    return seen


def test_reads_the_data_once_per_epoch_whatever_k(monkeypatch):
    X, y = load_iris(return_X_y=True)
    passes = count_passes(monkeypatch)
    kw = dict(C=1.0, tol=0.0, max_iter=7, random_state=0, chunk_rows=50)
    quiet_fit(snapfit.LinearSVC(**kw), X, y)
    multi = len(passes)
    passes.clear()
    quiet_fit(snapfit.LinearSVC(**kw), X, y == 2)
    assert multi == len(passes) <= 7 + 2  # the epochs, and at most an exact check and a norm pass


def test_any_labels_and_prediction():
    X, y = wine()
    labels = np.array([10, -3, 7])[y]
    est = snapfit.LogisticRegression(C=1.0, random_state=0).fit(X, labels)
    assert est.classes_.tolist() == [-3, 7, 10]
    s = est.decision_function(X)
    assert s.shape == (len(y), 3)
    np.testing.assert_array_equal(est.predict(X), est.classes_[s.argmax(axis=1)])
    assert est.score(X, labels) > 0.9
    proba = est.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_allclose(np.log(proba), est.predict_log_proba(X))
    np.testing.assert_allclose(proba, est.to_sklearn().predict_proba(X), rtol=1e-12)
    sparse = est.decision_function(sp.csr_matrix(X))
    np.testing.assert_allclose(sparse, s, rtol=1e-12)


def test_model_files_and_warm_start(tmp_path):
    X, y = wine()
    est = snapfit.LinearSVC(C=0.2, tol=1e-8, max_iter=5000, random_state=0).fit(X, y)
    path = tmp_path / "svc.npz"
    est.save(path)
    back = svm.load(path)
    np.testing.assert_array_equal(back.coef_, est.coef_)
    np.testing.assert_array_equal(back.predict(X), est.predict(X))
    with pytest.raises(ValueError, match="svm.load"):
        estimator_io.load(path)
    warm = snapfit.LinearSVC(C=0.2, tol=1e-8, max_iter=5000, random_state=0, warm_start=True)
    warm.fit(X, y)
    first = warm.n_iter_[0]
    warm.fit(X, y)
    assert warm.n_iter_[0] < first  # started at the optimum of the same problems


def test_validation_with_more_than_two_classes_is_refused():
    X, y = load_iris(return_X_y=True)
    with pytest.raises(ValueError, match="validation scores two classes"):
        snapfit.LogisticRegression().fit(X, y, validation=(X, y))


def test_gpu_refuses_one_vs_rest_in_one_line(monkeypatch):
    from snapfit import train as train_mod
    from snapfit.engine import Problem
    from snapfit.engine.trainer import Devices
    from snapfit.inputs import csr_chunks

    X, y = load_iris(return_X_y=True)
    source = InMemorySource(csr_chunks(sp.csr_matrix(X), y.astype(np.float32), None, None), 4)
    problem = Problem(n_features=4, class_bounds=((1.0, 1.0),) * 3)
    with pytest.raises(ValueError, match="trains on CPU threads"):
        train_mod.make_trainer(source, problem, Devices(n_cpu=0, gpu_ids=(0,)))


def test_criteo_like_rows_reach_the_binary_fits_optimum():
    X, y01 = make_criteo_like(2000, seed=3, hash_bits=16)
    C = 0.1
    rng = np.random.default_rng(0)
    y = np.where(y01 == 1, 2, rng.integers(0, 2, len(y01)))  # three classes
    est = snapfit.LinearSVC(C=C, loss="squared_hinge", tol=1e-9, max_iter=5000, random_state=0)
    est.fit(X, y)
    ones = [snapfit.LinearSVC(C=C, loss="squared_hinge", tol=1e-11, max_iter=20_000,
                              random_state=1).fit(X, y == k) for k in range(3)]  # fmt: skip
    coef = np.vstack([one.coef_ for one in ones])
    icpt = np.concatenate([one.intercept_ for one in ones])
    p_ref = ovr_primal(X, y, coef, icpt, C, "squared_hinge")
    assert ovr_primal(X, y, est.coef_, est.intercept_, C, "squared_hinge") <= p_ref * (1 + 1e-6)


def three_class_parquet(tmp_path, n=20_000):
    X, y01 = make_criteo_like(n, seed=3, hash_bits=12)
    rng = np.random.default_rng(0)
    y = np.where(y01 == 1, 7, rng.choice([-2, 3], len(y01)))  # three classes, any whole numbers
    path = write_parquet(tmp_path / "three.parquet", X, y, row_group_rows=1000, targets="classes")
    return path, X, y


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_streamed_parquet_under_a_third_of_its_size_reaches_the_in_memory_optimum(tmp_path, n_jobs):
    path, X, y = three_class_parquet(tmp_path)
    kw = dict(C=0.01, tol=1e-8, max_iter=3000, random_state=0, n_jobs=n_jobs)
    ref = snapfit.LinearSVC(**kw).fit(X, y)
    peak = resident_peak_nbytes(DataStats.read(Dataset(path), sample=False), n_jobs, width=3)
    budget = int(peak / 3) - 1
    est = snapfit.LinearSVC(memory_budget=budget, **kw).fit(path)
    assert est.streamed_
    assert est.classes_.tolist() == [-2, 3, 7]
    p_ref = ovr_primal(X, y, ref.coef_, ref.intercept_, 0.01, "squared_hinge")
    p = ovr_primal(X, y, est.coef_, est.intercept_, 0.01, "squared_hinge")
    assert abs(p - p_ref) <= 1e-6 * p_ref
    np.testing.assert_array_equal(est.predict(path), est.predict(X))


def test_parquet_decoded_every_epoch_reads_each_row_group_once_per_epoch(tmp_path, monkeypatch):
    path, X, y = three_class_parquet(tmp_path, n=6000)
    binary = write_parquet(tmp_path / "two.parquet", X, y == 7, row_group_rows=1000)
    monkeypatch.setenv("SNAPFIT_STREAM", "parquet")
    reads = []
    original = decode_mod.decode_table

    def counted(*args, **kw):
        reads.append(1)
        return original(*args, **kw)

    monkeypatch.setattr(decode_mod, "decode_table", counted)
    kw = dict(C=0.1, tol=0.0, max_iter=4, random_state=0, memory_budget=3_000_000)
    quiet_fit(snapfit.LinearSVC(**kw), path, None)
    multi = len(reads)
    reads.clear()
    quiet_fit(snapfit.LinearSVC(**kw), binary, None)
    assert multi == len(reads) > 0
    assert multi <= (4 + 3) * 6  # each of the 6 row groups once a pass: ingest, epochs, checks


def test_parquet_labels_errors(tmp_path):
    X, _ = make_criteo_like(600, seed=1, hash_bits=12)
    y = np.tile([0.0, 1.5, 3.0], 200)
    path = write_parquet(tmp_path / "real.parquet", X, y, targets="real")
    with pytest.raises(DataError, match="real-valued targets"):
        snapfit.LinearSVC().fit(path)
    two = write_parquet(tmp_path / "two.parquet", X, np.tile([1, 2], 300), targets="classes")
    with pytest.raises(DataError, match="two classes; write them as 0/1"):
        snapfit.LinearSVC().fit(two)
    with pytest.raises(DataError, match="not a whole number"):
        write_parquet(tmp_path / "bad.parquet", X, y, targets="classes")
