"""Positional file I/O to the end of a buffer: the one loop around ``pwrite`` and ``preadv``.

``os.pwrite`` may write less than asked (a signal, a full pipe; rarely for files) and must be
repeated until the whole view is written; ``os.preadv`` returns fewer bytes only at the end of
the file, which for snapfit's own temp files means the file was cut. The caller words the error
(it knows which file and which rows) through ``fail``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from snapfit.errors import ResourceError


def pwrite_all(fd: int, data, off: int, fail: Callable[[OSError], str]) -> None:
    """Write all of ``data`` (a buffer) at byte ``off``; ``ResourceError(fail(e))`` on error."""
    view = memoryview(data).cast("B")
    while len(view):
        try:
            n = os.pwrite(fd, view, off)
        except OSError as e:
            raise ResourceError(fail(e)) from None
        view, off = view[n:], off + n


def preadv_all(fd: int, buffers: Sequence, off: int, fail: Callable[[OSError | None], str]) -> None:
    """Fill ``buffers`` in order from byte ``off``; ``ResourceError(fail(e))`` on an error, and
    ``fail(None)`` when the file ends first."""
    views = [memoryview(b).cast("B") for b in buffers]
    while views:
        try:
            n = os.preadv(fd, views, off)
        except OSError as e:
            raise ResourceError(fail(e)) from None
        if n <= 0:
            raise ResourceError(fail(None))
        off += n
        while views and n >= len(views[0]):
            n -= len(views[0])
            views.pop(0)
        if views:
            views[0] = views[0][n:]
