"""Per-thread views of ``w`` whose head is one memory and whose tail is each thread's own.

Threads sharing ``w`` (``snapfit.engine.shared``) read and write the cold coordinates in one
place and the hot ones in private copies. If each thread's ``w`` is an array whose first
``n_shared`` entries are the *same physical pages* in every thread and whose last ``n_private``
entries are its own, the solver's plain loop (``w[j]``, one load per entry) does both, and a
row may go to any thread. The pages are shared by mapping one memory file (``memfd``, or a
temporary file where there is none) at the head of each view, ``MAP_FIXED`` into a reserved
private anonymous range; the tails stay private.

The shared head lives on 4 KB pages (shared memory gets no transparent huge pages unless the
machine enables them for shmem); for an 8 MB ``w`` of 2^20 features its pages fit the second-
level TLB, and two threads' passes over 4M Criteo-40 rows measured as fast as on private
numpy views (``docs/threads.md``).

The mapping is freed when the last array over it goes away: every view holds a reference to
its owner, so a slice of a view kept after the fit cannot outlive the memory it points to.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import tempfile

import numpy as np

from snapfit.errors import ResourceError

_MAP_FIXED = 0x10  # the same on Linux, macOS and the BSDs; Python's mmap module lacks it
_FAILED = ctypes.c_void_p(-1).value


def _libc():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mmap_ = libc.mmap
        munmap = libc.munmap
    except (OSError, AttributeError) as exc:
        raise ResourceError(
            "threads sharing w need POSIX memory mappings, which this platform lacks; use "
            "deterministic=True (CoCoA+ threads)"
        ) from exc
    mmap_.restype = ctypes.c_void_p
    mmap_.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]  # fmt: skip
    munmap.restype = ctypes.c_int
    munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return mmap_, munmap


def page_entries() -> int:
    """float64 entries per memory page: the shared head is a whole number of pages."""
    return mmap.PAGESIZE // 8


def _memory_file(nbytes: int) -> int:
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("snapfit-w", 0)
    else:  # pragma: no cover - macOS and others: a temp file, RAM-backed where /dev/shm is
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        fd, path = tempfile.mkstemp(prefix="snapfit-w-", dir=shm)
        os.unlink(path)
    os.ftruncate(fd, nbytes)
    return fd


class _Mapping:
    """Owner of the reserved range and the memory file; unmapped when collected."""

    def __init__(self, addr: int, nbytes: int, fd: int, munmap):
        self.addr, self.nbytes, self.fd, self._munmap = addr, nbytes, fd, munmap

    def __del__(self):
        if self.addr:
            self._munmap(self.addr, self.nbytes)
            self.addr = 0
            try:
                os.close(self.fd)
            except (OSError, TypeError):  # pragma: no cover - interpreter shutdown
                pass


def aliased_views(n_shared: int, n_private: int, n_views: int) -> list[np.ndarray]:
    """``n_views`` zeroed float64 arrays of ``n_shared + n_private`` entries whose first
    ``n_shared`` entries are the same memory in all of them (``n_shared`` a multiple of
    ``page_entries()``) and whose last ``n_private`` are each view's own."""
    page = mmap.PAGESIZE
    head = n_shared * 8
    if head % page:
        raise ValueError(f"the shared head ({n_shared} entries) is not whole {page}-byte pages")
    stride = head + -(-n_private * 8 // page) * page
    mmap_, munmap = _libc()
    fd = _memory_file(max(head, page))
    rw = mmap.PROT_READ | mmap.PROT_WRITE
    addr = mmap_(None, stride * n_views, rw, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if addr in (None, _FAILED):
        os.close(fd)
        raise MemoryError(f"cannot reserve {stride * n_views} bytes for the threads' views of w")
    owner = _Mapping(addr, stride * n_views, fd, munmap)
    if head:
        for t in range(n_views):
            at = mmap_(addr + t * stride, head, rw, mmap.MAP_SHARED | _MAP_FIXED, fd, 0)
            if at != addr + t * stride:
                raise MemoryError(f"cannot map the shared head of view {t} ({head} bytes)")
    n = n_shared + n_private

    class _Buf(ctypes.c_double * n):
        pass

    views = []
    for t in range(n_views):
        buf = _Buf.from_address(addr + t * stride)
        buf.owner = owner  # every array over the mapping keeps it alive
        views.append(np.ctypeslib.as_array(buf))
    return views
