"""Tiny problems for the simulated GPU (every CUDA thread is a Python thread here)."""

import os

import numpy as np
import pytest
import scipy.sparse as sp

from snapfit.data.chunk import Chunk
from snapfit.engine import Devices, InMemorySource, Problem
from snapfit.gpu import SIMULATOR_LAUNCH
from snapfit.train import train
from tests.alarm import alarm

#: Seconds a composition-matrix cell (or a Dask fit on simulated GPUs) may run before it fails.
#: ``SNAPFIT_CELL_SECONDS`` raises it for the on-demand runs of the whole matrix on a loaded
#: machine: the alarm is there to catch a hang, not to time a cell.
CELL_SECONDS = int(os.environ.get("SNAPFIT_CELL_SECONDS", "240"))

# Launch geometry the simulator can afford: 8 threads, 2 per row, 4 rows in flight.
SIM_GPU = SIMULATOR_LAUNCH


def make_problem_data(n=64, d=12, *, weights=False, ones=False, seed=1):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.3, random_state=seed, format="csr", dtype=np.float32)
    if ones:
        X.data[:] = 1.0
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0).astype(np.float32)
    w = rng.uniform(0.0, 2.0, n).astype(np.float32) if weights else None
    if w is not None:
        w[3] = 0.0  # a zero-weight row never moves
    return X, y, w


def make_sparse_rows(n, d, nnz, *, seed=0):
    """``n`` rows of ``nnz`` random features out of ``d`` (values in [0.5, 1.5]) and 0/1
    labels from a planted model: data dual CD solves in a few dozen epochs."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, d, size=(n, nnz))
    values = rng.uniform(0.5, 1.5, n * nnz).astype(np.float32)
    X = sp.csr_matrix((values, idx.ravel(), np.arange(0, n * nnz + 1, nnz)), shape=(n, d))
    y = (X @ rng.normal(size=d) + rng.logistic(size=n) > 0).astype(np.int8)
    return X, y


@pytest.fixture
def cell_alarm():
    """A hung cell fails after ``CELL_SECONDS`` instead of blocking the run (modules of long
    fits use it: ``pytestmark = pytest.mark.usefixtures("cell_alarm")``)."""
    with alarm(CELL_SECONDS, "matrix cell"):
        yield


@pytest.fixture(scope="session")
def sparse_parquet(tmp_path_factory):
    """``make(rows, features, nnz, seed=0, group_rows=25) -> (X, y, path)``: ``make_sparse_rows``
    and the same rows written as Parquet in row groups of ``group_rows``; one file per
    argument set, shared by every module of the session."""
    from snapfit.data import write_parquet

    made = {}

    def make(n, d, nnz, *, seed=0, group_rows=25):
        key = (n, d, nnz, seed, group_rows)
        if key not in made:
            X, y = make_sparse_rows(n, d, nnz, seed=seed)
            path = str(tmp_path_factory.mktemp("sparse") / "d.parquet")
            write_parquet(path, X, y, row_group_rows=group_rows)
            made[key] = (X, y, path)
        return made[key]

    return make


def split_chunks(X, y, weight, step, *, ones=False):
    indptr = X.indptr.astype(np.int64)
    indices = X.indices.astype(np.int32)
    out = []
    for lo in range(0, X.shape[0], step):
        hi = min(X.shape[0], lo + step)
        a, b = indptr[lo], indptr[hi]
        out.append(
            Chunk(
                indptr[lo : hi + 1] - a,
                indices[a:b],
                None if ones else X.data[a:b],
                y[lo:hi],
                None if weight is None else weight[lo:hi],
            )
        )
    return out


def cpu_reference(chunks, problem):
    return train(InMemorySource(chunks, problem.n_features), problem)


def gpu_devices(n_gpus=1, n_cpu=0, **options):
    """GPU units (all on the one simulated device) with the simulator launch and ``options``."""
    return Devices(n_cpu=n_cpu, gpu_ids=(0,) * n_gpus, gpu_options=dict(SIM_GPU, **options))


@pytest.fixture(scope="session")
def small():
    """64 rows x 12 features, its tight-tolerance problem and the CPU solver's optimum."""
    X, y, w = make_problem_data()
    problem = Problem(n_features=12, tol=1e-10, max_iter=300, seed=3)
    ref = cpu_reference(split_chunks(X, y, w, 64), problem)
    assert ref.converged
    return X, y, w, problem, ref


@pytest.fixture(scope="module")
def sim_client():
    """A warmed-up LocalCluster of 2 worker processes (1 thread, 1 GB each) whose simulated
    GPU kernels are left alone by Dask's diagnostics.

    A simulated kernel starts a Python thread per CUDA thread. Dask's worker profiler (every
    10 ms it walks every thread's stack) and its GC-timing callback then ran amid hundreds of
    thread starts per second; in one of a few dozen fits a worker stopped with a GPU unit's
    thread blocked in the simulator's ``Thread.start`` and the event loop inside that GC
    callback (py-spy). Neither diagnostic matters on a real GPU, whose kernels start no
    threads; here both are off, which also makes the workers' GPU cells faster.
    """
    import dask
    import distributed

    from snapfit.dask import warm_up

    with dask.config.set({"distributed.worker.profile.enabled": False}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                     memory_limit="1GB", dashboard_address=None) as cluster, \
            distributed.Client(cluster) as c:  # fmt: skip
        c.run(_no_gc_diagnosis)
        warm_up(c)
        yield c


def _no_gc_diagnosis():
    from distributed.gc import disable_gc_diagnosis

    disable_gc_diagnosis(force=True)
