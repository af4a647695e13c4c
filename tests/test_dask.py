"""The cluster door: distributed equals local, placement, dask collections, a lost worker.

One warmed-up LocalCluster of 2 worker processes serves the module (the kill test, last, kills
one of them; a test after it would wait for the nanny's replacement and warm it up). Every test
runs under an alarm so that a hang fails instead of blocking CI.
"""

from __future__ import annotations

import inspect
import os
import signal
import threading
import time

import numpy as np
import pytest
import scipy.sparse as sp

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")

from snapfit import LinearSVC, LogisticRegression, Ridge  # noqa: E402
from snapfit.dask import (  # noqa: E402
    DaskLinearSVC,
    DaskLogisticRegression,
    DaskRidge,
    FitTimeoutError,
    balance,
    warm_up,
)
from snapfit.dask._driver import wait_all  # noqa: E402
from snapfit.data import Dataset, write_parquet  # noqa: E402
from snapfit.datasets.criteo_like import make_criteo_like_parquet  # noqa: E402
from snapfit.errors import DataError, ResourceError  # noqa: E402
from tests.alarm import alarm  # noqa: E402

C = 0.1


def _sparse_problem(n=20000, d=4096, nnz=12, seed=0):
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, d, size=(n, nnz))
    X = sp.csr_matrix(
        (np.ones(n * nnz, np.float32), idx.ravel(), np.arange(0, n * nnz + 1, nnz)), shape=(n, d)
    )
    y = (X @ rng.normal(size=d) + rng.logistic(size=n) > 0).astype(np.int8)
    return X, y


def _cluster():
    return distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, memory_limit="1GB",
        dashboard_address=None,
    )  # fmt: skip


@pytest.fixture(autouse=True)
def _alarm():
    """A hung test fails after 4 minutes instead of blocking the run."""
    with alarm(240, "test"):
        yield


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    X, y = _sparse_problem()
    path = tmp_path_factory.mktemp("dask") / "train.parquet"
    write_parquet(path, X, y, row_group_rows=2500)
    return str(path), X, y


@pytest.fixture(scope="module")
def criteo(tmp_path_factory):
    """3000 Criteo-like rows: dense integer fields shared by every row, hashed categoricals."""
    path = tmp_path_factory.mktemp("dask") / "criteo.parquet"
    make_criteo_like_parquet(path, 3000, seed=0, hash_bits=16, row_group_rows=500)
    return str(path)


@pytest.fixture(scope="module")
def local(data):
    path, _, _ = data
    return LogisticRegression(C=C, tol=1e-10, max_iter=300, random_state=0).fit(path)


@pytest.fixture(scope="module")
def cluster_client():
    with _cluster() as cluster, distributed.Client(cluster) as c:
        warmed = set(warm_up(c))
        yield c, warmed


@pytest.fixture
def client(cluster_client):
    """The module's client with 2 workers, both warmed up (imports and kernels loaded)."""
    c, warmed = cluster_client
    c.wait_for_workers(2, timeout=120)
    if set(c.scheduler_info()["workers"]) - warmed:
        warmed |= set(warm_up(c))
    return c


def _rel(a, b):
    return abs(a - b) / abs(b)


def _w_of_alpha(path, alpha, c_pos, c_neg, bias=1.0):
    """``sum_i a_i y_i x_i`` (intercept weight last) from the data and packed alpha, in numpy."""
    ds = Dataset(path)
    w, off = np.zeros(ds.n_features + 1), 0
    for chunk in ds.iter_chunks():
        n = chunk.n_rows
        s = alpha[off : off + n]
        c = np.where(chunk.y > 0, c_pos, c_neg)
        a = np.where(s >= 0, s, c + s)  # unpacked (see snapfit.solvers.dual)
        X = sp.csr_matrix(
            (np.ones(chunk.nnz) if chunk.values is None else chunk.values, chunk.indices,
             chunk.indptr), shape=(n, ds.n_features),
        )  # fmt: skip
        w[:-1] += X.T @ (a * chunk.y)
        w[-1] += bias * float(a @ chunk.y)
        off += n
    return w


