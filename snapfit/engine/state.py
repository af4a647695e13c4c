"""Per-row solver state that outlives a chunk: packed dual variables and row norms.

A streamed chunk comes and goes every epoch, but its rows' dual variables (8 bytes/row) must
stay, and so should their exact squared norms (4 bytes/row; computing them needs a scratch pass
over the row). Both live in flat arrays indexed by ``offsets[k] + row``; when they would not fit
the memory budget they live in memory-mapped files instead.
"""

from __future__ import annotations

import mmap
import os
import tempfile

import numpy as np

from snapfit.solvers import cpu


class DualState:
    """``alpha`` (packed, float64) and ``sqnorm`` (float32) for every row of every chunk."""

    def __init__(self, chunk_rows: list[int], spill_dir: str | None = None):
        self.offsets = np.zeros(len(chunk_rows) + 1, dtype=np.int64)
        np.cumsum(chunk_rows, out=self.offsets[1:])
        n = int(self.offsets[-1])
        self._spill = None
        if spill_dir is None:
            self.alpha = np.zeros(n, dtype=np.float64)
            self.sqnorm = np.zeros(n, dtype=np.float32)
        else:
            # Deleted on close; the name exists only while the fit runs.
            self._spill = tempfile.TemporaryDirectory(prefix="snapfit-dual-", dir=spill_dir)
            self.alpha = np.lib.format.open_memmap(
                os.path.join(self._spill.name, "alpha.npy"), mode="w+", dtype=np.float64, shape=(n,)
            )
            self.sqnorm = np.lib.format.open_memmap(
                os.path.join(self._spill.name, "sqnorm.npy"),
                mode="w+",
                dtype=np.float32,
                shape=(n,),
            )
        self.has_sqnorm = np.zeros(len(chunk_rows), dtype=bool)

    @property
    def spilled(self) -> bool:
        """True when the dual variables live in a memory-mapped file (outside the budget)."""
        return self._spill is not None

    @property
    def n_rows(self) -> int:
        return int(self.offsets[-1])

    @staticmethod
    def nbytes_per_row() -> int:
        return 8 + 4

    def alpha_of(self, k: int) -> np.ndarray:
        return self.alpha[self.offsets[k] : self.offsets[k + 1]]

    def sqnorm_of(self, k: int, chunk, scratch) -> np.ndarray:
        """Row norms of chunk ``k``, computed on first use with a thread's ``scratch`` arrays."""
        out = self.sqnorm[self.offsets[k] : self.offsets[k + 1]]
        if not self.has_sqnorm[k]:
            acc, stamp = scratch
            values = chunk.values if chunk.values is not None else cpu.EMPTY_F32
            cpu.row_sqnorms(
                chunk.indptr, chunk.indices, values, chunk.values is not None, acc, stamp, out
            )
            self.has_sqnorm[k] = True
        return out

    def release(self, k: int) -> None:
        """Chunk ``k`` is done for now: let its spilled pages leave this process's RSS.

        For a shared file mapping ``MADV_DONTNEED`` only unmaps the pages; their contents stay
        in the page cache and the file, and come back on the next access. Without it every
        touched page of the memory map would stay counted in RSS until the fit ends.
        """
        if self._spill is None:
            return
        lo, hi = int(self.offsets[k]), int(self.offsets[k + 1])
        for arr in (self.alpha, self.sqnorm):
            _drop_pages(arr, lo * arr.itemsize, hi * arr.itemsize)

    def close(self) -> None:
        if self._spill is not None:
            del self.alpha, self.sqnorm
            self._spill.cleanup()
            self._spill = None


def _drop_pages(arr: np.memmap, start: int, stop: int) -> None:
    """``madvise(MADV_DONTNEED)`` on the whole pages inside bytes ``[start, stop)`` of ``arr``."""
    mm = getattr(arr, "_mmap", None)
    if mm is None or not hasattr(mmap, "MADV_DONTNEED"):
        return
    base = arr.offset  # the .npy header precedes the data in the mapping
    page = mmap.PAGESIZE
    lo = -(-(base + start) // page) * page
    hi = (base + stop) // page * page
    if hi > lo:
        mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
