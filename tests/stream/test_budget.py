import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snapfit.errors import ResourceError
from snapfit.stream import parse_memory_budget, plan_budget
from snapfit.stream.budget import RUNTIME_NBYTES


@pytest.mark.parametrize(
    "text, expected",
    [("2GB", 2 * 10**9), ("512MB", 512 * 10**6), ("1.5GiB", 3 * 2**29), ("800M", 800 * 10**6),
     (" 10 kb ", 10_000), (12345, 12345)],
)  # fmt: skip
def test_parse(text, expected):
    assert parse_memory_budget(text) == expected


@given(
    st.floats(0.001, 1e6, allow_nan=False),
    st.sampled_from(["", "b", "B", "kB", "k", "K", "KiB", "MB", "M", "mib", "GB", "g", "TB"]),
    st.sampled_from(["", " "]),
)
def test_parse_agrees_with_dask(number, unit, space):
    from dask.utils import parse_bytes

    text = f"{number!r}{space}{unit}"
    expected = parse_bytes(text)
    if expected > 0:
        assert parse_memory_budget(text) == expected
    else:
        with pytest.raises(ValueError, match="not a positive size"):
            parse_memory_budget(text)


@pytest.mark.parametrize("bad", ["two GB", "5XB", "", "0MB", -3, "-1GB"])
def test_parse_rejects(bad):
    with pytest.raises(ValueError):
        parse_memory_budget(bad)


def test_too_small_names_the_minimum():
    with pytest.raises(ResourceError, match=r"minimum here is \d+\.\d MB \([\d.]+ MB of w views"):
        plan_budget(10**6, n_features=2**20, n_jobs=2, n_rows=10, max_chunk_bytes=10**6,
                    ingest_bytes=10**6)  # fmt: skip
    with pytest.raises(ResourceError, match=r"minimum here is 100.0 MB \(the first pass decodes "
                       r"a batch of 100.0 MB; training needs"):  # fmt: skip
        plan_budget(10**6, n_features=2**20, n_jobs=2, n_rows=10, max_chunk_bytes=10**6,
                    ingest_bytes=10**8)  # fmt: skip


def test_dual_spills_when_it_would_not_fit():
    plan = plan_budget(50 * 10**6, n_features=10, n_jobs=1, n_rows=10**7, max_chunk_bytes=10**6,
                       ingest_bytes=10**6)  # fmt: skip
    assert plan.spill_dual and plan.resident > 0


def test_pool_aims_for_four_buffers_per_thread_within_half_of_the_rest():
    kw = dict(n_features=10, n_jobs=2, n_rows=1000, max_chunk_bytes=10**6)
    plan = plan_budget(300 * 10**6, **kw)
    assert plan.n_buffers == 8 and not plan.spill_dual
    # the runtime allowance comes out of the resident share
    assert plan.resident == 300 * 10**6 - plan.fixed - 8 * 10**6 - 8000 - RUNTIME_NBYTES
    small = plan_budget(10 * 10**6, **kw)  # half of what is left holds 4
    assert small.n_buffers == 4
    left = 10 * 10**6 - small.fixed - 4 * 10**6 - 8000  # at most half goes to the runtime
    assert small.resident == left - left // 2


def test_a_chunk_size_asked_for_is_kept(small_parquet):
    from snapfit.data import Dataset
    from snapfit.train import stream_dataset

    with stream_dataset(Dataset(small_parquet), 3_000_000, n_units=2, chunk_rows=4000) as src:
        assert src.chunk_rows_target == 4000 and src.plan.n_buffers < 8


def test_sweep_removes_only_dead_processes_dirs(tmp_path):
    import subprocess
    import sys

    from snapfit.engine.state import temp_prefix
    from snapfit.stream.cache import sweep_stale

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    mine = temp_prefix("cache")
    stale = tmp_path / (mine.replace(f"-{os.getpid()}-", f"-{dead}-") + "abc123")
    live = tmp_path / (mine + "xyz_9")
    other = tmp_path / "snapfit-cache-otherhost-1-abc"
    for d in (stale, live, other):
        d.mkdir()
        (d / "pieces.bin").write_bytes(b"x" * 8192)
    assert sweep_stale(str(tmp_path)) >= 8192
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])