@pytest.mark.parametrize(
    "door, local_class",
    [(DaskLogisticRegression, LogisticRegression), (DaskLinearSVC, LinearSVC),
     (DaskRidge, Ridge)],
)  # fmt: skip
def test_dask_classes_and_sklearn_equivalents(door, local_class):
    local = inspect.signature(local_class.__init__).parameters
    dist = inspect.signature(door.__init__).parameters
    assert set(dist) == set(local) | {"client"}
    for name, p in local.items():
        assert dist[name].default == p.default, name
    est = door(tol=1e-3)
    assert isinstance(est, local_class)
    assert est.get_params() == dict(local_class(tol=1e-3).get_params(), client=None)


def test_balance_by_nnz():
    sizes = {0: 10, 1: 9, 2: 5, 3: 4, 4: 1}
    out = balance(sizes, ["a", "b"])
    assert sorted(out["a"] + out["b"]) == [0, 1, 2, 3, 4]
    loads = [sum(sizes[k] for k in ids) for ids in out.values()]
    assert max(loads) - min(loads) <= 1
    # survivors keep their ids; orphans go to the lighter one
    assert balance({0: 4, 5: 3}, ["a", "b"], start={"a": [0]}) == {"a": [0], "b": [5]}


def test_parquet_fit_matches_local_and_reads_own_row_groups(client, data, local, monkeypatch):
    path, _, _ = data
    url = f"file://{path}"

    def no_reading(self, *args, **kwargs):
        raise AssertionError("the client read training data")

    with monkeypatch.context() as m:  # in this (the client's) process only: footers, no rows
        for name in ("read_chunk", "iter_chunks", "label_counts"):
            m.setattr(Dataset, name, no_reading)
        est = DaskLogisticRegression(client=client, C=C, tol=1e-8, max_iter=100, random_state=0)
        est.fit(url)  # the workers open the file by its URL, as they would s3:// or gs://
    last = est.history_[-1]
    assert last["exact"] and last["rel_gap"] <= 1e-8  # stopped on the exact global gap
    assert _rel(last["primal"], local.history_[-1]["primal"]) <= 1e-6
    np.testing.assert_allclose(est.coef_, local.coef_, atol=1e-3)
    # every worker read exactly the row groups it was given, and together all of them once
    refs = Dataset(url).chunks
    parts = [p for p in est.parts_ if p["generation"] == 0]
    assert len(parts) == 2 and len({p["address"] for p in parts}) == 2
    seen = []
    for p in parts:
        assert p["read"] == [(refs[k].file, refs[k].row_group) for k in p["ids"]]
        assert p["mode"] == "resident"
        seen += p["read"]
    assert sorted(seen) == sorted((r.file, r.row_group) for r in refs)
    # balanced by nnz (equal rows of equal nnz here: 4 row groups each)
    assert [len(p["ids"]) for p in parts] == [4, 4]
    # per-round history: seconds, bytes both ways, the exact gap
    for h in est.history_:
        assert h["n_workers"] == 2 and h["seconds"] >= 0
        assert h["bytes_sent"] > 0 and h["bytes_received"] > 0
    # to_local: the plain estimator with the same coefficients
    loc = est.to_local()
    assert type(loc) is LogisticRegression
    np.testing.assert_array_equal(loc.coef_, est.coef_)
    assert loc.get_params() == {k: v for k, v in est.get_params().items() if k != "client"}
    # predictions of Parquet input: a dask array, one block per row group
    proba = est.predict_proba(path)
    assert isinstance(proba, da.Array) and proba.numblocks[0] == len(refs)
    np.testing.assert_allclose(proba.compute(), loc.predict_proba(data[1]), atol=1e-12)


