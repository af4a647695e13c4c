"""Device input by ``__cuda_array_interface__`` (what CuPy arrays and cupyx CSR matrices expose),
tested with simulator device arrays and plain objects carrying the interface."""

import numpy as np
import pytest
from numba import cuda

from snapfit.engine import Problem
from snapfit.engine.loop import run_epochs
from snapfit.engine.units import host_warm
from snapfit.gpu import interop
from snapfit.train import make_trainer
from tests.gpu.sim.conftest import cpu_reference, gpu_devices, make_problem_data, split_chunks


class Interface:
    """An object exposing only ``__cuda_array_interface__``, as a CuPy ndarray does. The
    simulator's device memory is host memory, so a NumPy array's memory stands in for it."""

    def __init__(self, arr):
        self._arr = arr = np.ascontiguousarray(arr)
        iface = arr.__array_interface__
        self.__cuda_array_interface__ = {
            "shape": arr.shape, "typestr": iface["typestr"], "data": iface["data"],
            "strides": None, "version": 3, "stream": None,
        }  # fmt: skip


class FakeCupyCSR:
    """Just the attributes of ``cupyx.scipy.sparse.csr_matrix`` that snapfit reads."""

    format = "csr"

    def __init__(self, X):
        self.shape = X.shape
        self.data = Interface(X.data)
        self.indices = Interface(X.indices)
        self.indptr = Interface(X.indptr)  # int32, as CuPy's


def test_fit_on_device_csr_equals_cpu(small):
    X, y, w, problem, ref = small
    Xd = FakeCupyCSR(X)
    assert interop.is_device_input(Xd) and interop.is_cuda_csr(Xd)
    chunk, d = interop.device_chunk(Xd, y, w, block=16)
    source = interop.DeviceSource([chunk], d)
    tr = make_trainer(source, problem, gpu_devices(n_cpu=2))  # CPU threads cannot read it
    try:
        assert tr.devices.n_cpu == 0 and len(tr.units) == 1
        result = run_epochs(tr, problem)
        tr.sync_alpha()
        assert not tr.units[0].on_device
        assert np.abs(tr.state.alpha).max() > 0  # alpha came home from the user's device chunk
        # a warm start from the optimum on the device (alpha from margins, w(alpha) summed
        # there) and from alpha itself (a checkpoint) both give back the same w
        w_end = tr.w.copy()
        alpha = tr.alpha()
        host = split_chunks(X, y, w, 64)[0]
        a_host, w_host = np.zeros(64), np.zeros(13)
        host_warm(problem, host, a_host, w_end, w_host)  # the same passes on the CPU
        tr.warm_start(w_end)
        np.testing.assert_allclose(tr.w, w_host, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(tr.alpha(), a_host, rtol=1e-12)
        tr.set_alpha(alpha)
        np.testing.assert_allclose(tr.w, w_end, atol=1e-12)
        assert tr.units[0].on_device == {0}
    finally:
        tr.close()
    assert result.converged
    assert abs(result.history[-1].primal / ref.history[-1].primal - 1) <= 1e-6


def test_dense_device_input_and_predict():
    X, y, w = make_problem_data(n=20, d=5, weights=True, seed=7)
    dense = np.ascontiguousarray(X.toarray())
    problem = Problem(n_features=5, tol=1e-10, max_iter=300)
    ref = cpu_reference(split_chunks(X, y, w, 20), problem)
    chunk, d = interop.device_chunk(Interface(dense), y, w, block=16)
    assert chunk.nnz == dense.size
    source = interop.DeviceSource([chunk], d)
    tr = make_trainer(source, problem, gpu_devices())
    try:
        result = run_epochs(tr, problem)
    finally:
        tr.close()
    assert abs(result.history[-1].primal / ref.history[-1].primal - 1) <= 1e-6
    coef, b = result.w[:5], result.w[5]
    expect = dense @ coef + b
    got = interop.decision_function(Interface(dense), coef, b, block=16)
    np.testing.assert_allclose(got, expect, rtol=1e-10)
    sparse = interop.decision_function(FakeCupyCSR(X), coef, b, block=16, to_host=False)
    np.testing.assert_allclose(sparse.copy_to_host(), expect, rtol=1e-10)


def test_device_input_errors():
    with pytest.raises(TypeError, match="__cuda_array_interface__"):
        interop.device_csr(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="2-D and C-contiguous"):
        interop.device_csr(cuda.to_device(np.zeros(3)))
    with pytest.raises(ValueError, match="3 features"):
        interop.decision_function(cuda.to_device(np.zeros((2, 3))), np.zeros(4), 0.0)
    assert not interop.is_device_input([[1.0]])
    shared = np.arange(6.0).reshape(2, 3)
    view = interop.as_device_array(Interface(shared))
    shared[0, 0] = 42.0  # zero-copy: the device view sees the owner's memory
    assert view.copy_to_host()[0, 0] == 42.0


class CupyCSR:
    """``cupyx.scipy.sparse.csr_matrix``'s attributes, holding stand-in CuPy arrays."""

    format = "csr"

    def __init__(self, xp, X):
        self.shape = X.shape
        self.data, self.indices, self.indptr = (xp.asarray(a) for a in (X.data, X.indices,
                                                                         X.indptr))  # fmt: skip


class NoNamespace(Interface):
    """A device array type without ``__array_namespace__`` from a package with ``asarray``."""

    __module__ = "numpy.fake"


def test_predictions_on_cupy_input_are_cupy_arrays():
    import snapfit
    from tests.gpu.sim.fake_cupy import FakeCupy, ndarray

    xp = FakeCupy()
    X, y, w = make_problem_data(n=20, d=5, weights=True, seed=7)
    model = snapfit.LogisticRegression(device="cpu", tol=1e-8).fit(X, y)
    dense = np.ascontiguousarray(X.toarray())
    for Xd in (CupyCSR(xp, X), xp.asarray(dense)):
        assert interop.array_module(Xd) is xp
        s = model.decision_function(Xd)
        proba = model.predict_proba(Xd)
        log_proba = model.predict_log_proba(Xd)
        assert isinstance(s, ndarray) and isinstance(proba, ndarray)
        assert isinstance(log_proba, ndarray) and proba.shape == (20, 2)
        np.testing.assert_allclose(s.get(), model.decision_function(X), rtol=1e-10)
        np.testing.assert_allclose(proba.get(), model.predict_proba(X), rtol=1e-10)
        np.testing.assert_allclose(log_proba.get(), model.predict_log_proba(X), rtol=1e-10)
        np.testing.assert_array_equal(model.predict(Xd), model.predict(X))  # labels: host
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.asarray(s)  # as CuPy's: the result never left the device unasked
    # no namespace: the type's package decides; a bare interface gives NumPy
    assert interop.array_module(NoNamespace(dense)) is np
    assert interop.array_module(Interface(dense)) is None
    assert type(model.decision_function(Interface(dense))) is np.ndarray
