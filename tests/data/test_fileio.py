"""The one positional read / write loop: whole buffers, errors worded by the caller."""

import os

import numpy as np
import pytest

from snapfit.data.fileio import preadv_all, pwrite_all
from snapfit.errors import ResourceError


def test_write_then_read_back_across_buffers(tmp_path):
    fd = os.open(tmp_path / "f.bin", os.O_RDWR | os.O_CREAT)
    try:
        data = np.arange(1000, dtype=np.int64)
        pwrite_all(fd, data, 16, lambda e: "write")
        a, b = np.empty(3, np.int64), np.empty(997, np.int64)
        preadv_all(fd, [a, b], 16, lambda e: "read")
        np.testing.assert_array_equal(np.r_[a, b], data)
        with pytest.raises(ResourceError, match="^cut at the end$"):
            preadv_all(fd, [np.empty(10, np.int64)], 16 + 8 * 995,
                       lambda e: "cut at the end" if e is None else "error")  # fmt: skip
    finally:
        os.close(fd)
    with pytest.raises(ResourceError, match="bad fd: Bad file descriptor"):
        pwrite_all(-1, data, 0, lambda e: f"bad fd: {e.strerror}")
    with pytest.raises(ResourceError, match="bad fd: Bad file descriptor"):
        preadv_all(-1, [a], 0, lambda e: f"bad fd: {e.strerror}")