@pytest.mark.parametrize("n_jobs, deterministic", [(None, True), (2, False)])
def test_criteo_like_two_workers_reach_the_single_process_optimum(
    client, criteo, n_jobs, deterministic
):
    """Dense fields shared by every row couple the workers' dual variables: plain CoCoA+ stalled
    near 1e-3 here (fixed shares); the corrected rounds reach the optimum in a few dozen. Two
    threads sharing w on each worker count as one unit and keep every round's dw exact."""
    ref = LogisticRegression(C=C, tol=1e-10, max_iter=500, random_state=0).fit(criteo)
    est = DaskLogisticRegression(client=client, C=C, tol=1e-8, max_iter=60, random_state=0,
                                 n_jobs=n_jobs, deterministic=deterministic)  # fmt: skip
    est.fit(criteo)
    assert est.history_[-1]["rel_gap"] <= 1e-8
    assert _rel(est.history_[-1]["primal"], ref.history_[-1]["primal"]) <= 1e-6
    assert len(est.history_) <= 40
    # two threads sharing w are one unit towards sigma', like one thread
    assert [(p["units"], p["sigma_units"]) for p in est.parts_] == [(n_jobs or 1, 1)] * 2
    # w is exactly w(alpha) over both workers' rows (alpha: the final round's checkpoint)
    w = np.r_[est.coef_.ravel(), est.intercept_]
    np.testing.assert_allclose(w, _w_of_alpha(criteo, est._alpha, C, C), rtol=0, atol=1e-10)
    # the model knows how its data was hashed, and refuses data hashed otherwise
    assert est.feature_map_ == ref.feature_map_ and est.feature_map_["hash_bits"] == 16
    assert est.to_local().feature_map_ == ref.feature_map_
    other = os.path.join(os.path.dirname(criteo), "bits15.parquet")
    make_criteo_like_parquet(other, 100, seed=1, hash_bits=15, force=True)
    with pytest.raises(DataError, match="hash_bits 15 here but 16 in the model"):
        est.predict_proba(other)


@pytest.mark.parametrize("n_jobs, deterministic", [(None, True), (2, False)])
def test_memory_budget_applies_on_the_workers(client, data, local, n_jobs, deterministic):
    """A budget below the resident peak of a worker's share: the share is streamed by the
    out-of-core engine on that worker, and the fit reaches the same optimum (also with two
    threads sharing w there: the streamed chunks relabeled, the rounds' dw in data order)."""
    path, _, _ = data
    est = DaskLogisticRegression(client=client, C=C, tol=1e-8, max_iter=100, random_state=0,
                                 memory_budget=1_300_000, n_jobs=n_jobs,
                                 deterministic=deterministic)  # fmt: skip
    est.fit(path)
    assert {p["mode"] for p in est.parts_} == {"stream"}
    assert {p["budget"] for p in est.parts_} == {1_300_000}
    assert _rel(est.history_[-1]["primal"], local.history_[-1]["primal"]) <= 1e-6


def test_default_budget_is_half_the_workers_memory_limit(client, data):
    """Without ``memory_budget`` each worker budgets half of its own ``memory_limit`` (1 GB
    here), not half of the host's free memory, which the other workers share."""
    from snapfit.stream.budget import default_memory_budget

    est = DaskLogisticRegression(client=client, C=C, tol=1e-3, max_iter=5, random_state=0)
    est.fit(data[0])
    assert default_memory_budget() > 500_000_000  # the host alone would allow more
    assert {p["budget"] for p in est.parts_} == {500_000_000}


def test_dask_array_fit_and_predict(client):
    X, y = _sparse_problem(n=4000, d=256, nnz=8, seed=1)
    Xd = X.toarray()
    labels = np.where(y > 0, "yes", "no")
    sw = np.random.default_rng(2).uniform(0.5, 2.0, len(y))
    dX = da.from_array(Xd, chunks=(1000, 256))
    dy = da.from_array(labels, chunks=1000)
    est = DaskLogisticRegression(client=client, C=C, tol=1e-8, max_iter=100, random_state=0)
    est.fit(dX, dy, sample_weight=da.from_array(sw, chunks=1000), tree_above=1)  # tree sums
    ref = LogisticRegression(C=C, tol=1e-10, max_iter=300).fit(Xd, labels, sample_weight=sw)
    assert _rel(est.history_[-1]["primal"], ref.history_[-1]["primal"]) <= 1e-6
    assert list(est.classes_) == ["no", "yes"]
    pred = est.predict(dX)
    assert isinstance(pred, da.Array)
    assert (pred.compute() == ref.predict(Xd)).mean() > 0.999
    reads = sorted(k for p in est.parts_ for k in p["read"])
    assert reads == [0, 1, 2, 3]


