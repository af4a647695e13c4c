"""One-vs-rest over three classes in the composition matrix's local GPU cells: the GPU alone
from arrays, and the GPU with a CPU thread taking the residue from Parquet streamed under a
budget below a third of its decoded size, each at the in-memory CPU optimum within 1e-6 (the
other cells, two GPU units among them, run with the whole matrix on demand:
``SNAPFIT_MATRIX_MODEL=ovr``, ``test_matrix.py``; each simulated cell costs up to a minute).

On a GPU each problem of a chunk is the binary kernel's pass with its own labels
(``class_labels``), bounds, dual block and block of ``w``; a chunk crosses to the device once a
pass whatever K, its K blocks of ``alpha`` staying there while it is resident."""

from __future__ import annotations

import numpy as np
import pytest

import snapfit
from snapfit.data import Dataset, write_parquet
from snapfit.stream.plan import resident_peak_nbytes
from snapfit.stream.stats import DataStats
from tests.alarm import alarm
from tests.gpu.sim.conftest import make_sparse_rows

PARAMS = dict(C=0.02, tol=1e-7, max_iter=300, random_state=0, loss="squared_hinge")
BUDGET = 13_500
CELLS = {
    "gpu, arrays": dict(device="gpu", n_jobs=1),
    "gpu + cpu, streamed": dict(device="gpu", n_jobs=2),
}


@pytest.fixture(autouse=True)
def _alarm():
    with alarm(240, "matrix cell"):
        yield


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    X, y01 = make_sparse_rows(300, 32, 5, seed=0)
    y = np.where(y01 == 1, 5, np.where(np.arange(300) % 3 == 0, -1, 2))  # three classes
    path = str(tmp_path_factory.mktemp("ovr") / "d.parquet")
    write_parquet(path, X, y, row_group_rows=25, targets="classes")
    peak = resident_peak_nbytes(DataStats.read(Dataset(path), sample=False), 1, width=3)
    assert BUDGET < peak / 3
    ref = snapfit.LinearSVC(device="cpu", **dict(PARAMS, tol=1e-10, max_iter=3000)).fit(X, y)
    return X, y, path, ref.history_[-1]["primal"]


@pytest.mark.parametrize("cell", CELLS)
def test_one_vs_rest_cells(data, cell):
    X, y, path, ref = data
    est = snapfit.LinearSVC(memory_budget=BUDGET, **CELLS[cell], **PARAMS)
    streamed = cell.endswith("streamed")
    est.fit(path) if streamed else est.fit(X, y)
    last = est.history_[-1]
    assert est.classes_.tolist() == [-1, 2, 5] and est.coef_.shape == (3, 32)
    assert last["exact"] and est.converged_ and est.streamed_ == streamed
    assert abs(last["primal"] - ref) <= 1e-6 * abs(ref), (last["primal"], ref)
    np.testing.assert_array_equal(est.predict(X), est.classes_[est.decision_function(X).argmax(1)])
