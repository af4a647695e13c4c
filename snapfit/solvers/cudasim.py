"""What running under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) needs from snapfit.

The simulator runs every CUDA thread of a block as a Python thread. Two of its limits matter:

- It runs one kernel at a time in the whole process (its kernel context is a global), so the
  host threads of several GPU units take turns launching: ``serial`` (a no-op on a GPU).
- ``cuda.shared.array`` finds a block's shared array by a check-then-set on a dict with no
  lock (``FakeCUDAShared.array`` in numba-cuda 0.30, unchanged upstream as of July 2026). When
  the threads of a block start together on a loaded machine, two of them can both miss and
  each allocate its own "shared" array: the lanes of a team then read a step or a partial sum
  that lane 0 never wrote, and ``w`` takes updates its ``alpha`` never made (seen as
  ``w - w(alpha)`` jumping from 1e-15 to 1e-2, a fit that stops converging). ``lock_shared``
  makes that lookup atomic, keyed exactly as numba keys it (the calling file and line).

And two costs:

- Its barriers hand the GIL from thread to thread, so every ``syncthreads()`` waited out
  CPython's 5 ms switch interval (a pass ran ~7x slower; Dask worker processes, which never see
  a test's settings, ran the matrix tests' GPU cells at a seventh of the speed). ``install``
  shortens the interval for the process, as it only matters to simulated kernels.
- Its block manager finds a block's barrier by polling: one Python loop spinning over the
  block's threads, holding the GIL the threads need to reach the barrier. ``condition_barriers``
  replaces that loop with a condition variable the last thread to arrive signals, so the GIL
  goes only to threads with work to do. The semantics are numba's: a barrier opens when every
  thread of the block that has not returned is waiting at one; a thread's exception aborts the
  others at their next barrier and is raised by the launch.
"""

from __future__ import annotations

import os
import sys
import threading
from contextlib import nullcontext

import numpy as np


def simulated() -> bool:
    """True when Numba's CUDA simulator is enabled (it is chosen when numba.cuda is imported)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


#: Held around every kernel launch under the simulator (one kernel at a time per process).
serial = threading.Lock() if simulated() else nullcontext()


def install() -> None:
    """Everything above, once per process that imports the kernels under the simulator."""
    sys.setswitchinterval(SWITCH_INTERVAL)
    lock_shared()
    condition_barriers()


#: Seconds between GIL hand-offs under the simulator (CPython's default: 0.005).
SWITCH_INTERVAL = 1e-4


def lock_shared() -> None:
    """Make the simulator's shared-array allocation atomic (idempotent)."""
    import numpy as np
    from numba.core import types
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support

    fake = kernelapi.FakeCUDAShared
    if getattr(fake.array, "snapfit_locked", False):
        return
    static = fake.array
    lock = threading.Lock()

    def array(self, shape, dtype):
        if shape == 0:  # dynamic shared memory: one buffer, nothing to race on
            return static(self, shape, dtype)
        if isinstance(dtype, types.Type):
            dtype = numpy_support.as_dtype(dtype)
        frame = sys._getframe(1)
        caller = (frame.f_code.co_filename, frame.f_lineno)
        with lock:
            res = self._allocations.get(caller)
            if res is None:
                res = self._allocations[caller] = np.empty(shape, dtype)
        return res

    array.snapfit_locked = True
    array.unlocked = static  # numba's own, kept for the test that shows the race
    fake.array = array


class _Block:
    """One simulated block's barrier: threads not yet returned, threads waiting, and which
    opening of the barrier this is (a thread waits until it changes)."""

    def __init__(self, n_threads: int):
        self.cond = threading.Condition()
        self.live = n_threads
        self.waiting = 0
        self.opening = 0

    def open_if_all_wait(self) -> None:
        """Called holding ``cond``: let the waiting threads go once nobody else can arrive."""
        if self.waiting and self.waiting == self.live:
            self.waiting = 0
            self.opening += 1
            self.cond.notify_all()


def condition_barriers() -> None:
    """Replace the simulator's polling block manager (see the module); idempotent."""
    from numba.cuda.simulator import kernel

    manager, thread_type = kernel.BlockManager, kernel.BlockThread
    if getattr(manager.run, "snapfit_barriers", False):
        return

    def syncthreads(self):
        if self.abort:
            raise RuntimeError("abort flag set on syncthreads call")
        block = self.snapfit_block
        with block.cond:
            opening = block.opening
            block.waiting += 1
            block.open_if_all_wait()
            while block.opening == opening and not self.abort:
                block.cond.wait()
        if self.abort:
            raise RuntimeError("abort flag set on syncthreads clear")

    def run(self, grid_point, *args):
        threads = []
        block = _Block(int(np.prod(self._block_dim)))

        def target():
            try:
                self._f(*args)
            except BaseException:
                with block.cond:  # the others stop at their next barrier (or now, if there)
                    for t in threads:
                        t.abort = True
                    block.cond.notify_all()
                raise
            finally:
                with block.cond:
                    block.live -= 1
                    block.open_if_all_wait()

        for block_point in np.ndindex(*self._block_dim):
            t = thread_type(target, self, grid_point, block_point, self._debug)
            t.snapfit_block = block
            threads.append(t)
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        failed = [t.exception for t in threads if t.exception is not None]
        if failed:  # the exception that aborted the others, not their "abort flag" errors
            first = next((e for e in failed if "abort flag set" not in str(e[0])), failed[0])
            raise first[0].with_traceback(first[1])

    run.snapfit_barriers = True
    manager.run = run
    thread_type.syncthreads = syncthreads
