"""Decoding Parquet every epoch (when the raw cache would not fit the temp disk)."""

import logging
import shutil
from collections import namedtuple

import numpy as np
import pytest

from snapfit import LogisticRegression
from snapfit.data import Dataset
from snapfit.engine import Devices, Problem
from snapfit.engine.source import ResidentSource
from snapfit.errors import DataError
from snapfit.train import stream_dataset, train


def test_epoch_delivers_every_row_once(small_parquet):
    ds = Dataset(small_parquet)
    with stream_dataset(ds, 3_000_000, chunk_rows=2048, piece_rows=256, mode="parquet") as src:
        assert src.mode == "parquet" and src.window >= 1
        src.make_state()
        full = ResidentSource(ds).chunks[0]
        seen = []
        for e in range(2):
            order = list(np.random.default_rng(e).permutation(src.n_chunks))
            ys, nnz = [], 0
            for k, chunk in src.epoch(order):
                ys.append(chunk.y.copy())
                nnz += chunk.nnz
                src.release(k)
            assert nnz == full.nnz
            assert sorted(np.concatenate(ys)) == sorted(full.y)
            seen.append([tuple(g) for g in src._groups])
        assert seen[0] != seen[1]  # re-dealt every epoch
        # The decoder's window stays near the share of the budget it was given.
        rg = max(src.cache.rg_record_nbytes())
        assert src.cache.peak_pending <= src.plan.resident + rg


@pytest.mark.parametrize("hot", [False, True])
@pytest.mark.parametrize("mode,cache_format", [("parquet", "compact"), ("cache", "compact"),
                                               ("cache", "raw"), ("cache", "lz4")])  # fmt: skip
def test_reaches_the_in_memory_optimum(small_parquet, mode, cache_format, hot):
    ds = Dataset(small_parquet)
    # threads sharing w (features relabeled as the chunks are handed out, or, hot=True, stored
    # so by the cache), in memory and streamed from a source that re-deals its pieces
    kw = dict(C=0.1, tol=1e-8, max_iter=500, random_state=0, n_jobs=2, deterministic=False)
    mem = LogisticRegression(**kw).fit(small_parquet)
    with stream_dataset(ds, 3_000_000, n_units=2, seed=0, mode=mode, cache_format=cache_format,
                      hot=hot) as src:  # fmt: skip
        problem = Problem(n_features=ds.n_features, c_pos=0.1, c_neg=0.1, seed=0, tol=1e-8,
                          max_iter=500)  # fmt: skip
        relabels = []  # what each epoch's chunks went through
        res = train(src, problem, devices=Devices(n_cpu=2, share_cpu=True),
                    callbacks=[lambda rec, w: relabels.append(src._code) and False])  # fmt: skip
    assert res.converged
    assert (src.hot_set() is not None) == hot
    stored = hot and mode == "cache"  # the cache holds the fit's ids: no relabeling per epoch
    assert all((code is None) == stored for code in relabels) and relabels
    w_mem = np.r_[mem.coef_.ravel(), mem.intercept_]
    assert np.abs(res.w - w_mem).max() <= 1e-3 * np.abs(w_mem).max()
    # No bound on the epochs against the in-memory fit: threads sharing w take a path that
    # depends on how the machine schedules them, so their epoch counts are not a check.


Usage = namedtuple("Usage", "total used free")


def test_auto_falls_back_when_the_cache_would_not_fit(small_parquet, monkeypatch, caplog):
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10**9, 10**9, 10**5))
    with caplog.at_level(logging.WARNING, logger="snapfit"):
        with stream_dataset(Dataset(small_parquet), 3_000_000) as src:
            assert src.mode == "parquet"
    assert "decoding Parquet every epoch" in caplog.text
    monkeypatch.setattr(shutil, "disk_usage", real)
    monkeypatch.setenv("SNAPFIT_STREAM", "parquet")
    with stream_dataset(Dataset(small_parquet), 3_000_000) as src:
        assert src.mode == "parquet"
    monkeypatch.setenv("SNAPFIT_STREAM", "tape")
    with pytest.raises(ValueError, match="auto, cache or parquet"):
        stream_dataset(Dataset(small_parquet), 3_000_000)


def test_decoder_error_names_the_row_group(small_parquet, monkeypatch):
    ds = Dataset(small_parquet)
    src = stream_dataset(ds, 3_000_000, chunk_rows=2048, piece_rows=256, mode="parquet")
    try:

        def broken(g, emit, norms=None):
            raise DataError(f"{ds.chunks[g].file}, row group {g}: cannot be read (broken)")

        monkeypatch.setattr(src.cache.decoder, "decode", broken)
        with pytest.raises(DataError, match=r"d20k.parquet, row group \d+"):
            train(src, Problem(n_features=ds.n_features, max_iter=1))
    finally:
        src.close()


def test_resume_replays_the_uninterrupted_run(small_parquet, tmp_path, monkeypatch):
    monkeypatch.setenv("SNAPFIT_STREAM", "parquet")
    kw = dict(C=0.1, tol=1e-12, random_state=0, n_jobs=2, memory_budget="3MB", deterministic=True)
    full = LogisticRegression(max_iter=8, **kw)
    part = LogisticRegression(max_iter=4, checkpoint_dir=str(tmp_path), **kw)
    resumed = LogisticRegression(max_iter=8, checkpoint_dir=str(tmp_path), **kw)
    with pytest.warns(Warning):
        full.fit(small_parquet)
    with pytest.warns(Warning):
        part.fit(small_parquet)
    with pytest.warns(Warning):
        resumed.fit(small_parquet, resume=True)
    assert np.array_equal(resumed.coef_, full.coef_)
