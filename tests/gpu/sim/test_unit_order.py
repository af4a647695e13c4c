"""What the first real GPU runs would have got wrong, checked under the simulator: residents
admitted by an exact pass and their row norms, the CUDA stream every copy and launch of a unit
is issued on, and stalls that must fail instead of hanging."""

import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from snapfit.engine import Devices, InMemorySource
from snapfit.engine.loop import run_epochs
from snapfit.errors import StallError
from snapfit.gpu import interop
from snapfit.gpu import unit as gpu_unit
from snapfit.gpu.backend import CupyBackend, NumbaBackend
from snapfit.gpu.data import chunk_device_bytes
from snapfit.solvers import cpu
from snapfit.train import make_trainer
from tests.gpu.sim.conftest import SIM_GPU, gpu_devices, split_chunks
from tests.gpu.sim.fake_cupy import FakeCupy
from tests.gpu.sim.test_interop import FakeCupyCSR


class PoisonedBackend(NumbaBackend):
    """New device memory full of NaN, as a real allocator hands back whatever a freed block
    held: a buffer read before it is written shows."""

    def empty(self, shape, dtype):
        a = super().empty(shape, dtype)
        fill = np.nan if np.dtype(dtype).kind == "f" else -7
        a.copy_to_device(np.full(a.shape, fill, dtype=a.dtype))
        return a


def _true_sqnorms(chunk) -> np.ndarray:
    out = np.zeros(chunk.n_rows, np.float32)
    cpu.row_sqnorms(*cpu.chunk_args(chunk)[:4], out)
    return out


def test_residents_admitted_beside_an_exact_pass_hold_their_row_norms(small):
    """GPU + one CPU thread without rebalancing, an exact pass after every epoch (as ``confirm``
    runs one): every chunk resident on the GPU holds the rows' true norms. The exact pass used
    to admit a resident without its norms, read uninitialized by every later pass."""
    X, y, w, problem, _ = small
    chunks = split_chunks(X, y, w, 8)
    devices = Devices(1, (0,), dict(SIM_GPU, backend=PoisonedBackend()), rebalance=False)
    tr = make_trainer(InMemorySource(chunks, 12), problem, devices)
    try:
        unit = tr.units[0]
        seen = set()
        for _ in range(3):
            tr.run_epoch()
            tr.exact_objective()
            for k, dc in unit.resident.items():
                got = dc.sqnorm.copy_to_host()[: chunks[k].n_rows]
                np.testing.assert_allclose(got, _true_sqnorms(chunks[k]), rtol=1e-6, err_msg=k)
                seen.add(k)
            assert np.isfinite(tr.w).all()
        assert seen  # the GPU kept chunks resident
    finally:
        tr.close()


class Recording(CupyBackend):
    """CuPy's backend (on the stand-in) that records the stream of every copy, memset and
    launch the unit issues."""

    def __init__(self, cupy):
        super().__init__(cupy)
        self.ops: list[tuple[str, object]] = []

    def h2d(self, dst, src, stream):
        self.ops.append(("h2d", stream))
        super().h2d(dst, src, stream)

    def d2h(self, dst, src, stream):
        self.ops.append(("d2h", stream))
        super().d2h(dst, src, stream)

    def d2d(self, dst, src, stream):
        self.ops.append(("d2d", stream))
        super().d2d(dst, src, stream)

    def zero(self, dst, stream):
        self.ops.append(("zero", stream))
        super().zero(dst, stream)

    def launch(self, kernel, blocks, block, stream):
        self.ops.append(("launch", stream))
        return super().launch(kernel, blocks, block, stream)


def _on_unit_streams(backend, unit) -> set:
    """The kinds of operation recorded; asserts each was on one of ``unit``'s two streams."""
    mine = {id(unit.copy_stream), id(unit.compute_stream)}
    assert backend.ops
    for kind, stream in backend.ops:
        assert id(stream) in mine, (kind, stream)
        assert stream.native.ptr != 1 and stream.native.non_blocking  # never the legacy stream
    return {kind for kind, _ in backend.ops}


