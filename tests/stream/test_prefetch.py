"""Reader threads: chunks come out in order whoever read them, within the pool's buffers."""

import threading
import time

import numpy as np
import pytest

from snapfit.errors import ResourceError
from snapfit.stream.prefetch import BufferPool, Prefetcher

GUARD_S = 120


@pytest.mark.parametrize("n_readers", [1, 2, 3])
def test_chunks_come_in_order_and_never_hold_more_buffers_than_the_pool(n_readers):
    rng = np.random.default_rng(n_readers)
    order = [int(k) for k in rng.permutation(40)]
    delays = rng.random(40) * 0.004
    pool = BufferPool(3, 64)
    lock = threading.Lock()
    held, peak, readers = set(), [0], set()
    # The first n_readers chunks wait for each other: every reader thread reads one, whatever
    # the machine's scheduling (GUARD_S only guards against a hang).
    everyone = threading.Barrier(n_readers)

    def read(k, buf):
        with lock:
            held.add(k)
            peak[0] = max(peak[0], len(held))
            readers.add(threading.current_thread().name)
        if k in order[:n_readers]:
            everyone.wait(GUARD_S)
        time.sleep(delays[k])  # chunks finish out of order; nothing below depends on it
        buf[:8] = k
        return k, buf

    pf = Prefetcher(order, pool, read, n_readers=n_readers)
    try:
        for k in order:
            got, buf = pf.get(k)
            assert got == k and buf[0] == k % 256
            with lock:
                held.discard(k)
            pool.release(k)
    finally:
        pf.close()
    assert peak[0] <= 3  # in flight: at most the pool's buffers
    assert len(readers) == n_readers


def test_a_readers_error_reaches_the_consumer_and_order_is_enforced():
    def read(k, buf):
        if k == 3:
            raise OSError("disk gone")
        return k

    pf = Prefetcher([0, 1, 2, 3], BufferPool(2, 8), read, n_readers=2)
    try:
        with pytest.raises(ResourceError, match="out of the epoch's order"):
            pf.get(1)
        with pytest.raises(OSError, match="disk gone"):  # by chunk 3 at the latest
            for k in range(4):
                assert pf.get(k) == k
                pf.pool.release(k)
    finally:
        pf.close()