def test_cli_trains_on_a_running_scheduler(client, data, local, tmp_path):
    """``snapfit train DATA --scheduler tcp://...``: the model matches the local optimum."""
    import json

    from click.testing import CliRunner

    import snapfit
    from snapfit.cli import cli

    path, X, _ = data
    out, doc = tmp_path / "m.npz", tmp_path / "train.json"
    res = CliRunner().invoke(cli, ["train", path, "--out", str(out), "--C", str(C), "--tol",
                                   "1e-8", "--scheduler", client.scheduler.address,
                                   "--json", str(doc), "--quiet"])  # fmt: skip
    assert res.exit_code == 0, res.output
    hist = json.loads(doc.read_text())["history"]
    assert hist[-1]["rel_gap"] <= 1e-8 and hist[-1]["n_workers"] == 2
    assert _rel(hist[-1]["primal"], local.history_[-1]["primal"]) <= 1e-6
    np.testing.assert_allclose(snapfit.load(out).coef_, local.coef_, atol=1e-3)


def test_gpu_on_workers_without_one_is_a_clear_error(client, data):
    est = DaskLogisticRegression(client=client, device="gpu")
    with pytest.raises(ResourceError, match="no usable GPU") as e:
        est.fit(data[0])
    for addr in client.scheduler_info()["workers"]:
        assert addr in str(e.value)


def test_a_new_gpu_cluster_is_dask_cudas_when_installed(monkeypatch, caplog):
    """``cluster_client(gpu=True)`` starts dask-cuda's ``LocalCUDACluster`` (one worker per
    GPU) when dask-cuda imports, else a ``LocalCluster`` and says so."""
    import logging
    import sys
    import types

    from snapfit.dask import cluster_client

    made = {}

    def local_cuda_cluster(**kw):
        made.update(kw)
        return distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                        dashboard_address=None)  # fmt: skip

    fake = types.SimpleNamespace(LocalCUDACluster=local_cuda_cluster)
    monkeypatch.setitem(sys.modules, "dask_cuda", fake)
    with cluster_client(n_workers=1, gpu=True) as c:
        assert len(c.scheduler_info()["workers"]) == 1
    assert made == {"n_workers": 1, "dashboard_address": None}
    monkeypatch.setitem(sys.modules, "dask_cuda", None)  # not installed: import fails
    with caplog.at_level(logging.INFO, "snapfit"), cluster_client(n_workers=1, gpu=True) as c:
        assert len(c.scheduler_info()["workers"]) == 1
    assert "dask-cuda is not installed" in caplog.text


