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

And one cost: its barriers hand the GIL from thread to thread, so every ``syncthreads()``
waited out CPython's 5 ms switch interval (a pass ran ~7x slower; Dask worker processes, which
never see a test's settings, ran the matrix tests' GPU cells at a seventh of the speed).
``install`` shortens the interval for the process, as it only matters to simulated kernels.
"""

from __future__ import annotations

import os
import sys
import threading
from contextlib import nullcontext


def simulated() -> bool:
    """True when Numba's CUDA simulator is enabled (it is chosen when numba.cuda is imported)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


#: Held around every kernel launch under the simulator (one kernel at a time per process).
serial = threading.Lock() if simulated() else nullcontext()


def install() -> None:
    """Everything above, once per process that imports the kernels under the simulator."""
    sys.setswitchinterval(SWITCH_INTERVAL)
    lock_shared()


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
