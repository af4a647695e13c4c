"""A stand-in for the few CuPy calls snapfit makes, on the CUDA simulator's memory (host RAM).

CuPy needs a CUDA driver, so CI cannot import it. ``CupyBackend`` takes the ``cupy`` module as
an argument; the tests give it ``FakeCupy()``, whose calls behave as CuPy's documented ones do
(a pool that refuses to grow past its limit, page-locked buffers as buffer-protocol objects,
streams with ``ptr`` and ``wait_event``) and are logged, so a test can check which were made.
Arrays carry ``__cuda_array_interface__`` and ``__array_namespace__`` and, as CuPy's, refuse
implicit conversion to NumPy. Only what snapfit uses is here.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np


class OutOfMemoryError(MemoryError):
    pass


class MemoryPointer:
    def __init__(self, nbytes: int):
        self.buffer = np.empty(max(nbytes, 1), np.uint8)
        self.ptr = self.buffer.ctypes.data


class MemoryPool:
    def __init__(self, log):
        self.log, self.limit, self.used = log, 0, 0

    def set_limit(self, size=None):
        self.log.append(("set_limit", size))
        self.limit = int(size)

    def get_limit(self):
        return self.limit

    def malloc(self, nbytes: int):
        if self.limit and self.used + nbytes > self.limit:
            raise OutOfMemoryError(f"Out of memory allocating {nbytes} bytes")
        self.used += nbytes
        self.log.append(("malloc", nbytes))
        return MemoryPointer(nbytes)

    def free_bytes(self):
        return 0  # blocks are never returned to this pool, so none are cached


class Stream:
    _next = 0x100  # handles are pointers: never 1 or 2 (the legacy and per-thread streams)

    def __init__(self, log, non_blocking=False):
        self.log, self.non_blocking = log, non_blocking
        self.ptr, Stream._next = Stream._next, Stream._next + 1
        log.append(("stream", non_blocking))

    def synchronize(self):
        self.log.append(("stream.synchronize", self.ptr))

    def wait_event(self, event):
        self.log.append(("wait_event", self.ptr, event.recorded_on))


class Event:
    def __init__(self, log, disable_timing=False):
        self.log, self.recorded_on = log, None
        log.append(("event", disable_timing))

    def record(self, stream=None):
        self.recorded_on = stream.ptr

    def synchronize(self):
        self.log.append(("event.synchronize", self.recorded_on))

    @property
    def done(self):
        """``cudaEventQuery``: the simulator's work completed at launch."""
        self.log.append(("event.done", self.recorded_on))
        return True


class ndarray:  # noqa: N801 - CuPy's name
    """Device memory stand-in: a NumPy array over a ``MemoryPointer``'s buffer."""

    def __init__(self, shape, dtype=float, memptr=None, *, host=None, module=None):
        if host is None:
            dtype = np.dtype(dtype)
            n = int(np.prod(shape))
            host = memptr.buffer[: n * dtype.itemsize].view(dtype).reshape(shape)
        self._host, self._module = host, module

    shape = property(lambda self: self._host.shape)
    dtype = property(lambda self: self._host.dtype)

    @property
    def __cuda_array_interface__(self):
        h = self._host
        return {"shape": h.shape, "typestr": h.dtype.str, "data": (h.ctypes.data, False),
                "strides": None if h.flags.c_contiguous else h.strides, "version": 3,
                "stream": 1}  # fmt: skip

    def __array_namespace__(self, api_version=None):
        return self._module

    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Use .get().")

    def get(self):
        return self._host.copy()

    def _op(self, f, *others):
        vals = [o._host if isinstance(o, ndarray) else o for o in others]
        return ndarray(None, host=np.asarray(f(self._host, *vals)), module=self._module)

    def __neg__(self):
        return self._op(np.negative)

    def __rsub__(self, other):
        return self._op(lambda a, b: b - a, other)

    def __radd__(self, other):
        return self._op(np.add, other)

    def __rtruediv__(self, other):
        return self._op(lambda a, b: b / a, other)

    def __gt__(self, other):
        return self._op(np.greater, other)


class FakeCupy:
    """The module: ``cupy.cuda.*``, ``ndarray``, ``asarray``, ``exp``, ``logaddexp``,
    ``stack``; every CUDA call logged in ``log``."""

    def __init__(self, free=1 << 30, total=1 << 31):
        self.log = log = []
        self.cuda = SimpleNamespace(
            MemoryPool=lambda: MemoryPool(log),
            memory=SimpleNamespace(OutOfMemoryError=OutOfMemoryError),
            alloc_pinned_memory=self._pinned,
            Stream=lambda non_blocking=False: Stream(log, non_blocking),
            Event=lambda disable_timing=False: Event(log, disable_timing),
            Device=lambda i: SimpleNamespace(use=lambda: log.append(("use", i))),
            runtime=SimpleNamespace(memGetInfo=lambda: (free, total)),
        )

    def _pinned(self, nbytes):
        self.log.append(("pinned", nbytes))
        return bytearray(nbytes)

    def ndarray(self, shape, dtype=float, memptr=None):
        return ndarray(shape, dtype, memptr, module=self)

    def asarray(self, x):
        """Zero-copy, as CuPy's: its own arrays, or a (simulated) numba device array."""
        if isinstance(x, ndarray):
            return x
        return ndarray(None, host=np.asarray(x), module=self)  # FakeCUDAArray: shared memory

    def exp(self, x):
        return x._op(np.exp)

    def logaddexp(self, a, x):
        return x._op(lambda h, v: np.logaddexp(v, h), a)

    def stack(self, arrays, axis=0):
        host = np.stack([a._host for a in arrays], axis=axis)
        return ndarray(None, host=host, module=self)
