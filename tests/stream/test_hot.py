"""A streamed source for threads sharing ``w`` chooses their hot features itself and stores
its cache in their order (``stream_dataset(hot=True)``); chunks still come with the data's ids
until the fit asks for its own."""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from snapfit.data import Dataset
from snapfit.datasets import make_criteo_like_parquet
from snapfit.engine.shared import choose_hot, hot_code
from snapfit.engine.source import ResidentSource
from snapfit.solvers import cpu
from snapfit.stream.decode import PieceDecoder
from snapfit.stream.source import recoding
from snapfit.stream.stats import DataStats
from snapfit.train import stream_dataset


def _relabel(ids, code):
    out = ids.copy()
    if code is not None:
        cpu.relabel(ids, code, out)
    return out


@settings(max_examples=50, deadline=None)
@given(d=st.integers(1, 3000), seed=st.integers(0, 2**31 - 1), want=st.sampled_from(
    ["none", "same", "other", "empty"]))  # fmt: skip
def test_recoding_takes_stored_ids_to_the_wanted_ones(d, seed, want):
    rng = np.random.default_rng(seed)
    hot = rng.choice(d, rng.integers(1, min(d, 50) + 1), replace=False)
    stored = hot_code(hot, d)
    wanted = {
        "none": None,
        "same": stored,
        "empty": hot_code([], d),
        "other": hot_code(rng.choice(d, rng.integers(0, d + 1), replace=False), d),
    }[want]
    ids = rng.integers(0, d, 500).astype(np.int32)
    code = recoding(stored, wanted)
    assert (code is None) == (wanted is not None and np.array_equal(wanted, stored))
    np.testing.assert_array_equal(_relabel(_relabel(ids, stored), code),
                                  ids if wanted is None else _relabel(ids, wanted))  # fmt: skip
    assert recoding(None, wanted) is wanted


def test_the_sample_counts_every_row_of_a_small_data_set_and_spreads_over_a_big_one(
    small_parquet,
):
    ds = Dataset(small_parquet)  # 20 row groups of 1000 rows
    full = ResidentSource(ds).chunks[0]
    want = np.zeros(ds.n_features, np.int64)
    cpu.count_columns(full.indptr, full.indices, want, 1)
    dec = PieceDecoder(ds, _pieces(ds), *DataStats.read(ds, sample=False).flags, batch_rows=256)
    counts, counted = dec.count_columns(10**6)
    assert counted == ds.n_rows and np.array_equal(counts, want)
    # 4 groups of 20 (0, 5, 10, 15), whole batches of 256 rows up to 600 rows each
    counts, counted = dec.count_columns(2400, n_groups=4)
    assert counted == 4 * 768
    part = np.zeros(ds.n_features, np.int64)
    for g in (0, 5, 10, 15):
        c = full.rows(1000 * g, 1000 * g + 768)
        cpu.count_columns(c.indptr, c.indices, part, 1)
    assert np.array_equal(counts, part)


def _pieces(ds):
    from snapfit.stream.cache import make_pieces

    return make_pieces([r.n_rows for r in ds.chunks], 1000)


@pytest.mark.parametrize("mode,cache_format", [("cache", "compact"), ("cache", "raw"),
                                               ("cache", "lz4"), ("parquet", None)])  # fmt: skip
def test_a_hot_source_stores_the_fit_ids_and_hands_out_the_data_ones(small_parquet, mode,
                                                                     cache_format):  # fmt: skip
    _check_hot_source(small_parquet, mode, cache_format)


def test_relabeled_ids_past_two_bytes_are_stored_in_three(tmp_path):
    """2^16 features fit 2-byte ids, but their hot ids start at 2^16: the compact record
    widens to 3 bytes (``id_bound``)."""
    path = tmp_path / "b16.parquet"
    make_criteo_like_parquet(path, 6000, seed=2, hash_bits=16, row_group_rows=1000)
    assert Dataset(str(path)).n_features == 1 << 16
    _check_hot_source(str(path), "cache", "compact")


