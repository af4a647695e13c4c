"""Row orders and epoch plans: reproducible from their keys, and real permutations."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from snapfit.engine.workers import Item, item_rows, plan_epoch, row_order, slice_rows


@settings(deadline=None)  # the first example JIT-compiles the shuffle when nothing else has
@given(n=st.integers(0, 5000), bucket=st.integers(1, 9), seed=st.integers(0, 2**32))
def test_row_order_is_a_permutation_fixed_by_its_key(n, bucket, seed):
    rows = row_order(n, bucket, [seed, 3, 1])
    assert rows.dtype == np.int64
    assert np.array_equal(np.sort(rows), np.arange(n))
    assert np.array_equal(rows, row_order(n, bucket, [seed, 3, 1]))
    if bucket > 1 and n:
        starts = rows[np.r_[0, np.flatnonzero(np.diff(rows) != 1) + 1]]
        assert np.all(starts % bucket == 0)  # whole buckets of consecutive rows


def test_row_orders_of_other_epochs_and_chunks_differ_and_look_uniform():
    n = 1000
    a, b, c = (row_order(n, 1, key) for key in ([0, 1, 0], [0, 2, 0], [0, 1, 1]))
    assert not np.array_equal(a, b) and not np.array_equal(a, c)
    # Where row 0 lands over many epochs: roughly uniform (a chi-square far from its tail).
    where = np.array([np.flatnonzero(row_order(n, 1, [7, e, 0]) == 0)[0] for e in range(4000)])
    counts = np.bincount(where // 100, minlength=10)
    chi2 = ((counts - 400.0) ** 2 / 400.0).sum()
    assert chi2 < 40  # 9 degrees of freedom: P(chi2 > 40) < 1e-5


@settings(deadline=None)
@given(n=st.integers(0, 5000), n_slices=st.integers(2, 4), seed=st.integers(0, 2**32))
def test_the_slices_of_a_cut_chunk_partition_its_rows_fixed_by_their_key(n, n_slices, seed):
    parts = [
        item_rows(Item(0, t, slice=t, n_slices=n_slices), n, 1, [seed, 2]) for t in range(n_slices)
    ]
    assert all(p.dtype == np.int64 for p in parts)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(n))
    assert np.array_equal(parts[0], slice_rows(n, 0, n_slices, [seed, 2, 0]))
    assert np.array_equal(parts[-1], slice_rows(n, n_slices - 1, n_slices, [seed, 2, 0]))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 64  # as many blocks each, blocks within a row of each other


def test_slices_of_other_epochs_differ_and_look_uniform():
    """Each thread of a cut chunk shuffles its own rows (``slice_rows``): over many epochs row 0
    falls in either slice about as often, anywhere in it."""
    n = 1000
    assert not np.array_equal(slice_rows(n, 0, 2, [0, 1, 0]), slice_rows(n, 0, 2, [0, 2, 0]))
    first, where = 0, []
    for e in range(4000):
        part = slice_rows(n, 0, 2, [7, e, 0])
        hit = np.flatnonzero(part == 0)
        if len(hit):
            first += 1
            where.append(hit[0] * 10 // len(part))
    assert 1800 < first < 2200  # binomial(4000, 1/2): 6 standard deviations
    counts = np.bincount(where, minlength=10)
    expected = first / 10
    assert ((counts - expected) ** 2 / expected).sum() < 40  # 9 degrees of freedom


def test_plan_epoch_deals_every_chunk_once_or_splits_when_few():
    rng = np.random.default_rng(0)
    order, plan = plan_epoch([10, 20, 30, 40, 50], 2, rng)
    assert sorted(order) == list(range(5))
    assert sorted(it.k for items in plan for it in items) == list(range(5))
    order, plan = plan_epoch([10], 2, rng)
    slices = [(it.k, it.slice, it.n_slices) for items in plan for it in items]
    assert slices == [(0, 0, 2), (0, 1, 2)]


def test_units_that_defer_completion_never_starve_the_source():
    """Two units that complete an item only when the next one comes (as GPUs do), fed by a
    source with two buffers (a chunk needs a free one to be read): each unit completes what it
    holds whenever nothing more is queued for it, so the pass ends instead of deadlocking."""
    import threading

    from snapfit.engine.workers import Item, ThreadGroup

    buffers = threading.Semaphore(2)
    n = 10

    def chunks():
        for k in range(n):
            # a hang guard, not a timing check: a correct pass frees a buffer at once
            assert buffers.acquire(timeout=120), "the source starved: every buffer is held"
            yield k, None

    held = [None, None]

    def run(t, item, chunk):  # complete the previous item, keep this one
        prev, held[t] = held[t], item
        return [] if prev is None else [(prev, t)]

    def flush(t):
        prev, held[t] = held[t], None
        return [] if prev is None else [(prev, t)]

    plan = [[Item(k, k % 2, k // 2) for k in range(n) if k % 2 == t] for t in range(2)]
    group = ThreadGroup(2)
    try:
        done = group.run(chunks(), plan, run, lambda k: buffers.release(), flush)
    finally:
        group.close()
    assert sorted(it.k for it, _ in done) == list(range(n))


def test_shuffle_drawing_partners_ahead_is_the_plain_fisher_yates():
    """The prefetching shuffle draws the same partners as the plain loop (rows orders, and so
    every fit and checkpoint, are unchanged by it), at every length around its look-ahead."""
    from snapfit.engine.workers import _AHEAD, _shuffled

    def plain(n, key):
        out, x, mask = np.arange(n), key, (1 << 64) - 1
        for i in range(n - 1, 0, -1):
            x = (x + 0x9E3779B97F4A7C15) & mask
            z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
            z ^= z >> 31
            j = int(float(z >> 11) * 1.1102230246251565e-16 * (i + 1))
            out[i], out[j] = out[j], out[i]
        return out

    for n in [0, 1, 2, _AHEAD - 1, _AHEAD, _AHEAD + 1, _AHEAD + 2, 1000]:
        np.testing.assert_array_equal(_shuffled(n, 12345), plain(n, 12345))
