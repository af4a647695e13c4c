"""Batched decoding into piece records: same rows and norms as reading whole row groups."""

import numpy as np
import pytest

from snapfit.data import Dataset
from snapfit.engine.source import ResidentSource
from snapfit.solvers import cpu
from snapfit.stream.cache import make_pieces
from snapfit.stream.decode import PieceDecoder
from snapfit.stream.stats import DataStats


@pytest.mark.parametrize("batch_rows", [97, 1000, 4096])
def test_records_hold_every_row_in_order(small_parquet, batch_rows):
    ds = Dataset(small_parquet)
    full = ResidentSource(ds).chunks[0]
    pieces = make_pieces([r.n_rows for r in ds.chunks], 300)
    dec = PieceDecoder(ds, pieces, *DataStats.read(ds, sample=False).flags, batch_rows=batch_rows)
    got = {}
    for g in range(len(ds.chunks)):
        dec.decode(g, lambda p, parts: got.__setitem__(p, [x.copy() for x in parts]))
    assert sorted(got) == list(range(len(pieces)))
    starts = np.r_[0, np.cumsum([r.n_rows for r in ds.chunks])]
    sq = np.empty(full.n_rows, np.float32)
    cpu.row_sqnorms(full.indptr, full.indices, full.values, True, sq)
    for p, (indptr1, indices, values, y, norms) in got.items():
        a = starts[pieces.rg[p]] + pieces.lo[p]
        b = starts[pieces.rg[p]] + pieces.hi[p]
        z0 = full.indptr[a]
        assert np.array_equal(indptr1, full.indptr[a + 1 : b + 1] - z0)
        assert np.array_equal(indices, full.indices[z0 : full.indptr[b]])
        assert np.array_equal(values, full.values[z0 : full.indptr[b]])
        assert np.array_equal(y, full.y[a:b]) and np.array_equal(norms, sq[a:b])
