"""``DataStats.read``: the planning I/O of a fit is each file's footer once and one sample."""

import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

import snapfit.stream.stats as stats_module
from snapfit import LogisticRegression
from snapfit.data import Dataset
from snapfit.datasets import make_criteo_like_parquet
from snapfit.stream.plan import first_chunk_rows, piece_rows_for
from snapfit.stream.stats import DataStats


@pytest.fixture(scope="module")
def two_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("two")
    for i in range(2):
        make_criteo_like_parquet(d / f"part-{i}.parquet", 6000, seed=i, hash_bits=14,
                                 row_group_rows=1000)  # fmt: skip
    return str(d)


def _opener(frame) -> str:
    """``module:function`` of the snapfit code that opened a Parquet file (past the openers)."""
    while frame is not None:
        name = frame.f_code.co_filename.replace("\\", "/")
        where = name.rsplit("/snapfit/", 1)[-1] + ":" + frame.f_code.co_name
        if "/snapfit/" in name and where not in ("data/fs.py:parquet_file", "data/reader.py:_open"):
            return where
        frame = frame.f_back
    return "?"


@pytest.mark.parametrize("mode", ["cache", "parquet"])
def test_a_streamed_fit_reads_each_footer_once_and_decodes_one_sample(two_files, monkeypatch,
                                                                       mode):  # fmt: skip
    """Footers opened for planning (not for reading rows) are counted by the code that opened
    them: the ``Dataset`` reads each once when it is made and keeps what the plan needs
    (``DataStats`` opens none), nothing else re-reads them; the sample is decoded once per fit."""
    opened, samples = [], []
    real_init, real_sample = pq.ParquetFile.__init__, stats_module._sample

    def init(self, source, *a, **kw):
        opened.append(_opener(sys._getframe(1)))
        real_init(self, source, *a, **kw)

    def sample(*a):
        samples.append(a)
        return real_sample(*a)

    monkeypatch.setattr(pq.ParquetFile, "__init__", init)
    monkeypatch.setattr(stats_module, "_sample", sample)
    monkeypatch.setenv("SNAPFIT_STREAM", mode)
    est = LogisticRegression(C=0.1, max_iter=3, tol=1e-9, random_state=0, n_jobs=1,
                             memory_budget="2MB").fit(two_files)  # fmt: skip
    assert est.streamed_
    # rows are read by the decoder's threads and, for the label counts, by the Dataset
    rows = ("stream/decode.py:_file", "data/reader.py:_pf")
    footers = sorted(m for m in opened if m not in rows)
    assert footers == ["data/reader.py:_plan"] * 2, opened
    assert len(samples) == 1


def test_read_gives_footer_numbers_and_the_sample(two_files):
    ds = Dataset(two_files)
    rows = piece_rows_for(first_chunk_rows(ds.n_rows, None))
    s = DataStats.read(ds, piece_rows=rows)
    assert s.rg_rows == (1000,) * 12 and s.nnz == ds.nnz and s.flags == (True, False)
    assert all(b > 0 for b in s.rg_stored) and len(s.rg_stored) == 12
    # the sample: criteo-like rows hold their 13 integer fields as values, the rest as ones
    chunk = ds.read_chunk(0)
    head = chunk.values[: chunk.indptr[1000]]
    assert s.valued_share == pytest.approx(float(np.mean(head != 1.0)))
    assert 1.0 < s.lz4_ratio < 3.0 and s.sample_piece_rows == rows
    bare = DataStats.read(ds, sample=False)
    assert (bare.valued_share, bare.lz4_ratio) == (1.0, 1.0) and bare.rg_rows == s.rg_rows
