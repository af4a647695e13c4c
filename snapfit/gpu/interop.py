"""Device arrays from other libraries, zero-copy: anything exposing ``__cuda_array_interface__``.

CuPy arrays, ``cupyx.scipy.sparse.csr_matrix`` (its ``data``, ``indices`` and ``indptr`` expose
the interface), PyTorch CUDA tensors and Numba device arrays are all wrapped with
``numba.cuda.as_cuda_array``, which shares their memory. Detection is by duck typing, so CuPy
need not be installed for snapfit to accept its arrays.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import cuda

from snapfit.data.chunk import Chunk
from snapfit.data.fingerprint import arrays_fingerprint
from snapfit.engine.source import InMemorySource
from snapfit.engine.state import DualState
from snapfit.gpu.data import DeviceChunk
from snapfit.solvers import gpu as kernels
from snapfit.solvers.cudasim import serial


def is_cuda_array(x) -> bool:
    return hasattr(x, "__cuda_array_interface__") or _is_simulated_array(x)


def _is_simulated_array(x) -> bool:
    if hasattr(cuda, "as_cuda_array"):  # pragma: no cover - real numba-cuda (checked by PTX run)
        return False
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    return isinstance(x, FakeCUDAArray)


class _HostView:
    """Holds an interface's owner alive while NumPy reads its memory (simulator only)."""

    def __init__(self, owner, iface):
        self.owner = owner
        keys = ("shape", "typestr", "data", "strides")
        self.__array_interface__ = {k: iface.get(k) for k in keys} | {"version": 3}


def as_device_array(x, *, sync: bool = True):
    """A Numba device array sharing ``x``'s memory (``numba.cuda.as_cuda_array``).

    ``sync=False`` for buffers wrapped once and launched on many times: numba would otherwise
    synchronize on the interface's stream at every launch. The CUDA simulator has no
    ``as_cuda_array``; its device memory is host memory, so there the
    interface's pointer is read through NumPy, still without a copy.
    """
    if hasattr(cuda, "as_cuda_array"):  # pragma: no cover - real numba-cuda, not the simulator
        return cuda.as_cuda_array(x, sync=sync)
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    if isinstance(x, FakeCUDAArray):
        return x
    return FakeCUDAArray(np.asarray(_HostView(x, x.__cuda_array_interface__)))


def array_module(x):
    """The library device input ``x`` comes from, by duck typing: its ``__array_namespace__()``
    (the Array API standard), else the top package of its type when that has ``asarray`` (CuPy,
    whose ``cupyx`` CSR matrices hold CuPy arrays). None for numba device arrays and bare
    ``__cuda_array_interface__`` objects, whose results go to the host."""
    a = x.data if is_cuda_csr(x) else x
    namespace = getattr(a, "__array_namespace__", None)
    if namespace is not None:
        return namespace()
    top = sys.modules.get(type(a).__module__.partition(".")[0])
    return top if hasattr(top, "asarray") else None


def like_input(x, out):
    """A result ``out`` (a device array) as ``x``'s library holds arrays: CuPy input gives a CuPy
    array sharing ``out``'s memory (``asarray`` reads ``__cuda_array_interface__``); other
    input a NumPy array on the host."""
    xp = array_module(x)
    return out.copy_to_host() if xp is None else xp.asarray(out)


def to_host(x) -> np.ndarray:
    """A small device vector (labels, weights) copied to the host; host input passes through.

    CuPy arrays expose ``__cuda_array_interface__`` too, so this one path serves them."""
    if is_cuda_array(x):
        return np.asarray(as_device_array(x).copy_to_host())
    return np.asarray(x)


def is_cuda_csr(x) -> bool:
    """A CSR matrix whose three arrays live on the device (e.g. ``cupyx.scipy.sparse``)."""
    return (
        getattr(x, "format", None) == "csr"
        and all(is_cuda_array(getattr(x, a, None)) for a in ("data", "indices", "indptr"))
        and len(getattr(x, "shape", ())) == 2
    )


def is_device_input(x) -> bool:
    return is_cuda_csr(x) or is_cuda_array(x)


