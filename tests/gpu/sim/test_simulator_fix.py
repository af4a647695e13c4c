"""``snapfit.solvers.cudasim.lock_shared``: one shared array per block and call site, however
the simulated threads of a block interleave (numba's own lookup races; see the module)."""

import threading
import time

import numpy as np
import pytest
from numba import cuda, float64
from numba.cuda.simulator import kernelapi

import snapfit.solvers.gpu  # noqa: F401 - importing the kernels installs the fix


def _allocate_from_threads(array, monkeypatch, n=8, *, meet=False):
    """``array(shared, 4, float64)`` from ``n`` threads started together, on one call line.
    With ``meet`` every allocation waits until all ``n`` threads are inside one (a barrier: the
    interleaving that races, forced, whatever the machine's load); without, each allocation is
    merely slowed (a lookup that serializes them would never meet)."""
    real_empty = np.empty
    inside = threading.Barrier(n, timeout=60)

    def slow_empty(*args, **kwargs):
        if meet:
            inside.wait()
        else:
            time.sleep(0.02)
        return real_empty(*args, **kwargs)

    monkeypatch.setattr(np, "empty", slow_empty)
    shared = kernelapi.FakeCUDAShared(0)
    start = threading.Barrier(n)
    got = [None] * n

    def thread(i):
        start.wait()
        got[i] = array(shared, 4, float64)  # the one call site of every thread

    threads = [threading.Thread(target=thread, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    monkeypatch.undo()
    return {id(a) for a in got}


def test_the_patched_lookup_gives_every_thread_the_same_array(monkeypatch):
    patched = kernelapi.FakeCUDAShared.array
    assert patched.snapfit_locked  # installed when snapfit.solvers.gpu was imported
    assert len(_allocate_from_threads(patched, monkeypatch)) == 1
    # numba's own lookup, every thread inside the allocation at once, hands out one "shared"
    # array per thread
    assert len(_allocate_from_threads(patched.unlocked, monkeypatch, meet=True)) == 8


def test_installing_twice_keeps_one_patch_and_dynamic_shared_memory_is_numbas():
    from snapfit.solvers.cudasim import lock_shared

    patched = kernelapi.FakeCUDAShared.array
    lock_shared()
    assert kernelapi.FakeCUDAShared.array is patched
    shared = kernelapi.FakeCUDAShared(64)
    dyn = patched(shared, 0, float64)  # size 0: the launch's dynamic buffer, as numba gives it
    assert dyn.nbytes == 64 and np.shares_memory(dyn, patched(shared, 0, float64))


def test_importing_the_kernels_shortens_the_switch_interval():
    """Every process that runs simulated kernels (Dask workers too) hands the GIL on quickly."""
    import sys

    from snapfit.solvers.cudasim import SWITCH_INTERVAL

    assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL)


def _launch(kernel, out, blocks=2, threads=8):
    cuda.jit(kernel)[blocks, threads](out)
    return out


def _neighbours(out):
    """Each thread writes its shared slot, waits, then reads its neighbour's (twice over)."""
    s = cuda.shared.array(8, float64)
    t = cuda.threadIdx.x
    s[t] = t + 10 * cuda.blockIdx.x
    cuda.syncthreads()
    v = s[(t + 1) % 8]
    cuda.syncthreads()
    s[t] = v
    cuda.syncthreads()
    out[cuda.blockIdx.x * 8 + t] = s[(t + 1) % 8] + cuda.syncthreads_count(t < 3)


def _early_return(out):
    """Odd threads return at once; the barrier still opens for the even ones (numba's rule:
    a barrier waits for the threads of the block that have not returned)."""
    t = cuda.threadIdx.x
    if t % 2:
        return
    cuda.syncthreads()
    cuda.syncthreads()
    out[cuda.blockIdx.x * 8 + t] = 1.0


def _one_thread_fails(out):
    if cuda.threadIdx.x == 5:
        raise ValueError("thread five fails")
    cuda.syncthreads()  # the others wait here, and are aborted
    out[cuda.threadIdx.x] = 1.0


def test_condition_barriers_keep_the_simulators_semantics():
    from numba.cuda.simulator import kernel

    from snapfit.solvers.cudasim import condition_barriers

    run = kernel.BlockManager.run
    assert run.snapfit_barriers  # installed with the kernels
    condition_barriers()
    assert kernel.BlockManager.run is run
    got = _launch(_neighbours, np.zeros(16))
    t = np.arange(8)
    want = np.concatenate([(t + 2) % 8 + 10 * b + 3 for b in range(2)])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(_launch(_early_return, np.zeros(16)), np.tile([1.0, 0.0], 8))
    with pytest.raises(ValueError, match="thread five fails"):
        _launch(_one_thread_fails, np.zeros(8), blocks=1)