def test_two_fits_on_one_cluster_do_not_collide(client, data):
    path, _, _ = data
    out = {}

    def run(name, c):
        est = DaskLogisticRegression(client=client, C=c, tol=1e-6, max_iter=100, random_state=0)
        out[name] = est.fit(path)

    threads = [threading.Thread(target=run, args=(n, c)) for n, c in (("a", 0.1), ("b", 1.0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=200)
    assert set(out) == {"a", "b"}
    ref_b = LogisticRegression(C=1.0, tol=1e-8, max_iter=300).fit(path)
    assert _rel(out["b"].history_[-1]["primal"], ref_b.history_[-1]["primal"]) < 1e-5
    assert out["a"].history_[-1]["primal"] < out["b"].history_[-1]["primal"]


def test_waits_end_in_a_clear_error(client):
    addr = sorted(client.scheduler_info()["workers"])[0]
    fut = client.submit(time.sleep, 2, pure=False, workers=[addr])
    with pytest.raises(FitTimeoutError, match="did not finish within 0.5 s on worker"):
        wait_all(client, {addr: fut}, timeout=0.5, what="sleeping")
    fut.result()  # a running task cannot be cancelled: leave the worker's thread free


#: The SVMs' cells: C small enough that the hinge's local fit needs ~20 epochs (at C = 0.1
#: this data's took 1179, and 2 workers' rounds more than 300).
SVM_C = 0.01


@pytest.fixture(scope="module")
def svm_data(tmp_path_factory):
    X, y = _sparse_problem(n=2000, d=256, nnz=8, seed=1)
    path = str(tmp_path_factory.mktemp("dask") / "svm.parquet")
    write_parquet(path, X, y, row_group_rows=250)
    return path, X, y


def _svm_optimum(X, y, loss):
    ref = LinearSVC(C=SVM_C, loss=loss, device="cpu", tol=1e-10, max_iter=5000, random_state=0)
    return ref.fit(X, y)


@pytest.mark.parametrize("inputs", ["arrays", "parquet"])
@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_linear_svc_on_the_cluster_reaches_the_local_optimum(client, svm_data, loss, inputs):
    """Each worker's passes and measurements run the SVM's loss: the exact global gap reaches
    tol, the primal is the in-memory CPU optimum's, ``w = w(alpha)`` over both workers' rows."""
    path, X, y = svm_data
    ref = _svm_optimum(X, y, loss)
    est = DaskLinearSVC(client=client, C=SVM_C, loss=loss, tol=1e-8, max_iter=200,
                        random_state=0)  # fmt: skip
    if inputs == "arrays":
        labels = np.where(y > 0, "yes", "no")
        est.fit(da.from_array(X, chunks=(500, 256)), da.from_array(labels, chunks=500))
        assert list(est.classes_) == ["no", "yes"]
    else:
        est.fit(path)
    last = est.history_[-1]
    assert last["exact"] and last["rel_gap"] <= 1e-8 and last["n_workers"] == 2
    assert _rel(last["primal"], ref.history_[-1]["primal"]) <= 1e-6
    w = np.r_[est.coef_.ravel(), est.intercept_]
    np.testing.assert_allclose(w, _w_of_alpha(path, est._alpha, SVM_C, SVM_C), atol=1e-10)
    assert not hasattr(est, "predict_proba")  # an SVM scores margins
    local = est.to_local()
    assert type(local) is LinearSVC and local.loss == loss
    np.testing.assert_array_equal(local.coef_, est.coef_)
    lazy = est.predict(path if inputs == "parquet" else da.from_array(X, chunks=(500, 256)))
    assert isinstance(lazy, da.Array)
    np.testing.assert_array_equal(lazy.compute(), local.predict(X))


@pytest.mark.parametrize("inputs", ["arrays", "parquet"])
def test_one_vs_rest_on_the_cluster_reaches_the_local_optimum(client, svm_data, inputs, tmp_path):
    """Three classes: every worker runs the K problems of its rows in one pass and measures
    them at the global ``w`` (K blocks); "balanced" weights from the client's class counts."""
    _, X, y = svm_data
    y3 = np.where(y > 0, 7, np.where(np.arange(len(y)) % 3 == 0, -2, 3))
    kw = dict(C=SVM_C, loss="squared_hinge", class_weight="balanced", random_state=0)
    ref = LinearSVC(device="cpu", tol=1e-10, max_iter=5000, **kw).fit(X, y3)
    est = DaskLinearSVC(client=client, tol=1e-8, max_iter=200, **kw)
    if inputs == "arrays":
        data = (da.from_array(X, chunks=(500, 256)),)
        est.fit(data[0], da.from_array(y3, chunks=500))
    else:
        data = (write_parquet(tmp_path / "three.parquet", X, y3, row_group_rows=250,
                              targets="classes"),)  # fmt: skip
        est.fit(data[0])
    assert est.classes_.tolist() == [-2, 3, 7] and est.coef_.shape == (3, 256)
    last = est.history_[-1]
    assert last["exact"] and last["rel_gap"] <= 1e-8 and last["n_workers"] == 2
    assert _rel(last["primal"], ref.history_[-1]["primal"]) <= 1e-6
    lazy = est.predict(data[0])
    assert isinstance(lazy, da.Array)
    np.testing.assert_array_equal(lazy.compute(), est.to_local().predict(X))
    np.testing.assert_allclose(est.decision_function(data[0]).compute(),
                               est.to_local().decision_function(X), rtol=1e-12)  # fmt: skip


def test_one_vs_rest_logistic_probabilities_on_the_cluster(client, svm_data):
    _, X, y = svm_data
    y3 = np.where(y > 0, "b", np.where(np.arange(len(y)) % 3 == 0, "a", "c"))
    ref = LogisticRegression(C=C, device="cpu", tol=1e-10, max_iter=500, random_state=0)
    ref.fit(X, y3)
    est = DaskLogisticRegression(client=client, C=C, tol=1e-8, max_iter=200, random_state=0)
    Xd = da.from_array(X, chunks=(500, 256))
    est.fit(Xd, da.from_array(y3, chunks=500))
    assert est.classes_.tolist() == ["a", "b", "c"]
    assert _rel(est.history_[-1]["primal"], ref.history_[-1]["primal"]) <= 1e-6
    proba = est.predict_proba(Xd).compute()
    np.testing.assert_allclose(proba, est.to_local().predict_proba(X), rtol=1e-12)
    np.testing.assert_allclose(proba, ref.predict_proba(X), atol=1e-4)


def test_ridge_on_the_cluster_reaches_the_local_optimum(client, svm_data, tmp_path):
    """Real targets travel in the array blocks (float32, as ``Ridge`` keeps them) with sample
    weights, or the workers read them from Parquet; the squared loss's rounds reach
    ``snapfit.Ridge``'s optimum."""
    _, X, _ = svm_data
    rng = np.random.default_rng(3)
    target = np.asarray(X @ rng.normal(size=256)).ravel() + rng.normal(size=X.shape[0])
    sw = rng.uniform(0.5, 2.0, X.shape[0])
    ref = Ridge(alpha=10.0, device="cpu", tol=1e-10, max_iter=3000, random_state=0)
    ref.fit(X, target, sample_weight=sw)
    dX = da.from_array(X, chunks=(500, 256))
    est = DaskRidge(client=client, alpha=10.0, tol=1e-8, max_iter=200, random_state=0)
    est.fit(dX, da.from_array(target, chunks=500), sample_weight=da.from_array(sw, chunks=500))
    last = est.history_[-1]
    assert last["exact"] and last["rel_gap"] <= 1e-8 and last["n_workers"] == 2
    assert _rel(last["primal"], ref.history_[-1]["primal"]) <= 1e-6
    local = est.to_local()
    assert type(local) is Ridge and local.coef_.shape == (256,)
    pred = est.predict(dX)
    assert isinstance(pred, da.Array)
    np.testing.assert_allclose(pred.compute(), local.predict(X), rtol=1e-12)
    np.testing.assert_allclose(local.predict(X), ref.predict(X), atol=1e-3)
    with pytest.raises(TypeError, match="Use snapfit.Ridge for in-memory arrays"):
        est.fit(X, target)
    path = str(tmp_path / "targets.parquet")
    write_parquet(path, X, target, weight=sw, targets="real", row_group_rows=250)
    est.fit(path)
    last = est.history_[-1]
    assert last["rel_gap"] <= 1e-8 and {p["mode"] for p in est.parts_} == {"resident"}
    assert _rel(last["primal"], ref.history_[-1]["primal"]) <= 1e-6
    np.testing.assert_allclose(est.predict(path).compute(), local.predict(X), atol=1e-3)


def test_cli_trains_a_linear_svm_on_a_running_scheduler(client, svm_data, tmp_path):
    """``snapfit train --loss hinge --scheduler``: a ``LinearSVC`` model file at the optimum."""
    import json

    from click.testing import CliRunner

    from snapfit import svm
    from snapfit.cli import cli

    path, X, y = svm_data
    out, doc = tmp_path / "m.npz", tmp_path / "train.json"
    args = ["train", path, "--out", str(out), "--loss", "hinge", "--C", str(SVM_C),
            "--tol", "1e-8", "--scheduler", client.scheduler.address, "--json", str(doc),
            "--quiet"]  # fmt: skip
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    hist = json.loads(doc.read_text())["history"]
    assert hist[-1]["rel_gap"] <= 1e-8 and hist[-1]["n_workers"] == 2
    assert _rel(hist[-1]["primal"], _svm_optimum(X, y, "hinge").history_[-1]["primal"]) <= 1e-6
    model = svm.load(out)
    assert model.loss == "hinge" and model.C == SVM_C


def test_fit_survives_a_killed_worker(client, tmp_path):
    """A worker process dies in round 2: its row groups move to the survivor, every part rolls
    back to the last checkpoint, and the fit reaches the undisturbed objective in at most twice
    the undisturbed rounds (counted, not timed: seconds on a shared machine are not a check)."""
    from snapfit.datasets.criteo_like import make_criteo_like_parquet

    path = str(tmp_path / "criteo.parquet")
    make_criteo_like_parquet(path, 12000, seed=1, hash_bits=16, row_group_rows=1500)
    n_groups = len(Dataset(path).chunks)
    params = dict(C=C, tol=1e-8, max_iter=200, random_state=0)
    c = client
    calm = DaskLogisticRegression(client=c, **params).fit(path)
    victim = {}

    def kill_in_round_2(rec):
        if rec["epoch"] == 2 and not victim:
            victim["addr"] = addr = sorted(c.scheduler_info()["workers"])[0]
            victim["pid"] = c.run(os.getpid, workers=[addr])[addr]
            os.kill(victim["pid"], signal.SIGKILL)

    hit = DaskLogisticRegression(client=c, **params).fit(path, on_round=kill_in_round_2)
    assert victim
    events = [h["event"] for h in hit.history_ if h.get("event")]
    assert len(events) == 1 and victim["addr"] in events[0]
    assert hit.history_[-1]["rel_gap"] <= 1e-8
    assert _rel(hit.history_[-1]["primal"], calm.history_[-1]["primal"]) <= 1e-6
    survivor = [p for p in hit.parts_ if p["generation"] == 1]
    assert len(survivor) == 1 and survivor[0]["address"] != victim["addr"]
    assert sorted(survivor[0]["ids"]) == list(range(n_groups))
    # the survivor kept its own row groups resident and read only the lost ones
    first = next(p for p in hit.parts_ if p["address"] == survivor[0]["address"])
    assert not set(survivor[0]["read"]) & set(first["read"])
    assert len(survivor[0]["read"]) == n_groups - len(first["read"])
    assert len(hit.history_) <= 2 * len(calm.history_)  # rounds run, the lost one included


def test_early_stopping_on_a_cluster_keeps_the_best_round(client, criteo, tmp_path):
    valid = str(tmp_path / "valid.parquet")
    make_criteo_like_parquet(valid, 1000, seed=5, hash_bits=16)
    kw = dict(C=C, tol=1e-8, max_iter=40, random_state=0, early_stopping_gap=float("inf"))
    full = DaskLogisticRegression(client=client, **kw).fit(criteo, validation=valid)
    scores = [h["validation_logloss"] for h in full.history_]
    assert full.best_score_ == min(scores) and full.best_iteration_ == 1 + int(np.argmin(scores))
    est = DaskLogisticRegression(client=client, early_stopping_rounds=1, **kw)
    est.fit(criteo, validation=valid)
    got = [h["validation_logloss"] for h in est.history_]
    assert got == scores[: len(got)]  # the same rounds, scored the same, up to the stop
    stop = next(e for e in range(2, len(scores) + 1) if scores[e - 1] >= min(scores[: e - 1]))
    assert len(got) == stop and est.best_iteration_ == stop - 1
    assert est.stopped_early_ and not est.converged_  # said so, not reported as converged
    local = est.to_local()
    assert local.stopped_early_ and not local.converged_
    local = est.to_local()
    assert local.best_iteration_ == est.best_iteration_
    y = np.concatenate([c.y for c in Dataset(valid).iter_chunks()]) > 0
    p = local.predict_proba(valid)[:, 1]  # the kept model is the best round's
    assert -np.mean(np.log(np.where(y, p, 1 - p))) == pytest.approx(est.best_score_, rel=1e-9)


def test_array_blocks_held_by_one_worker_are_shared_with_the_others(monkeypatch):
    """Dask may compute every block on one worker; each keeps at most its fair share of what it
    holds and the rest is dealt, so both workers train (no dependence on where tasks ran)."""
    from types import SimpleNamespace

    from snapfit.dask._inputs import ArrayInput

    monkeypatch.setattr(distributed, "wait", lambda *a, **k: None)
    inp = object.__new__(ArrayInput)
    inp.sizes = {k: 100 for k in range(4)}
    inp.futures = {k: SimpleNamespace(key=f"b{k}") for k in range(4)}
    inp.timeout = 1.0
    inp.client = SimpleNamespace(who_has=lambda futs: {f.key: ("w1",) for f in futs})
    placed = inp.place({"w1": 1, "w2": 1})
    assert placed == {"w1": [0, 1], "w2": [2, 3]}
    inp.client = SimpleNamespace(who_has=lambda futs: {f.key: ("w1", "w2") for f in futs})
    assert inp.place({"w1": 1, "w2": 1}) == {"w1": [0, 2], "w2": [1, 3]}