def _check_hot_source(path, mode, cache_format):
    ds = Dataset(path)
    kw = dict(n_units=2, seed=3, chunk_rows=4096, piece_rows=512, mode=mode,
              cache_format=cache_format)  # fmt: skip
    with stream_dataset(ds, 8_000_000, **kw) as plain, stream_dataset(ds, 8_000_000, hot=True,
                                                                      **kw) as src:  # fmt: skip
        assert plain.hot_set() is None
        hot, ends = src.hot_set()
        # every row counted here (20k rows): the choice the trainer's count would make
        full = ResidentSource(ds).chunks[0]
        counts = np.zeros(ds.n_features, np.int64)
        cpu.count_columns(full.indptr, full.indices, counts, 1)
        want_hot, want_ends = choose_hot(counts, ds.n_rows)
        assert np.array_equal(hot, want_hot) and np.array_equal(ends, want_ends) and len(hot)
        code = hot_code(hot, ds.n_features)
        if mode == "cache":  # stored in the fit's order (the epochs below show it is used)
            assert np.array_equal(src.cache.code, code)
        order = list(range(src.n_chunks))
        for relabel in (None, code, None):
            for s in (plain, src):
                s.make_state() if s.state is None else None
            if relabel is not None:
                src.relabel(relabel)
                assert (src._code is None) == (mode == "cache")
            else:
                src.relabel(None)
            a = {k: c.indices.copy() for k, c in _epoch(plain, order)}
            b = {k: c.indices.copy() for k, c in _epoch(src, order)}
            for k in order:
                np.testing.assert_array_equal(b[k], _relabel(a[k], relabel))


def _epoch(src, order):
    for k, chunk in src.epoch(order):
        yield k, chunk
        src.release(k)


def test_a_streamed_fit_of_sharing_threads_resumes_to_the_uninterrupted_optimum(
    small_parquet, tmp_path, monkeypatch
):
    """The estimator's streamed sharing fit (the source picks the hot set, the cache stores the
    fit's ids) checkpoints ``w`` in the data's order; a resumed fit, whose new source picks the
    same hot set, reaches the uninterrupted fit's optimum, which is liblinear's."""
    import warnings

    import snapfit.stream.source as source
    from snapfit import LogisticRegression
    from tests.helpers import liblinear, primal

    hot_sets = []

    class Spy(source.StreamSource):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            hot_sets.append(self.hot_set())

    monkeypatch.setattr(source, "StreamSource", Spy)
    kw = dict(C=0.1, tol=1e-9, max_iter=300, random_state=0, n_jobs=2, deterministic=False,
              memory_budget="3MB")  # fmt: skip
    full = LogisticRegression(**kw).fit(small_parquet)
    part = LogisticRegression(checkpoint_dir=str(tmp_path), **(kw | {"max_iter": 4}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        part.fit(small_parquet)
    resumed = LogisticRegression(checkpoint_dir=str(tmp_path), **kw)
    resumed.fit(small_parquet, resume=True)
    assert len(hot_sets) == 3 and all(h is not None for h in hot_sets)  # streamed, hot chosen
    assert all(np.array_equal(h[0], hot_sets[0][0]) for h in hot_sets)
    assert resumed.n_iter_[0] > 4 and resumed.history_[-1]["rel_gap"] <= 1e-9
    chunk = ResidentSource(Dataset(small_parquet)).chunks[0]
    X = sp.csr_matrix((chunk.values, chunk.indices, chunk.indptr),
                      shape=(chunk.n_rows, Dataset(small_parquet).n_features))  # fmt: skip
    y = (chunk.y > 0).astype(int)
    ref = liblinear(X, y, 0.1)
    p_ref = primal(X, y, ref.coef_, ref.intercept_[0], 0.1)
    for est in (full, resumed):
        p = primal(X, y, est.coef_, est.intercept_[0], 0.1)
        assert abs(p - p_ref) <= 1e-6 * abs(p_ref)
