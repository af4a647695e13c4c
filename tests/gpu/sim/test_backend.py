"""The backend seam under the simulator: ``CupyBackend`` on a stand-in for CuPy
(``fake_cupy.py``) trains exactly as ``NumbaBackend`` does, through CuPy's pool (capped at the
budget), pinned memory, non-blocking streams and events; the steady state allocates nothing;
the choice of backend. The same comparison on real CuPy is ``tests/gpu/test_cupy_gpu.py``."""

import numpy as np
import pytest

from snapfit.engine import InMemorySource
from snapfit.engine.loop import run_epochs
from snapfit.errors import ResourceError
from snapfit.gpu import backend as gpu_backend
from snapfit.gpu.backend import CupyBackend, NumbaBackend, backend_name, choose_backend
from snapfit.gpu.data import chunk_device_bytes
from snapfit.gpu.unit import pool_limit
from snapfit.train import make_trainer
from tests.gpu.sim.conftest import gpu_devices, split_chunks
from tests.gpu.sim.fake_cupy import FakeCupy


@pytest.fixture
def fake_cupy():
    return FakeCupy()


def _streamed_fit(small, backend, epochs=None):
    """A fit whose device budget holds two slots and one resident chunk of four (so chunks
    stream through the slots every epoch); returns the result and the GPU unit's stats."""
    X, y, w, problem, _ = small
    chunks = split_chunks(X, y, w, 16)
    nbytes = [chunk_device_bytes(c.n_rows, c.nnz, True, True) for c in chunks]
    budget = 8 * 13 + 4 * 12 + 2 * max(nbytes) + min(nbytes)
    if epochs is not None:
        problem = type(problem)(**{**problem.__dict__, "max_iter": epochs, "tol": 0.0})
    tr = make_trainer(InMemorySource(chunks, 12), problem,
                      gpu_devices(budget=budget, backend=backend))  # fmt: skip
    try:
        result = run_epochs(tr, problem)
        unit = tr.units[0]
        assert 1 <= len(unit.resident) < len(chunks)
        return result, unit
    finally:
        tr.close()


def test_cupy_backend_trains_as_numba_does(small, fake_cupy):
    ref = small[-1]
    got, unit = _streamed_fit(small, CupyBackend(fake_cupy))
    want, _ = _streamed_fit(small, "numba")
    assert got.converged and got.n_iter == want.n_iter
    np.testing.assert_allclose(got.w, want.w, rtol=1e-10, atol=1e-13)
    assert abs(got.history[-1].primal / ref.history[-1].primal - 1) <= 1e-6
    assert backend_name(unit.backend) == "cupy/simulator"
    log = fake_cupy.log
    assert ("use", 0) in log and ("set_limit", int(pool_limit(unit.budget))) in log
    assert [e for e in log if e[0] == "stream"] == [("stream", True)] * 2  # non-blocking
    assert {e[1] for e in log if e[0] == "event"} == {True}  # timing disabled
    # the compute stream waited for each slot's copies through CuPy
    copy_ptr, compute_ptr = unit.copy_stream.native.ptr, unit.compute_stream.native.ptr
    waits = [e for e in log if e[0] == "wait_event"]
    assert waits and all(e[1:] == (compute_ptr, copy_ptr) for e in waits)
    assert any(e[0] == "pinned" for e in log) and any(e[0] == "malloc" for e in log)


def test_no_allocation_per_chunk_after_the_first_pass(small):
    _, unit = _streamed_fit(small, "numba", epochs=4)
    stats = unit.stats
    assert len(stats.by_pass) >= 4 and stats.by_pass[0] > 0
    assert sum(stats.by_pass[1:]) == 0  # slots and results sized once: nothing per chunk
    assert stats.launches >= 4 * 4 and stats.host_seconds > 0
    assert "0 of them after the first pass" in stats.summary()


def test_the_pool_limit_is_the_budget(fake_cupy):
    backend = CupyBackend(fake_cupy)
    backend.use(0)
    backend.set_limit(1000)
    a = backend.empty((10, 2), np.float64)
    assert a.shape == (10, 2) and backend.free_bytes() == 1 << 30
    with pytest.raises(ResourceError, match="capped at 1000 bytes .* cannot hold 1000 more"):
        backend.empty(125, np.float64)
    p = backend.pinned(5, np.int32)
    p[:] = 7
    assert p.dtype == np.int32 and p.sum() == 35


def test_numba_backend_basics():
    b = NumbaBackend()
    b.use(0)
    b.set_limit(10)  # not enforced by numba's allocator (the unit's own accounting is)
    s = b.stream()
    assert s.native is s.launch
    e = b.event()
    dst = b.empty(3, np.float64)
    b.h2d(dst, np.arange(3.0), s)
    e.record(s)
    e.wait(s)
    e.synchronize()
    out = np.zeros(3)
    b.d2h(out, dst, s)
    s.synchronize()
    assert out.tolist() == [0.0, 1.0, 2.0] and b.free_bytes() > 0


def test_choosing_a_backend(monkeypatch):
    monkeypatch.delenv(gpu_backend.ENV, raising=False)
    assert isinstance(choose_backend(), NumbaBackend)  # the simulator: never CuPy
    assert isinstance(choose_backend("numba"), NumbaBackend)
    with pytest.raises(ResourceError, match="CuPy is not installed"):
        choose_backend("cupy")  # CuPy cannot be installed here
    monkeypatch.setenv(gpu_backend.ENV, "cupy")
    with pytest.raises(ResourceError, match="'cupy' was requested"):
        choose_backend()
    with pytest.raises(ValueError, match="'auto', 'cupy' or 'numba'; got 'rocm'"):
        choose_backend("rocm")


def test_kept_device_data_fits_by_capacity_and_dtypes():
    from snapfit.gpu.data import DeviceChunk, DevicePiece

    dt = {"indptr": np.int64, "indices": np.int32, "values": np.float32, "y": np.float32,
          "weight": None, "sqnorm": np.float32, "alpha": np.float64, "rows": np.int32}  # fmt: skip
    b = NumbaBackend()
    for kind in (DevicePiece, DeviceChunk):
        data = kind.allocate(4, 10, dt, b.empty)
        assert data.fits(4, 10, dt) and data.fits(3, 9, dt)
        assert not data.fits(5, 10, dt) and not data.fits(4, 11, dt)
        assert not data.fits(4, 10, dt | {"weight": np.float32})  # a weight array it lacks
        assert not data.fits(4, 10, dt | {"values": np.float64})
    assert not DeviceChunk.allocate(4, 10, dt, b.empty).fits(4, 10, dt | {"indptr": np.int32})
