"""Data on the device: resident chunks and pieces, slots with pinned staging, DuHL.

A GPU keeps as many *pieces* resident as its memory budget allows, preferring those with the
largest duality gap per byte (DuHL: Duenner et al. 2017, "Efficient use of limited-memory
accelerators for linear learning on heterogeneous systems"); everything else is copied in
through ``n_slots`` (>= 2) slots. A fixed chunk is one piece and is kept whole (a
``DeviceChunk``, kernels run on it in place); the pieces of a re-dealing source are kept as
``DevicePiece`` data and copied device-to-device into the slot of whichever chunk holds them.

Each slot owns pinned host staging buffers and device buffers, sized once for the largest chunk
(``Slot.size_for``), so the steady state allocates nothing per chunk; all of it comes from the
unit's backend (``snapfit.gpu.backend``) through the ``alloc`` callables given here. The host
fills a slot's pinned buffers (a memcpy), the *copy* CUDA stream moves them to the device and
records the slot's ``copied`` event, the *compute* CUDA stream waits for that event, runs the
kernel, copies the updated ``alpha`` back into the slot's pinned buffer and records ``done``.
With two slots the copy of chunk i+1 runs while chunk i computes; a slot is refilled only after
its ``done`` event, at which point its returned ``alpha`` is written back into the host state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import cuda

from snapfit.errors import ResourceError

_EMPTY = {np.dtype(np.float32): None, np.dtype(np.float64): None}


def _empty(dtype) -> object:
    """A zero-length device array standing for an absent ``values`` / ``weight``."""
    dtype = np.dtype(dtype)
    if _EMPTY.get(dtype) is None:
        _EMPTY[dtype] = cuda.device_array(0, dtype=dtype)
    return _EMPTY[dtype]


def chunk_device_bytes(n_rows: int, nnz: int, has_values: bool, has_weight: bool,
                       width: int = 1) -> int:  # fmt: skip
    """Device bytes of a chunk with its per-row state (sqnorm 4, alpha 8, order 4 bytes/row;
    with ``width`` > 1, one-vs-rest's, alpha ``8 width`` and one problem's labels 4 more)."""
    per_row = 4 + 4 * has_weight + 8 + 8 * width + (4 if width > 1 else 0)
    return 8 * (n_rows + 1) + nnz * (4 + 4 * has_values) + n_rows * per_row


def piece_device_bytes(n_rows, nnz, has_values: bool, has_weight: bool):
    """Device bytes of a kept piece: its data and norms, no row pointers, alpha or order (a
    chunk's slot brings those). Works on arrays of sizes too."""
    return nnz * (4 + 4 * has_values) + n_rows * (8 + 4 * has_weight)


@dataclass
class DevicePiece:
    """A piece's rows kept on the device, to be copied into the slot of a chunk holding it."""

    indices: object
    values: object | None
    y: object
    weight: object | None
    sqnorm: object
    n_rows: int
    nnz: int

    @classmethod
    def allocate(cls, n_rows: int, nnz: int, dtypes: dict, alloc) -> DevicePiece:
        """``alloc(n, dtype)`` gives a device array (the unit's backend, counted)."""

        def arr(n, key):
            return alloc(max(n, 1), dtypes[key])

        return cls(
            arr(nnz, "indices"),
            arr(nnz, "values") if dtypes.get("values") is not None else None,
            arr(n_rows, "y"),
            arr(n_rows, "weight") if dtypes.get("weight") is not None else None,
            arr(n_rows, "sqnorm"),
            n_rows,
            nnz,
        )

    def fits(self, n_rows: int, nnz: int, dtypes: dict) -> bool:
        return _fits(self, n_rows, nnz, dtypes)


def _fits(arrays, n_rows: int, nnz: int, dtypes: dict) -> bool:
    """Whether device data of these arrays holds ``n_rows`` x ``nnz`` of ``dtypes``."""

    def same(a, key):
        want = dtypes.get(key)
        return (a is None) == (want is None) and (a is None or a.dtype == want)

    return (
        arrays.y.shape[0] >= n_rows
        and arrays.indices.shape[0] >= nnz
        and all(same(getattr(arrays, k), k) for k in ("values", "weight", "indices"))
    )


@dataclass
class DeviceChunk:
    """A chunk's arrays on the device, plus its rows' ``sqnorm``, packed ``alpha`` and a buffer
    for the visiting order. Arrays may be longer than the chunk (slots are sized for the
    largest chunk); ``args()`` gives the kernels views of the exact length."""

    indptr: object
    indices: object
    values: object | None
    y: object
    weight: object | None
    sqnorm: object
    alpha: object
    rows: object
    n_rows: int = 0
    nnz: int = 0
    #: one-vs-rest: the labels of the problem being run (``class_labels``), else None
    labels: object | None = None

    def alpha_of(self, k: int):
        """Problem ``k``'s ``alpha`` (one-vs-rest keeps a block of capacity per problem; all
        of it for one problem): the chunk's rows are its first entries."""
        cap = self.y.shape[0]
        return self.alpha[k * cap : (k + 1) * cap]

    def args(self) -> tuple:
        n, m = self.n_rows, self.nnz
        has_v = self.values is not None
        has_w = self.weight is not None
        return (
            self.indptr[: n + 1],
            self.indices[:m] if m else self.indices,
            self.values[:m] if has_v and m else (self.values if has_v else _empty(np.float32)),
            has_v,
            self.y[:n],
            self.weight[:n] if has_w else _empty(np.float32),
            has_w,
        )

    @classmethod
    def allocate(cls, n_rows: int, nnz: int, dtypes: dict, alloc, width: int = 1) -> DeviceChunk:
        """``alloc(n, dtype)`` gives a device array (the unit's backend, counted); ``width``
        problems' ``alpha`` (one-vs-rest), each a block of ``n_rows``."""

        def arr(n, key):
            return alloc(max(n, 1), dtypes[key])

        return cls(
            arr(n_rows + 1, "indptr"),
            arr(nnz, "indices"),
            arr(nnz, "values") if dtypes.get("values") is not None else None,
            arr(n_rows, "y"),
            arr(n_rows, "weight") if dtypes.get("weight") is not None else None,
            arr(n_rows, "sqnorm"),
            alloc(max(n_rows, 1) * width, dtypes["alpha"]),
            arr(n_rows, "rows"),
            n_rows,
            nnz,
            arr(n_rows, "y") if width > 1 else None,
        )

    def fits(self, n_rows: int, nnz: int, dtypes: dict) -> bool:
        return _fits(self, n_rows, nnz, dtypes) and self.indptr.dtype == dtypes["indptr"]


def host_dtypes(chunk) -> dict:
    return {
        "indptr": chunk.indptr.dtype,
        "indices": chunk.indices.dtype,
        "values": None if chunk.values is None else chunk.values.dtype,
        "y": chunk.y.dtype,
        "weight": None if chunk.weight is None else chunk.weight.dtype,
        "sqnorm": np.dtype(np.float32),
        "alpha": np.dtype(np.float64),
        "rows": np.dtype(np.int32),
    }


@dataclass
class Slot:
    """One slot: pinned staging buffers, device buffers and the two events. ``alloc(n, dtype)``
    gives a pinned host array; ``rows`` and ``nnz`` are the capacity set by ``size_for``."""

    alloc: object = None
    pinned: dict = field(default_factory=dict)
    device: DeviceChunk | None = None
    copied: object = None
    done: object = None
    # (host alpha array, lo, hi): rows [lo, hi) to write back from the pinned "alpha_out".
    writeback: tuple | None = None
    item: object = None  # the item whose work this slot holds until it is completed
    rows: int = 0
    nnz: int = 0

    def size_for(self, rows: int, nnz: int) -> None:
        """Buffers allocated from now on hold a chunk of ``rows`` x ``nnz`` (the largest)."""
        self.rows, self.nnz = max(self.rows, int(rows)), max(self.nnz, int(nnz))

    def capacity(self, key: str) -> int:
        return self.nnz if key in ("indices", "values") else self.rows + (key == "indptr")

    def staging(self, key: str, n: int, dtype) -> np.ndarray:
        """A pinned buffer of at least ``n`` entries of ``dtype``: allocated once at the slot's
        capacity, again only for a chunk beyond it."""
        buf = self.pinned.get(key)
        if buf is None or buf.shape[0] < n or buf.dtype != dtype:
            buf = self.alloc(max(n, self.capacity(key), 1), dtype)
            self.pinned[key] = buf
        return buf[:n]


def choose_residents(gaps, nbytes, budget: float) -> set[int]:
    """DuHL's choice: pieces by decreasing gap per byte, each kept if it still fits ``budget``
    bytes (ties, as when no gap is known yet, in piece order)."""
    nbytes = np.asarray(nbytes, dtype=np.float64)
    score = np.asarray(gaps, dtype=np.float64) / np.maximum(nbytes, 1.0)
    keep: set[int] = set()
    used = 0.0
    for k in np.argsort(-score, kind="stable"):
        if used + nbytes[k] <= budget:
            keep.add(int(k))
            used += nbytes[k]
    return keep


def check_budget(budget: float, fixed: int, largest: int, n_slots: int) -> None:
    """Raise ``ResourceError`` when ``budget`` cannot hold ``w`` and the slots."""
    need = fixed + n_slots * largest
    if budget < need:
        raise ResourceError(
            f"gpu_memory_budget={int(budget)} bytes cannot hold the model ({fixed} bytes) and "
            f"{n_slots} slots for the largest chunk ({largest} bytes each): at least "
            f"{need} bytes are needed. Raise the budget or use smaller chunks (chunk_rows)."
        )