def device_csr(X) -> tuple[tuple, tuple[int, int]]:
    """``((indptr, indices, values), shape)`` of ``X`` as Numba device arrays sharing memory.

    A dense 2-D device array becomes CSR with every entry stored: its values are a zero-copy
    view; the row pointers and column indices are generated (8 bytes/row + 4 bytes/entry).
    """
    if is_cuda_csr(X):
        arrays = tuple(as_device_array(getattr(X, a)) for a in ("indptr", "indices", "data"))
        return arrays, (int(X.shape[0]), int(X.shape[1]))
    if is_cuda_array(X):
        a = as_device_array(X)
        if a.ndim != 2 or not a.is_c_contiguous():
            raise ValueError(
                f"a dense device array must be 2-D and C-contiguous; got shape {a.shape}. "
                "Pass a CSR matrix (cupyx.scipy.sparse.csr_matrix) or a contiguous copy."
            )
        n, d = a.shape
        indptr = cuda.to_device(np.arange(0, n * d + 1, max(d, 1), dtype=np.int64)[: n + 1])
        indices = cuda.to_device(np.tile(np.arange(d, dtype=np.int32), n))
        return (indptr, indices, a.reshape(n * d)), (n, d)
    raise TypeError(
        f"expected an object with __cuda_array_interface__ or a device CSR matrix; got "
        f"{type(X).__name__}."
    )


def device_chunk(X, y_pm: np.ndarray, weight: np.ndarray | None, *, block: int = 128):
    """A ``DeviceChunk`` over ``X`` (zero-copy) with labels ``y_pm`` in {-1, +1} (float32) and
    optional per-row weights uploaded, and its exact row norms computed on the device."""
    (indptr, indices, values), (n, d) = device_csr(X)
    sq = cuda.device_array(n, dtype=np.float32)
    team = kernels.choose_team(indices.shape[0] / max(n, 1), block)
    grid = max(1, min(1024, -(-n // (block // team))))
    with serial:
        kernels.row_sqnorms[grid, block](indptr, indices, values, True, team, sq)
    chunk = DeviceChunk(
        indptr,
        indices,
        values,
        cuda.to_device(np.asarray(y_pm, dtype=np.float32)),
        None if weight is None else cuda.to_device(np.asarray(weight, dtype=np.float32)),
        sq,
        cuda.to_device(np.zeros(n)),
        cuda.device_array(n, dtype=np.int32),
        n,
        int(indices.shape[0]),
    )
    return chunk, d


class DeviceSource(InMemorySource):
    """A ``ChunkSource`` of chunks already on the device (GPU units only; never released).
    Their row norms are computed on the device (``device_chunk``), so the state keeps none."""

    device_resident = True

    def make_state(self, width: int = 1) -> DualState:
        return DualState([c.n_rows for c in self.chunks], with_sqnorm=False, width=width)

    def data_fingerprint(self) -> dict:
        """A hash of the chunks' arrays, copied to the host for it (checkpoints only)."""
        host = [Chunk(*(None if a is None else a[:m].copy_to_host()
                        for a, m in ((c.indptr, c.n_rows + 1), (c.indices, c.nnz),
                                     (c.values, c.nnz), (c.y, c.n_rows), (c.weight, c.n_rows))))
                for c in self.chunks]  # fmt: skip
        return arrays_fingerprint(host)


def decision_function(X, coef: np.ndarray, intercept: float, *, block: int = 128, to_host=True):
    """``X @ coef + intercept`` for device input ``X``; a NumPy array, or with ``to_host=False``
    a device array (which CuPy wraps zero-copy with ``cupy.asarray``)."""
    (indptr, indices, values), (n, d) = device_csr(X)
    if d != len(coef):
        raise ValueError(f"X has {d} features, but the model was fitted with {len(coef)}.")
    out = cuda.device_array(n, dtype=np.float64)
    team = kernels.choose_team(indices.shape[0] / max(n, 1), block)
    grid = max(1, min(1024, -(-n // (block // team))))
    coef_d = cuda.to_device(np.ascontiguousarray(coef, np.float64))
    with serial:
        kernels.decision_function[grid, block](
            indptr, indices, values, True, coef_d, float(intercept), team, out
        )
    return out.copy_to_host() if to_host else out
