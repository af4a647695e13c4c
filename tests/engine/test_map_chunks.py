"""``Trainer.map_chunks``: every row once, with its own ``alpha``, on the units' threads (the
Dask part's ``measure`` sums the objective's pieces through it)."""

import numpy as np
import pytest

from snapfit.datasets.criteo_like import make_criteo_like
from snapfit.engine import Devices, InMemorySource, Problem
from snapfit.inputs import csr_chunks
from snapfit.train import make_trainer


@pytest.mark.parametrize("n_cpu, share", [(1, False), (2, False), (2, True)])
@pytest.mark.parametrize("chunk_rows", [None, 70])
def test_every_row_once_with_its_alpha(n_cpu, share, chunk_rows):
    X, y = make_criteo_like(300, seed=1, hash_bits=10)
    y_pm = np.where(y > 0, 1.0, -1.0).astype(np.float32)
    source = InMemorySource(csr_chunks(X, y_pm, None, chunk_rows), X.shape[1])
    problem = Problem(n_features=X.shape[1], c_pos=1.0, c_neg=1.0, bias=1.0, seed=0)
    tr = make_trainer(source, problem, Devices(n_cpu=n_cpu, share_cpu=share))
    try:
        alpha = np.random.default_rng(2).uniform(0.1, 0.9, 300)
        tr.write_alpha(alpha)
        seen = tr.map_chunks(lambda t, chunk, a: (t, chunk.y.copy(), a.copy()))
    finally:
        tr.close()
    assert {t for t, _, _ in seen} == set(range(n_cpu))  # every thread took a share
    got_y = np.concatenate([y for _, y, _ in seen])
    got_a = np.concatenate([a for _, _, a in seen])
    assert len(got_a) == 300
    # rows come in source order: the sums see each row once, with its own alpha
    np.testing.assert_array_equal(got_y, y_pm)
    np.testing.assert_array_equal(got_a, alpha)
