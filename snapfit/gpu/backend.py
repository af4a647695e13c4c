"""Who owns a GPU unit's device memory, pinned host buffers, CUDA streams and events.

The kernels are numba-cuda (one scalar update shared with the CPU, tested under the simulator);
what they run on comes from a backend:

- ``CupyBackend``: CuPy owns it all when it is installed on a real GPU. Device memory comes
  from a ``cupy.cuda.MemoryPool`` capped at the unit's budget (the allocator enforces it, and
  its ``OutOfMemoryError`` becomes ``ResourceError``); pinned host buffers from
  ``cupy.cuda.alloc_pinned_memory``; streams are ``cupy.cuda.Stream(non_blocking=True)``, so
  they never serialize with the legacy default stream; events ``cupy.cuda.Event``. Each CuPy
  buffer is wrapped ONCE as a numba device array with ``sync=False`` (numba would otherwise
  synchronize on its stream at every launch) and each stream is handed to numba as an external
  stream, so launches and copies go where CuPy ordered them.
- ``NumbaBackend``: numba-cuda's own allocations and streams: a GPU without CuPy, and the CUDA
  simulator, where CuPy cannot run. CI runs ``CupyBackend`` too, on a stand-in for the few
  CuPy calls it makes (``tests/gpu/sim/fake_cupy.py``), so every line of it executes.

``choose_backend`` picks CuPy when it is importable on a real GPU, else numba; the ``backend``
GPU option or ``SNAPFIT_GPU_BACKEND=cupy|numba`` forces one.
"""

from __future__ import annotations

import os

import numpy as np
from numba import cuda
from numba.cuda.cudadrv.driver import device_memset

from snapfit.engine.waits import poll
from snapfit.errors import ResourceError
from snapfit.gpu.device import simulated

ENV = "SNAPFIT_GPU_BACKEND"


class Stream:
    """A CUDA stream as the backend owns it (``native``) and as numba kernels and copies take
    it (``launch``); the same object for numba. ``marker`` is an event of the backend's, recorded
    to wait for the stream with a deadline (CUDA's own stream sync has none)."""

    def __init__(self, native, launch, marker):
        self.native = native
        self.launch = launch
        self.marker = marker

    def synchronize(self, what: str = "a CUDA stream") -> None:
        """Wait for the work enqueued so far; ``StallError`` naming ``what`` past the stall
        timeout (``snapfit.engine.waits``)."""
        self.marker.record(self)
        self.marker.synchronize(what)


class Backend:
    """The contract: allocation, streams, events, async copies and free memory of one device.
    Subclasses implement every method below that has only a docstring."""

    name = "base"

    def use(self, device_id: int) -> None:
        """Make ``device_id`` current on the calling thread (for the backend and for numba)."""

    def empty(self, shape, dtype):
        """A numba device array (uninitialized)."""

    def pinned(self, n: int, dtype) -> np.ndarray:
        """A host array of ``n`` entries in page-locked memory (DMA-able, async copies)."""

    def stream(self) -> Stream:
        """A new CUDA stream."""

    def event(self):
        """An event with ``record(stream)``, ``wait(stream)`` and ``synchronize()``."""

    def free_bytes(self) -> float:
        """Device bytes this backend could still allocate."""

    def set_limit(self, nbytes: float) -> None:
        """Cap the device memory this backend allocates (the unit's budget)."""

    # Every copy, memset and launch of a unit goes through these, each on a stream the unit
    # names: a copy left to an array's own default stream (the legacy stream, for buffers CuPy
    # exports) is not ordered with the unit's non-blocking streams.
    def h2d(self, dst, src: np.ndarray, stream: Stream) -> None:
        """Host ``src`` (pinned, for the copy to be async) to device ``dst`` on ``stream``."""
        dst.copy_to_device(src, stream=stream.launch)

    def d2h(self, dst: np.ndarray, src, stream: Stream) -> None:
        """Device ``src`` to host ``dst`` on ``stream`` (complete after a sync of it)."""
        src.copy_to_host(dst, stream=stream.launch)

    def d2d(self, dst, src, stream: Stream) -> None:
        """Device ``src`` to device ``dst`` on ``stream``."""
        dst.copy_to_device(src, stream=stream.launch)

    def zero(self, dst, stream: Stream) -> None:
        """Device ``dst``'s bytes set to 0 on ``stream``."""
        device_memset(dst, 0, dst.nbytes, stream=stream.launch)

    def launch(self, kernel, blocks: int, block: int, stream: Stream):
        """``kernel`` configured for ``blocks`` x ``block`` threads on ``stream``."""
        return kernel[blocks, block, stream.launch]


class NumbaBackend(Backend):
    """numba-cuda's allocator and streams (a GPU without CuPy; the CUDA simulator)."""

    name = "numba"

    def use(self, device_id: int) -> None:
        cuda.select_device(device_id)

    def empty(self, shape, dtype):
        return cuda.device_array(shape, dtype=dtype)

    def pinned(self, n: int, dtype) -> np.ndarray:
        return cuda.pinned_array(n, dtype=dtype)

    def stream(self) -> Stream:
        s = cuda.stream()
        return Stream(s, s, self.event())

    def event(self):
        return _NumbaEvent(cuda.event())

    def free_bytes(self) -> float:
        return cuda.current_context().get_memory_info().free

    def set_limit(self, nbytes: float) -> None:
        """numba's allocator has no cap: the unit keeps within its budget by its own count
        (``data.check_budget``, DuHL's choice of residents)."""


