"""Per-row solver state that outlives a chunk: packed dual variables and row norms.

A streamed chunk comes and goes every epoch, but its rows' dual variables (8 bytes/row) must
stay, and so should their exact squared norms (4 bytes/row; computing them needs a scratch pass
over the row). Both live in flat arrays indexed by ``offsets[k] + row``.

When they would not fit the memory budget they are *spilled* to a file in the temp dir and
accessed by ``pread`` / ``pwrite`` of one chunk's slice at a time (:class:`DiskArray`): the bytes
sit in the page cache, which the kernel may evict, never in this process's RSS. (A memory map was
used before; every page it touches counts in RSS until it is unmapped, so a 200M-row fit's 1.6 GB
of alpha crept into RSS through the pages at chunk edges and through checkpoints.)
"""

from __future__ import annotations

import os
import re
import socket
import tempfile

import numpy as np

from snapfit.data.fileio import preadv_all, pwrite_all
from snapfit.solvers import cpu


def temp_prefix(kind: str) -> str:
    """``snapfit-<kind>-<host>-<pid>-``: names a fit's temp directory by its process, so a
    later fit can tell the leftovers of a killed one (``snapfit.stream.cache.sweep_stale``)."""
    host = re.sub(r"[^A-Za-z0-9]", "_", socket.gethostname()) or "host"
    return f"snapfit-{kind}-{host}-{os.getpid()}-"