def test_every_copy_and_launch_of_a_unit_is_on_its_own_streams(small):
    """Through slots, residents, exact passes and a warm start from ``w0`` on device input,
    each copy and kernel goes on the unit's copy or compute stream: a copy left on a buffer's
    own stream (CuPy exports the legacy default stream) is not ordered with them."""
    X, y, w, problem, _ = small
    chunks = split_chunks(X, y, w, 16)
    nbytes = [chunk_device_bytes(c.n_rows, c.nnz, True, True) for c in chunks]
    budget = 8 * 13 + 4 * 12 + 2 * max(nbytes) + min(nbytes)  # slots and one resident
    backend = Recording(FakeCupy())
    tr = make_trainer(InMemorySource(chunks, 12), problem,
                      gpu_devices(budget=budget, backend=backend))  # fmt: skip
    try:
        result = run_epochs(tr, problem)
        unit = tr.units[0]
        assert result.converged and 1 <= len(unit.resident) < len(chunks)
        assert _on_unit_streams(backend, unit) >= {"h2d", "d2h", "zero", "launch"}
    finally:
        tr.close()

    backend = Recording(FakeCupy())
    chunk, d = interop.device_chunk(FakeCupyCSR(X), y, w, block=16)
    tr = make_trainer(interop.DeviceSource([chunk], d), problem,
                      gpu_devices(backend=backend))  # fmt: skip
    try:
        run_epochs(tr, problem)
        w_end = tr.w.copy()
        tr.warm_start(w_end)
        unit = tr.units[0]
        w0 = unit._w0
        tr.warm_start(w_end)  # a second warm start reuses the w0 the kernels read
        assert w0 is not None and unit._w0 is w0
        np.testing.assert_allclose(tr.w, w_end, atol=1e-4)  # w(alpha) of margins at w_end
        assert _on_unit_streams(backend, unit) >= {"h2d", "d2h", "zero", "launch"}
    finally:
        tr.close()


def test_the_unit_makes_no_copy_or_launch_outside_its_backend():
    """The unit's module calls no numba copy, memset or kernel launch itself: each goes through
    the backend, which takes the stream it is to be ordered on."""
    src = Path(gpu_unit.__file__).read_text()
    for call in ("copy_to_device(", "copy_to_host(", "device_memset(", "].launch]"):
        assert call not in src, call
    assert "kernels.cd_pass[" not in src and "kernels.chunk_objective[" not in src


class NeverDone:
    """An event whose work never completes (a stuck GPU)."""

    def record(self, stream):
        pass

    def done(self):
        return False

    def synchronize(self, what="an event"):
        from snapfit.gpu.backend import _Event

        _Event.synchronize(self, what)


def test_a_gpu_that_never_completes_is_a_stall_error_naming_the_unit(small, monkeypatch):
    """The unit's waits on its CUDA events and streams poll with a deadline: a GPU that never
    completes is a ``StallError`` naming the GPU, its backend and what it waited for."""
    X, y, w, problem, _ = small
    tr = make_trainer(InMemorySource(split_chunks(X, y, w, 16), 12), problem, gpu_devices())
    unit = tr.units[0]
    try:
        tr.run_epoch()
        monkeypatch.setenv("SNAPFIT_STALL_TIMEOUT", "0.2")
        slot = unit.slots[0]
        real_done, slot.done, slot.item = slot.done, NeverDone(), SimpleNamespace(k=7)
        with pytest.raises(
            StallError, match=r"^GPU 0 \(numba/simulator\): the kernels of an item of chunk 7"
        ):
            unit._complete(slot)
        slot.done = real_done
        unit.compute_stream.marker = NeverDone()
        unit.on_device.add(0)
        with pytest.raises(StallError, match=r"^GPU 0 .*: chunk 0's alpha to the host did not"):
            unit.sync_alpha(tr.state.alpha_of)
    finally:
        unit.compute_stream.marker = unit.backend.event()
        monkeypatch.delenv("SNAPFIT_STALL_TIMEOUT")
        tr.close()


def test_a_unit_thread_that_never_returns_is_a_stall_error(small, monkeypatch):
    """Host waits on unit threads end too: a thread stuck in its work fails the call naming the
    unit and the operation, and the trainer still closes."""
    X, y, w, problem, _ = small
    monkeypatch.setenv("SNAPFIT_STALL_TIMEOUT", "0.3")
    tr = make_trainer(InMemorySource(split_chunks(X, y, w, 16), 12), problem,
                      gpu_devices(n_cpu=1))  # fmt: skip
    release = threading.Event()
    unit = tr.units[0]
    real_run = unit.run

    def stuck(*args, **kwargs):
        release.wait(30)
        return real_run(*args, **kwargs)

    try:
        unit.run = stuck
        with pytest.raises(StallError, match="snapfit-gpu-0: no item of the pass completed"):
            tr.run_epoch()
        assert tr._group.stuck
        with pytest.raises(StallError, match="stalled earlier"):
            tr._group.call(0, lambda: None)
    finally:
        release.set()
        tr.close()


def test_numba_events_are_asked_whether_they_completed():
    """A real numba event has ``query()`` (``cuEventQuery``), polled against the deadline; the
    simulator's has none and its work completed at launch."""
    from snapfit.gpu.backend import _NumbaEvent

    calls = []
    real = SimpleNamespace(query=lambda: calls.append(1) or len(calls) > 2)
    _NumbaEvent(real).synchronize("three queries")
    assert len(calls) == 3
    assert _NumbaEvent(SimpleNamespace(synchronize=lambda: None)).done() is None