class _Event:
    """A library's CUDA event behind one interface; the libraries differ in ``wait`` and in how
    an event is asked whether it completed (``done``; None where it cannot be asked: the
    simulator's events, whose work completed at launch)."""

    def __init__(self, event):
        self.event = event

    def record(self, stream: Stream) -> None:
        self.event.record(stream.native)

    def synchronize(self, what: str = "a CUDA event") -> None:
        """Wait until the work before the event completed, polling it so that a stuck GPU
        raises ``StallError`` naming ``what`` (CUDA's own wait has no deadline)."""
        if self.done() is None:
            self.event.synchronize()
        else:
            poll(self.done, what)


class _NumbaEvent(_Event):
    def wait(self, stream: Stream) -> None:
        self.event.wait(stream.native)

    def done(self) -> bool | None:
        query = getattr(self.event, "query", None)  # absent from the simulator's events
        return None if query is None else bool(query())


class CupyBackend(Backend):
    """CuPy's memory pool, pinned memory, streams and events; ``cupy`` is the module (passed in,
    so tests can give a stand-in)."""

    name = "cupy"

    def __init__(self, cupy):
        self.cp = cupy
        self.pool = cupy.cuda.MemoryPool()

    def use(self, device_id: int) -> None:
        self.cp.cuda.Device(device_id).use()
        cuda.select_device(device_id)  # numba's kernels then run in the same primary context

    def empty(self, shape, dtype):
        from snapfit.gpu.interop import as_device_array

        dtype = np.dtype(dtype)
        shape = tuple(np.atleast_1d(shape).tolist())
        nbytes = int(np.prod(shape)) * dtype.itemsize
        try:
            memptr = self.pool.malloc(nbytes)
        except self.cp.cuda.memory.OutOfMemoryError as e:
            raise ResourceError(
                f"the GPU memory pool, capped at {self.pool.get_limit()} bytes (the unit's "
                f"gpu_memory_budget and a margin), cannot hold {nbytes} more ({e}). Raise the "
                "budget or use smaller chunks (chunk_rows)."
            ) from e
        return as_device_array(self.cp.ndarray(shape, dtype, memptr=memptr), sync=False)

    def pinned(self, n: int, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        memory = self.cp.cuda.alloc_pinned_memory(max(n, 1) * dtype.itemsize)
        return np.frombuffer(memory, dtype, n)  # the array keeps ``memory`` alive

    def stream(self) -> Stream:
        s = self.cp.cuda.Stream(non_blocking=True)
        return Stream(s, _external_stream(s.ptr), self.event())

    def event(self):
        return _CupyEvent(self.cp.cuda.Event(disable_timing=True))

    def free_bytes(self) -> float:
        free, _ = self.cp.cuda.runtime.memGetInfo()
        return free + self.pool.free_bytes()  # the pool's cached blocks are ours to reuse

    def set_limit(self, nbytes: float) -> None:
        self.pool.set_limit(size=int(nbytes))


class _CupyEvent(_Event):
    def wait(self, stream: Stream) -> None:
        stream.native.wait_event(self.event)

    def done(self) -> bool | None:
        return bool(self.event.done)  # cudaEventQuery


def _external_stream(ptr: int):
    """A numba stream for a stream CuPy created (numba then neither owns nor syncs it)."""
    if simulated():
        return cuda.stream()  # the simulator has no external streams; its kernels run at launch
    return cuda.external_stream(ptr)  # pragma: no cover - needs a CUDA driver


def _import_cupy():
    try:
        import cupy
    except ImportError:
        return None
    return cupy  # pragma: no cover - CuPy installs only where CUDA does


def choose_backend(name: str | None = None) -> Backend:
    """``"cupy"``, ``"numba"``, or None: ``$SNAPFIT_GPU_BACKEND``, else ``"auto"`` (CuPy when it
    is importable and the GPU is real, numba otherwise)."""
    name = name or os.environ.get(ENV) or "auto"
    if name not in ("auto", "cupy", "numba"):
        raise ValueError(f"the GPU backend must be 'auto', 'cupy' or 'numba'; got {name!r}.")
    if name == "numba":
        return NumbaBackend()
    cupy = _import_cupy()
    if name == "cupy":
        if cupy is None:
            raise ResourceError(
                "the GPU backend 'cupy' was requested but CuPy is not installed; pip install "
                "'snapfit[gpu]', or use the 'numba' backend."
            )
        return CupyBackend(cupy)  # pragma: no cover - CuPy installs only where CUDA does
    if cupy is not None and not simulated():
        return CupyBackend(cupy)  # pragma: no cover - needs CuPy and a real GPU
    return NumbaBackend()


def backend_name(backend: Backend) -> str:
    """What diagnostics call it: ``cupy``, ``numba``, or ``numba/simulator``."""
    return backend.name + ("/simulator" if simulated() else "")
