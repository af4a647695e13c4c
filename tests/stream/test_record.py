"""The compact cache record: exact round trips, fewer bytes, and fits identical to the raw cache."""

from collections import namedtuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapfit import LogisticRegression
from snapfit.data import Dataset
from snapfit.stream import record as R
from snapfit.stream.formats import FORMATS, Shape
from snapfit.stream.plan import cache_bytes
from snapfit.stream.stats import DataStats
from snapfit.train import stream_dataset

Usage = namedtuple("Usage", "total used free")


@st.composite
def pieces(draw):
    n = draw(st.integers(1, 60))
    long_rows = draw(st.booleans())
    lengths = np.array(draw(st.lists(st.integers(0, 300 if long_rows else 40), min_size=n,
                                     max_size=n)))  # fmt: skip
    nnz = int(lengths.sum())
    bits = draw(st.sampled_from([10, 16, 17, 24, 25, 31]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    indices = rng.integers(0, 2**bits, nnz).astype(np.int32)
    ones = rng.random(nnz) < draw(st.floats(0, 1))
    values = np.where(ones, np.float32(1), rng.normal(size=nnz).astype(np.float32))
    values[rng.random(nnz) < 0.05] = 0.0  # explicit zeros are values too
    y = np.where(rng.random(n) < 0.3, 1, -1).astype(np.float32)
    if draw(st.booleans()):  # real regression targets (a record keeps them as float32)
        y = (rng.normal(size=n) * 10.0 ** draw(st.integers(-3, 6))).astype(np.float32)
    weight = rng.random(n).astype(np.float32)
    sqnorm = rng.random(n).astype(np.float32)
    return np.cumsum(lengths).astype(np.int64), indices, values, y, weight, sqnorm, 2**bits


@settings(max_examples=150, deadline=None)
@given(pieces(), st.booleans(), st.booleans())
def test_expand_undoes_encode_exactly(piece, has_values, has_weight):
    indptr, indices, values, y, weight, sqnorm, n_features = piece
    width = R.index_width(n_features)
    rec = R.encode(indptr, indices, values if has_values else None, y,
                   weight if has_weight else None, sqnorm, index_bytes=width)  # fmt: skip
    want = [indptr, indices] + ([values] if has_values else []) + [y]
    want += ([weight] if has_weight else []) + [sqnorm]
    got = [np.full_like(a, -7) for a in want]
    R.expand(rec, len(y), len(indices), width, got, has_values, has_weight)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    n_valued = int((values != 1).sum()) if has_values else 0
    pm1 = bool(np.all(np.abs(y) == 1))
    assert len(rec) <= R.nbytes(len(y), len(indices), n_valued, index_bytes=width,
                                has_values=has_values, has_weight=has_weight,
                                length_bytes=4, label_bytes=1 if pm1 else 4)  # fmt: skip


def _epoch(src, seed):
    order = list(np.random.default_rng(seed).permutation(src.n_chunks))
    src.begin_epoch(order)
    out = {}
    for k, chunk in src.epoch(order):
        out[k] = [a.copy() for a in (chunk.indptr, chunk.indices, chunk.values, chunk.y)]
        src.release(k)
    return out


def test_compact_cache_delivers_the_raw_cache_s_chunks_in_half_the_bytes(small_parquet):
    ds = Dataset(small_parquet)
    kw = dict(n_units=1, chunk_rows=2048, piece_rows=256, mode="cache", seed=3)
    with stream_dataset(ds, 3_000_000, cache_format="raw", **kw) as raw, \
            stream_dataset(ds, 3_000_000, cache_format="compact", **kw) as compact:  # fmt: skip
        assert raw.cache_format == "raw" and compact.cache_format == "compact"
        for src in (raw, compact):
            src.make_state()
        for e in range(2):  # the second epoch has residents (DuHL), kept compact
            a, b = _epoch(raw, e), _epoch(compact, e)
            assert a.keys() == b.keys()
            for k in a:
                for x, z in zip(a[k], b[k], strict=True):
                    np.testing.assert_array_equal(x, z)
        assert compact.resident_bytes > 0
        # Criteo-like rows of 2^14 features: 2-byte indices, int8 labels, only valued entries
        assert compact.cache.bytes_per_row <= 0.55 * raw.cache.bytes_per_row


def test_fits_on_the_compact_cache_equal_fits_on_the_raw_one(small_parquet, monkeypatch):
    kw = dict(C=0.1, tol=1e-8, max_iter=200, random_state=0, n_jobs=2, memory_budget="3MB")
    fits = {}
    for fmt in ("raw", "compact", "lz4"):
        monkeypatch.setenv("SNAPFIT_CACHE_FORMAT", fmt)
        fits[fmt] = LogisticRegression(**kw).fit(small_parquet)
    for fmt in ("compact", "lz4"):
        np.testing.assert_array_equal(fits["raw"].coef_, fits[fmt].coef_)
        assert fits["raw"].history_[-1]["primal"] == fits[fmt].history_[-1]["primal"]


def test_auto_format_is_lz4_when_only_that_fits_the_disk(small_parquet, monkeypatch):
    """Compact records compressed with lz4 take fewer bytes (estimated from the sample before
    the first pass, measured after it); "auto" picks them when the compact cache would not fit
    the disk but they would, before falling back to decoding Parquet every epoch."""
    import shutil

    import snapfit.stream.memlimit as memlimit

    ds = Dataset(small_parquet)
    pieces = max(1, min(4096, max(16, ds.n_rows // 16) // 16))  # a default source's
    stats = DataStats.read(ds, piece_rows=pieces)
    compact = cache_bytes(stats, "compact", ds.n_features)
    squeezed = cache_bytes(stats, "lz4", ds.n_features)
    assert squeezed < 0.85 * compact
    with (
        stream_dataset(ds, 3_000_000, n_units=1, cache_format="compact") as a,
        stream_dataset(ds, 3_000_000, n_units=1, cache_format="lz4") as b,
    ):
        assert b.cache.bytes_per_row < 0.85 * a.cache.bytes_per_row
        assert b.cache._end <= squeezed
    total = 10**9
    monkeypatch.setattr(memlimit, "available_memory", lambda: 1_000_000)  # not raw
    free = int(0.05 * total + (compact + squeezed) / 2)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(total, 0, free))
    with stream_dataset(ds, 3_000_000, n_units=1) as src:
        assert (src.mode, src.cache_format) == ("cache", "lz4")
    free = int(0.05 * total + squeezed / 2)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(total, 0, free))
    with stream_dataset(ds, 3_000_000, n_units=1) as src:
        assert src.mode == "parquet"


def test_auto_format_is_compact_once_the_raw_cache_would_not_stay_in_memory(
    small_parquet, monkeypatch
):
    ds = Dataset(small_parquet)
    import snapfit.stream.memlimit as memlimit

    monkeypatch.setattr(memlimit, "available_memory", lambda: 10**12)
    with stream_dataset(ds, 3_000_000, n_units=1) as src:
        assert (src.mode, src.cache_format) == ("cache", "raw")
    monkeypatch.setattr(memlimit, "available_memory", lambda: 1_000_000)  # raw: ~7 MB
    with stream_dataset(ds, 3_000_000, n_units=1) as src:
        assert (src.mode, src.cache_format) == ("cache", "compact")
    with pytest.raises(ValueError, match="cache format is 'zip'"):
        stream_dataset(ds, 3_000_000, cache_format="zip")


def test_the_sample_is_decoded_once_and_a_cache_the_disk_cannot_hold_is_refused(
    small_parquet, monkeypatch, tmp_path
):
    """The plan's estimate of the cache's bytes (for lz4, from the one sample decoded and
    compressed) serves the cache's own space check; a cache given more bytes than the disk has
    free refuses, naming both, before its first pass writes anything."""
    import snapfit.stream.cache as cache
    import snapfit.stream.stats as stats
    from snapfit.errors import ResourceError
    from snapfit.stream.cache import PieceCache

    calls = []
    real = stats._sample

    def counted(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(stats, "_sample", counted)
    ds = Dataset(small_parquet)
    with stream_dataset(ds, 3_000_000, n_units=1, cache_format="lz4") as src:
        assert src.cache.need == src.stream_plan.cache_bytes and src.cache._end <= src.cache.need
    assert len(calls) == 1
    with stream_dataset(ds, 3_000_000, n_units=1, cache_format="compact") as src:
        pieces, flags = src.pieces, src.flags()
    free = 10**6
    monkeypatch.setattr(cache.shutil, "disk_usage", lambda path: Usage(10**9, 0, free))
    refused = PieceCache(ds, pieces, str(tmp_path), flags, need=2 * 10**9)
    with pytest.raises(ResourceError, match=r"needs 2.00 GB in .* only 0.00 GB are free"):
        refused.ingest()
    assert refused._end == 0
    refused.close()


@settings(max_examples=60, deadline=None)
@given(pieces(), st.booleans(), st.booleans(), st.sampled_from(sorted(FORMATS)))
def test_every_format_expands_what_it_encodes(piece, has_values, has_weight, name):
    """Each cache format stores a piece and gives back the raw record's arrays bit for bit;
    its ``nbytes`` bounds what raw and compact store (lz4's is an estimate from a ratio)."""
    indptr, indices, values, y, weight, sqnorm, n_features = piece
    real = not np.all(np.abs(y) == 1)  # real targets: a compact record's labels are float32
    shape = Shape(has_values, has_weight, R.index_width(n_features), label_bytes=4 if real else 1)
    want = [indptr, indices] + ([values] if has_values else []) + [y]
    want += ([weight] if has_weight else []) + [sqnorm]
    fmt = FORMATS[name]
    stored, plain = fmt.encode(want, shape)
    record = np.concatenate([np.frombuffer(memoryview(x).cast("B"), np.uint8) for x in stored])
    got = [np.full_like(a, -7) for a in want]
    fmt.expand(record, len(y), len(indices), got, shape, plain)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    n_valued = int((values != 1).sum()) if has_values else 0
    if name != "lz4" and all(np.diff(np.r_[0, indptr]) < 256):  # one-byte lengths
        assert len(record) <= fmt.nbytes(len(y), len(indices), n_valued, shape)
    assert fmt.direct == (name == "raw")
