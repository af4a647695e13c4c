"""``snapfit.LogisticRegression(device="gpu")`` end to end under the simulator: arrays, Parquet
and device (CuPy-style) input reach the CPU estimator's optimum."""

import numpy as np
import pytest

import snapfit
from snapfit.data import write_parquet
from tests.gpu.sim.conftest import make_problem_data
from tests.gpu.sim.test_interop import FakeCupyCSR, Interface


@pytest.fixture(scope="module")
def data():
    X, y, _ = make_problem_data(n=64, d=10, seed=4)
    return X, (y > 0).astype(int)


def fit_both(X, y, **kw):
    params = dict(C=1.0, tol=1e-9, max_iter=500, random_state=0, **kw)
    return (snapfit.LogisticRegression(device="gpu", **params).fit(X, y),
            snapfit.LogisticRegression(device="cpu", **params).fit(X, y))  # fmt: skip


def assert_same_optimum(a, b):
    pa, pb = a.history_[-1]["primal"], b.history_[-1]["primal"]
    assert a.history_[-1]["exact"] and abs(pa - pb) <= 1e-6 * abs(pb)
    np.testing.assert_allclose(a.coef_, b.coef_, atol=1e-3)


def test_arrays_on_the_gpu_and_a_cpu_thread(data):
    X, y = data
    gpu, cpu = fit_both(X, y, n_jobs=2)
    assert_same_optimum(gpu, cpu)
    np.testing.assert_allclose(gpu.predict_proba(X), cpu.predict_proba(X), atol=1e-3)


def test_parquet_on_the_gpu(data, tmp_path):
    X, y = data
    path = tmp_path / "d.parquet"
    write_parquet(path, X, y, row_group_rows=32)
    gpu = snapfit.LogisticRegression(device="gpu", tol=1e-9, max_iter=500, random_state=0)
    cpu = snapfit.LogisticRegression(device="cpu", tol=1e-9, max_iter=500, random_state=0)
    assert_same_optimum(gpu.fit(str(path)), cpu.fit(str(path)))


def test_device_csr_input_stays_on_the_device(data):
    X, y = data
    gpu = snapfit.LogisticRegression(device="gpu", tol=1e-9, max_iter=500, random_state=0)
    gpu.fit(FakeCupyCSR(X), Interface(y.astype(np.float64)))
    cpu = snapfit.LogisticRegression(device="cpu", tol=1e-9, max_iter=500, random_state=0)
    assert_same_optimum(gpu, cpu.fit(X, y))
    np.testing.assert_allclose(gpu.decision_function(FakeCupyCSR(X)), cpu.decision_function(X),
                               atol=1e-3)  # fmt: skip
    # labels may also come as host arrays, weights as device arrays. (C * weight stays 1: with
    # rows in flight reading w before each other's updates, larger C stalls on this data, whose
    # features most rows share; see docs/gpu-performance-model.md.)
    weighted = snapfit.LogisticRegression(C=0.5, device="gpu", tol=1e-9, max_iter=500,
                                          random_state=0)  # fmt: skip
    weighted.fit(FakeCupyCSR(X), y, sample_weight=Interface(np.full(len(y), 2.0)))
    assert_same_optimum(weighted, cpu)
    with pytest.raises(ValueError, match="device='cpu'"):
        snapfit.LogisticRegression(device="cpu").fit(FakeCupyCSR(X), y)


def test_warm_start_on_the_gpu(data):
    X, y = data
    est = snapfit.LogisticRegression(device="gpu", tol=1e-9, max_iter=3, warm_start=True,
                                     random_state=0)  # fmt: skip
    with pytest.warns(Warning, match="max_iter"):
        est.fit(X, y)
    est.set_params(max_iter=500).fit(X, y)
    cpu = snapfit.LogisticRegression(device="cpu", tol=1e-9, max_iter=500, random_state=0)
    assert_same_optimum(est, cpu.fit(X, y))


def test_streamed_parquet_on_the_gpu(tmp_path):
    """The reported crash: ``device="gpu"`` on Parquet larger than ``memory_budget``. The
    streaming source re-deals its pieces into chunks of other sizes every epoch; the GPU node
    used to keep its own per-chunk state sized on the first deal and failed on the second
    (``ValueError: incompatible shape`` copying alpha). Now it trains on the source's state,
    keyed by row, and reaches the in-memory optimum."""
    from snapfit.data import Dataset
    from snapfit.stream.budget import chunk_nbytes
    from snapfit.stream.plan import resident_peak_nbytes
    from snapfit.stream.stats import DataStats
    from tests.gpu.sim.conftest import make_sparse_rows

    X, y = make_sparse_rows(n=600, d=64, nnz=6, seed=0)
    path = tmp_path / "d.parquet"
    # 25-row groups are cut into pieces of 2 and 3 rows, so a chunk's size changes with the
    # deal: what made the old code fail.
    write_parquet(path, X, y, row_group_rows=25)
    ds = Dataset(str(path))
    budget = 10_000  # below a third of the decoded data: streamed, with alpha spilled to disk
    assert sum(chunk_nbytes(r.n_rows, r.nnz, True, False) for r in ds.chunks) > 3 * budget
    assert resident_peak_nbytes(DataStats.read(ds, sample=False), 1) > budget
    kw = dict(C=0.5, tol=1e-7, max_iter=300, random_state=0)
    cpu = snapfit.LogisticRegression(device="cpu", **kw).fit(X, y)
    gpu = snapfit.LogisticRegression(device="gpu", memory_budget=budget, **kw).fit(str(path))
    assert_same_optimum(gpu, cpu)


def test_device_input_resumes_from_its_checkpoint(data, tmp_path):
    """A checkpoint of a fit on device input is keyed by the device data's fingerprint (copied
    home for it): the same data resumes to the optimum, other data is refused."""
    X, y = data
    params = dict(device="gpu", tol=1e-9, random_state=0, checkpoint_dir=str(tmp_path))
    first = snapfit.LogisticRegression(max_iter=2, **params)
    with pytest.warns(Warning, match="max_iter"):
        first.fit(FakeCupyCSR(X), y)
    est = snapfit.LogisticRegression(max_iter=500, **params)
    est.fit(FakeCupyCSR(X), y, resume=True)
    assert est.history_[:2] == first.history_  # continued from epoch 2, did not start over
    cpu = snapfit.LogisticRegression(device="cpu", tol=1e-9, max_iter=500, random_state=0)
    assert_same_optimum(est, cpu.fit(X, y))
    X2 = X.copy()
    X2.data = X2.data * 2
    with pytest.raises(ValueError, match="checkpoint"):
        snapfit.LogisticRegression(max_iter=5, **params).fit(FakeCupyCSR(X2), y, resume=True)