class DiskArray:
    """A flat 1-d array in a file, read and written by slices (``a[lo:hi]``, ``a[lo:hi] = x``).

    Reading a slice returns a fresh ndarray (a copy: writing into it changes nothing on disk).
    Only what :class:`DualState` and checkpoints need is supported: ``len``, ``dtype``,
    contiguous slices, and :meth:`read_into` / :meth:`write` for chosen buffers.
    """

    def __init__(self, path: str, n: int, dtype):
        self.path = path
        self.dtype = np.dtype(dtype)
        self.shape = (int(n),)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.ftruncate(self._fd, self.nbytes)  # sparse: reads of untouched parts give zeros

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return len(self) * self.itemsize

    def _range(self, key) -> tuple[int, int]:
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("a DiskArray takes contiguous slices only, e.g. a[lo:hi]")
        lo, hi, _ = key.indices(len(self))
        return lo, max(lo, hi)

    def read_into(self, lo: int, out: np.ndarray) -> None:
        """Fill ``out`` with elements ``[lo, lo + len(out))``."""
        off = lo * self.itemsize

        def fail(e: OSError | None) -> str:
            why = "short read (file truncated?)" if e is None else e.strerror
            return f"{self.path}: reading spilled dual variables from byte {off}: {why}"

        preadv_all(self._fd, [out], off, fail)

    def write(self, lo: int, data: np.ndarray) -> None:
        """Store ``data`` as elements ``[lo, lo + len(data))``."""
        pwrite_all(
            self._fd,
            np.ascontiguousarray(data, dtype=self.dtype),
            lo * self.itemsize,
            lambda e: (
                f"{self.path}: cannot write spilled dual variables ({e.strerror}); free "
                "disk space or set SNAPFIT_TMPDIR."
            ),
        )

    def __getitem__(self, key) -> np.ndarray:
        lo, hi = self._range(key)
        out = np.empty(hi - lo, self.dtype)
        self.read_into(lo, out)
        return out

    def __setitem__(self, key, value) -> None:
        lo, hi = self._range(key)
        data = np.broadcast_to(np.asarray(value, dtype=self.dtype), (hi - lo,))
        self.write(lo, data)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class DualState:
    """``alpha`` (packed, float64) and ``sqnorm`` (float32) for every row of every chunk.

    Parameters
    ----------
    chunk_rows : list of int
    spill_dir : str, optional
        Keep the arrays in files there (:class:`DiskArray`) instead of memory. Chunk ``k``'s
        slice is then read on its first ``alpha_of(k)`` / ``sqnorm_of(k)`` of a pass and written
        back by ``release(k)``: only the chunks in flight are in memory.
    with_sqnorm : bool
        False when the source delivers each chunk's norms itself (``snapfit.stream``): no
        ``sqnorm`` array is kept, and ``nbytes_per_row`` is 8.
    width : int
        Dual variables per row: K for one-vs-rest over K classes (``snapfit.solvers.ovr``;
        ``alpha_of`` is then ``(rows, K)``), else 1. Row offsets stay in rows.
    """

    def __init__(self, chunk_rows: list[int], spill_dir: str | None = None, *, with_sqnorm=True,
                 width: int = 1):  # fmt: skip
        self.width = int(width)
        self.offsets = np.zeros(len(chunk_rows) + 1, dtype=np.int64)
        np.cumsum(chunk_rows, out=self.offsets[1:])
        n = int(self.offsets[-1])
        self._spill = None
        self._out: dict[int, np.ndarray] = {}  # spilled: chunk -> its alpha, checked out
        self._out_sq: dict[int, np.ndarray] = {}
        m = n if with_sqnorm else 0
        na = n * self.width
        if spill_dir is None:
            self.alpha = np.zeros(na, dtype=np.float64)
            self.sqnorm = np.zeros(m, dtype=np.float32)
        else:
            # Deleted on close; the name exists only while the fit runs.
            self._spill = tempfile.TemporaryDirectory(prefix=temp_prefix("dual"), dir=spill_dir)
            self.alpha = DiskArray(os.path.join(self._spill.name, "alpha.f64"), na, np.float64)
            self.sqnorm = DiskArray(os.path.join(self._spill.name, "sqnorm.f32"), m, np.float32)
        self.has_sqnorm = np.zeros(len(chunk_rows), dtype=bool)

    @property
    def spilled(self) -> bool:
        """True when the dual variables live in a file (outside the budget)."""
        return self._spill is not None

    @property
    def n_rows(self) -> int:
        return int(self.offsets[-1])

    @staticmethod
    def nbytes_per_row(with_sqnorm: bool = True, width: int = 1) -> int:
        return 8 * width + (4 if with_sqnorm else 0)

    def read_alpha(self, lo: int, out: np.ndarray) -> None:
        """Copy alpha of the rows from row ``lo`` on into ``out`` (all its entries; ``width``
        per row, spilled or not)."""
        flat = out.reshape(-1)  # a view: ``out`` is contiguous
        lo *= self.width
        if self._spill is None:
            flat[:] = self.alpha[lo : lo + len(flat)]
        else:
            self.alpha.read_into(lo, flat)

    def write_alpha(self, lo: int, data: np.ndarray) -> None:
        """Store ``data`` (all its entries, ``width`` per row) as alpha from row ``lo`` on."""
        flat = np.ascontiguousarray(data).reshape(-1)
        lo *= self.width
        if self._spill is None:
            self.alpha[lo : lo + len(flat)] = flat
        else:
            self.alpha.write(lo, flat)

    def alpha_of(self, k: int) -> np.ndarray:
        lo, hi = int(self.offsets[k]) * self.width, int(self.offsets[k + 1]) * self.width
        if self._spill is None:
            out = self.alpha[lo:hi]
        else:
            out = self._out.get(k)
            if out is None:  # the parts of a split chunk share one copy; dict ops are atomic
                out = self._out.setdefault(k, self.alpha[lo:hi])
        return out if self.width == 1 else out.reshape(-1, self.width)

    @property
    def lazy_norms(self) -> bool:
        """True when some chunk's norms are still to be computed here, in memory (a
        ``fill_sqnorm`` pass can do them all at once)."""
        return self._spill is None and len(self.sqnorm) > 0 and not self.has_sqnorm.all()

    def fill_sqnorm(self, k: int, chunk, lo: int, hi: int) -> None:
        """Norms of rows ``[lo, hi)`` of chunk ``k`` (in memory; the caller marks the chunk
        done once all its rows are: ``has_sqnorm``)."""
        off = int(self.offsets[k])
        cpu.row_sqnorms(*cpu.chunk_args(chunk, lo, hi)[:4], self.sqnorm[off + lo : off + hi])

    def sqnorm_of(self, k: int, chunk) -> np.ndarray:
        """Row norms of chunk ``k``, computed on first use."""
        lo, hi = int(self.offsets[k]), int(self.offsets[k + 1])
        if self._spill is None:
            out = self.sqnorm[lo:hi]
        else:
            out = self._out_sq.get(k)
            if out is None:
                out = self._out_sq.setdefault(
                    k, self.sqnorm[lo:hi] if self.has_sqnorm[k] else np.zeros(hi - lo, np.float32)
                )
        if not self.has_sqnorm[k]:
            values = chunk.values if chunk.values is not None else cpu.EMPTY_F32
            cpu.row_sqnorms(chunk.indptr, chunk.indices, values, chunk.values is not None, out)
            if self._spill is not None:
                self.sqnorm.write(lo, out)
            self.has_sqnorm[k] = True
        return out

    def release(self, k: int) -> None:
        """Chunk ``k`` is done for now: a spilled state writes its alpha back and forgets it."""
        if self._spill is None:
            return
        alpha = self._out.pop(k, None)
        if alpha is not None:
            self.alpha.write(int(self.offsets[k]) * self.width, alpha)
        self._out_sq.pop(k, None)

    def close(self) -> None:
        if self._spill is not None:
            self.alpha.close()
            self.sqnorm.close()
            self._spill.cleanup()
            self._spill = None
