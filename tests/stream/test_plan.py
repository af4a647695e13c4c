"""Every decision of ``plan_stream``, from hand-made ``DataStats``: no files are read."""

import pytest

from snapfit.errors import ResourceError
from snapfit.stream.budget import buffers_wanted
from snapfit.stream.plan import (
    MIN_BUFFERED_CHUNK_ROWS,
    MIN_CHUNK_ROWS,
    cache_bytes,
    plan_stream,
    resident_peak_nbytes,
)
from snapfit.stream.stats import DataStats

GB = 10**9


def stats(n_groups=16, rows=1 << 16, per_row=40, nf=1 << 20, **kw) -> DataStats:
    """Criteo-like numbers: 2^20 rows of 40 entries in 16 row groups, values, no weights."""
    base = dict(has_values=True, valued_share=0.3, lz4_ratio=1.4)
    return DataStats(nf, (rows,) * n_groups, (rows * per_row,) * n_groups, **(base | kw))


def plan(s=None, budget=200 * 10**6, **kw):
    args = dict(n_units=2, disk_free=100 * GB, memory=100 * GB, allow_resident=False) | kw
    return plan_stream(s or stats(), budget=budget, **args)


def test_resident_when_the_whole_data_fits_the_budget():
    s = stats()
    peak = resident_peak_nbytes(s, 2)
    fits = plan(s, budget=peak, allow_resident=True)
    assert fits.resident and "resident" in fits.describe()
    assert not plan(s, budget=peak - 1, allow_resident=True).resident
    assert plan(stats(on_files=False), budget=1, allow_resident=True).resident  # arrays
    assert not plan(s, budget=peak).resident  # allow_resident=False: streamed anyway


def test_the_cache_when_it_fits_the_disk_else_parquet_every_epoch():
    s = stats()
    assert plan(s).mode == "cache" and plan(s).note == ""
    tight = plan(s, disk_free=cache_bytes(s, "lz4", s.n_features) - 1)
    assert tight.mode == "parquet" and tight.cache_format is None and "SNAPFIT_TMPDIR" in tight.note
    # decoding Parquet every epoch keeps two row groups' records in memory
    assert tight.window_min > 0 and tight.split.minimum >= tight.window_min
    assert plan(s, mode="parquet").mode == "parquet"
    assert plan(s, mode="cache", disk_free=0).mode == "cache"  # asked for: the cache checks
    with pytest.raises(ValueError, match="auto, cache or parquet"):
        plan(s, mode="tape")


def test_raw_while_it_fits_half_the_memory_then_compact_then_lz4():
    s = stats()
    raw = cache_bytes(s, "raw", s.n_features)
    compact = cache_bytes(s, "compact", s.n_features)
    lz4 = cache_bytes(s, "lz4", s.n_features)
    assert lz4 < compact < raw
    assert plan(s, memory=2 * raw).cache_format == "raw"
    assert plan(s, memory=2 * raw - 2).cache_format == "compact"
    assert plan(s, memory=0, disk_free=compact).cache_format == "compact"
    squeezed = plan(s, memory=0, disk_free=compact - 1)
    assert (squeezed.cache_format, squeezed.cache_bytes) == ("lz4", lz4)
    assert plan(s, cache_format="raw", memory=0).cache_format == "raw"  # asked for
    with pytest.raises(ValueError, match="raw, compact or lz4"):
        plan(s, cache_format="zip")
    # hot ids past 2^16 widen the compact record's indices
    small = stats(nf=1 << 14)
    assert cache_bytes(small, "compact", 1 << 17) > cache_bytes(small, "compact", 1 << 14)


def test_chunk_and_piece_rows_default_and_asked_for():
    p = plan(budget=GB)
    assert (p.chunk_rows, p.piece_rows, p.per_chunk, p.n_chunks) == (1 << 16, 1 << 12, 16, 16)
    assert p.n_chunks == -(-len(p.pieces()) // p.per_chunk)
    small = plan(stats(n_groups=4, rows=8000, nf=1 << 14), budget=GB)  # 32k rows: 16 chunks
    assert (small.chunk_rows, small.piece_rows, small.n_chunks) == (2000, 125, 16)
    asked = plan(budget=GB, chunk_rows=5000, piece_rows=100)
    assert (asked.chunk_rows, asked.piece_rows, asked.per_chunk) == (5000, 100, 50)


def test_smaller_chunks_rather_than_fewer_buffers():
    roomy = plan(budget=GB)
    assert roomy.chunk_rows == 1 << 16 and roomy.split.n_buffers == buffers_wanted(2)
    tight = plan(budget=300 * 10**6)
    assert tight.chunk_rows == 1 << 15 and tight.split.n_buffers == buffers_wanted(2)
    tighter = plan(budget=100 * 10**6)  # halving stops at MIN_BUFFERED_CHUNK_ROWS
    assert tighter.chunk_rows == MIN_BUFFERED_CHUNK_ROWS
    assert 2 <= tighter.split.n_buffers < buffers_wanted(2)
    kept = plan(budget=100 * 10**6, chunk_rows=1 << 16)  # asked for: kept, fewer buffers
    assert kept.chunk_rows == 1 << 16 and kept.split.n_buffers == 2


def test_halved_down_to_the_minimum_then_refused_naming_it():
    s = stats()
    assert plan(s, budget=30 * 10**6).chunk_rows == MIN_CHUNK_ROWS
    with pytest.raises(ResourceError, match=r"the minimum here is 28.0 MB \(25.2 MB of w views"):
        plan(s, budget=27 * 10**6)
    with pytest.raises(ResourceError, match="smaller chunk_rows"):
        plan(s, budget=60 * 10**6, chunk_rows=1 << 16)


def test_readers_and_ingest_from_the_budget():
    p = plan(budget=GB)
    assert p.n_readers == 2 and p.ingest > 0 and p.split.ingest == p.ingest
    assert plan(budget=GB, n_readers=1).n_readers == 1
    assert plan(budget=50 * 10**6).n_readers == 1  # one batch's peak fits, not two
    assert "chunks of" in p.describe() and "compact" in plan(memory=0).describe()


def test_the_plan_is_frozen():
    p = plan()
    with pytest.raises(AttributeError):
        p.chunk_rows = 1
