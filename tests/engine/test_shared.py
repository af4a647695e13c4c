"""Threads sharing w: the hot set, the views' round trip, sigma', and the w(alpha) rebuild."""

import gc
import inspect

import numpy as np
import pytest
import scipy.sparse as sp

from snapfit.data.chunk import Chunk
from snapfit.engine import Devices, InMemorySource, Problem, Trainer, shared
from snapfit.engine.alias import page_entries
from snapfit.engine.shared import HotSlots, choose_hot
from snapfit.inputs import csr_chunks
from snapfit.solvers import cpu


def test_hot_features_most_frequent_first_in_tiers_by_row_fraction(monkeypatch):
    counts = np.array([0, 50, 11, 10, 3, 1000, 12, 1, 2])
    hot, ends = choose_hot(counts, n_rows=1000)
    np.testing.assert_array_equal(hot, [5, 1, 6, 2, 3, 4, 8])  # in two rows or more
    # > 1 % of the rows, > 0.25 %, > 0.0625 %, > 0.0156 %, the rest
    np.testing.assert_array_equal(ends, [4, 6, 7, 7, 7])
    monkeypatch.setattr(shared, "MAX_HOT", 2)
    hot, ends = choose_hot(counts, n_rows=1000)
    np.testing.assert_array_equal(hot, [5, 1])
    np.testing.assert_array_equal(ends, [2, 2, 2, 2, 2])
    slots = HotSlots(9, 2)
    with pytest.raises(ValueError, match="tiers"):
        slots.set_hot([5, 1], [1, 2])


def test_tag_then_fold_gives_w_back_with_the_threads_moves():
    slots = HotSlots(10, 2)
    h0 = slots.h0
    assert h0 % page_entries() == 0 and h0 >= 10
    code = slots.set_hot([2, 7])
    np.testing.assert_array_equal(code, [0, 1, h0, 3, 4, 5, 6, h0 + 1, 8, 9])
    real = np.arange(11) - 4.5
    slots.w[:] = slots.to_ext(real)
    np.testing.assert_array_equal(slots.to_real(slots.w), real)
    assert slots.w[2] == slots.w[7] == 0.0 and slots.w[h0] == real[2] and slots.w[-1] == real[10]
    assert not slots.w[10:h0].any()
    before = slots.w.copy()
    slots.tag()
    v0, v1 = slots.views
    np.testing.assert_array_equal(v1, before)  # cold: the same memory; hot: copied
    np.testing.assert_array_equal(slots.pub[0, : slots.n_slots], before[h0:])
    np.testing.assert_array_equal(slots.seen[1, 0, : slots.n_slots], before[h0:])
    v1[3] += 0.5  # a cold move of thread 1 is thread 0's at once
    assert v0[3] == real[3] + 0.5
    slots.pub[1, [0, 1, slots.n_slots - 1]] += [1.0, 2.0, 3.0]  # thread 1's published moves
    slots.fold()
    moved = real.copy()
    moved[[2, 7, 10, 3]] += [1.0, 2.0, 3.0, 0.5]
    np.testing.assert_array_equal(slots.to_real(slots.w), moved)
    assert not slots.pub.any() and not slots.seen.any()


def test_views_outlive_their_owner_and_stay_apart_from_other_fits():
    """Each HotSlots maps its own memory; a slice of a view keeps that memory alive."""
    a, b = HotSlots(600, 2), HotSlots(600, 2)
    a.views[1][5] = 1.0
    assert a.w[5] == 1.0 and b.w[5] == 0.0 and b.views[1][5] == 0.0
    tail = a.views[1][:10]
    del a
    gc.collect()
    assert tail[5] == 1.0
    tail[6] = 2.0  # still mapped


def test_w_moves_to_the_new_order_when_the_hot_set_is_chosen():
    slots = HotSlots(6, 2)
    h0 = slots.h0
    real = np.arange(7.0) + 1
    slots.w[:] = slots.to_ext(real)  # no hot feature yet: the intercept is already last
    assert slots.w[-1] == 7.0 and not slots.w[6:-1].any()
    code = slots.choose(np.array([50, 0, 90, 1, 0, 0]), n_rows=100)
    np.testing.assert_array_equal(slots.hot, [2, 0])
    np.testing.assert_array_equal(slots.to_real(slots.w), real)
    indices = np.array([0, 1, 2, 3, 5, 2], np.int32)
    cpu.relabel(indices, code, indices)
    np.testing.assert_array_equal(indices, [h0 + 1, 1, h0, 3, 5, h0])
    again = indices.copy()
    cpu.relabel(again, code, again)  # relabeling twice is relabeling once
    np.testing.assert_array_equal(again, indices)
    counts = np.zeros(6, np.int64)
    cpu.count_columns(np.array([0, 6], np.int64), indices, counts, 1)  # relabeled ids skipped
    np.testing.assert_array_equal(counts, [0, 1, 0, 1, 0, 1])


def test_ids_that_leave_no_room_for_relabeling_are_refused():
    with pytest.raises(ValueError, match="deterministic=True"):
        HotSlots(2**31 - 100, 2)


D = 3000


def _trainer(share: bool, n_cpu: int = 2, sigma=None, chunk_rows: int = 500):
    """2000 rows over 3000 features, ~6 rows each (cold), and column 0 in every row (hot)."""
    rng = np.random.default_rng(0)
    X = sp.random(2000, D - 1, density=0.003, random_state=1, format="csr", dtype=np.float32)
    X = sp.hstack([np.ones((2000, 1), np.float32), X], format="csr")
    y = np.where(rng.random(2000) < 0.5, 1.0, -1.0).astype(np.float32)
    src = InMemorySource(csr_chunks(X, y, None, chunk_rows), D)
    prob = Problem(n_features=D, c_pos=1.0, c_neg=1.0, bias=1.0, seed=3, sigma=sigma)
    return Trainer(src, prob, src.make_state(), Devices(n_cpu=n_cpu, share_cpu=share)), X, y


def test_sigma_counts_sharing_threads_as_one_unit():
    assert Devices(n_cpu=4, share_cpu=True).cocoa_units == 1
    assert Devices(n_cpu=1, share_cpu=True).cocoa_units == 1
    beside_gpu = Devices(n_cpu=2, gpu_ids=(0,), share_cpu=True)
    assert not beside_gpu.shares_cpu and beside_gpu.cocoa_units == 3
    assert Devices(n_cpu=2, share_cpu=True).describe()["cpu_shared"] is True
    assert "cpu_shared" not in Devices(n_cpu=2).describe()  # old checkpoints still resume
    tr, _, _ = _trainer(True)
    try:
        assert tr.sigma == 1.0 and tr.slots is not None and tr.w is tr.slots.w
    finally:
        tr.close()


def test_syncs_come_less_often_while_the_period_is_a_small_fraction_of_the_rows(monkeypatch):
    """64 rows between first-tier syncs, doubled up to 512 while within 2e-4 of the rows; the
    trainer sizes the period from its own rows and its passes use it."""
    assert shared.sync_every(639_999) == 64 and shared.sync_every(640_000) == 128
    assert shared.sync_every(1_280_000) == 256 and shared.sync_every(2_559_999) == 256
    assert shared.sync_every(2_560_000) == 512 and shared.sync_every(10**10) == 512
    assert shared.sync_every(0) == 64
    monkeypatch.setattr(shared, "FREE_STALENESS", 128 / 2000)  # _trainer's 2000 rows
    periods = []
    real = cpu.cd_pass_views
    at = list(inspect.signature(real.py_func).parameters).index("every")

    def spy(*args):
        periods.append(args[at])
        return real(*args)

    monkeypatch.setattr(cpu, "cd_pass_views", spy)
    tr, _, _ = _trainer(True)
    try:
        assert tr.slots.every == 128
        tr.run_epoch()
        assert len(periods) == 4 and set(periods) == {128}  # 4 chunks of 500 rows
    finally:
        tr.close()
    monkeypatch.setattr(shared, "FREE_STALENESS", 128 / 2001)
    tr, _, _ = _trainer(True)
    try:
        assert tr.slots.every == 64
    finally:
        tr.close()


def test_the_hot_set_is_counted_on_every_step_th_row(monkeypatch):
    """Past ``COUNT_ROWS`` rows the hot set comes from the counts of every k-th row of each
    span (here whole chunks of 500 rows: rows 0, 4, 8, ... of the data)."""
    monkeypatch.setattr(shared, "COUNT_ROWS", 500)
    assert shared.count_step(2000) == 4 and shared.count_step(499) == 1
    tr, X, _ = _trainer(True)
    try:
        hot, ends = choose_hot(np.bincount(X[::4].indices, minlength=D), 500)
        np.testing.assert_array_equal(tr.slots.hot, hot)
        np.testing.assert_array_equal(tr.slots.ends, ends)
        assert hot[0] == 0 and len(hot) < len(choose_hot(np.bincount(X.indices), 2000)[0])
    finally:
        tr.close()


def test_exact_check_rebuilds_w_of_alpha_after_lost_updates(monkeypatch):
    monkeypatch.setattr(shared, "MAX_HOT", 1)
    tr, X, y = _trainer(True)
    try:
        for _ in range(3):
            tr.run_epoch()
        np.testing.assert_array_equal(tr.slots.hot, [0])  # the dense column (and the intercept)
        assert tr.drifted
        tr.w[5] += 0.25  # what a lost update on a cold coordinate leaves behind (ids kept)
        alpha = tr.alpha()
        primal, dual, gap = tr.exact_objective()
        exact = np.zeros(D + 1)
        args = (X.indptr.astype(np.int64), X.indices, X.data, True, y, cpu.EMPTY_F32, False)
        cpu.accumulate_w(*args, 1.0, 1.0, 1.0, alpha, exact)
        np.testing.assert_allclose(tr.coef(), exact, rtol=0, atol=1e-12)
        loss, ent, _ = cpu.chunk_objective(*args, 1.0, 1.0, 1.0, alpha, exact)
        wsq = exact @ exact
        assert abs(primal - (0.5 * wsq + loss)) <= 1e-9 * primal
        assert abs(dual - (-0.5 * wsq - ent)) <= 1e-9 * primal
        assert not tr.drifted
    finally:
        tr.close()


def test_a_larger_sigma_moves_w_by_its_share_as_one_view(monkeypatch):
    """As in a Dask part (sigma' = 2): the group's view moves by sigma' times the dual steps and
    w by 1/sigma' of that, so w = w(alpha). Every feature in two rows or more is hot here (the
    others have one writer): no update can be lost."""
    tr, X, y = _trainer(True, n_cpu=2, sigma=2.0)
    try:
        tr.run_epoch()
        assert set(tr.slots.hot) == set(np.flatnonzero(np.bincount(X.indices) >= 2))
        exact = np.zeros(D + 1)
        args = (X.indptr.astype(np.int64), X.indices, X.data, True, y, cpu.EMPTY_F32, False)
        cpu.accumulate_w(*args, 1.0, 1.0, 1.0, tr.alpha(), exact)
        np.testing.assert_allclose(tr.coef(), exact, rtol=1e-12, atol=1e-14)
        assert np.linalg.norm(exact) > 0.1
    finally:
        tr.close()


def test_the_fit_runs_on_relabeled_copies_and_gives_the_source_its_chunks_back():
    """The chunks are views of the caller's matrix: the fit relabels copies of their indices
    (the dense column becomes id h0, the first id past D's pages), never the matrix, and the
    source delivers the chunks as given once the trainer is closed."""
    tr, X, y = _trainer(True)
    given = list(tr.source._stored)
    before = X.indices.copy()
    try:
        assert all(np.shares_memory(c.indices, X.indices) for c in given)
        assert all((c.indices == tr.slots.h0).sum() == c.n_rows for c in tr.source.chunks)
        assert not any((c.indices == 0).any() for c in tr.source.chunks)
        tr.run_epoch()
        w = tr.coef()
    finally:
        tr.close()
    np.testing.assert_array_equal(X.indices, before)
    assert all(a is b for a, b in zip(tr.source.chunks, given, strict=True))
    assert tr.source._stored is None and w[0] != 0.0


def test_an_in_memory_source_relabels_copies_in_pieces_on_several_threads():
    rng = np.random.default_rng(1)
    d, nnz = 5000, 2_500_000  # more than one 2^20-entry piece per thread
    ids = rng.integers(0, d, nnz).astype(np.int32)
    chunk = Chunk(np.array([0, nnz // 2, nnz], np.int64), ids, None,
                  np.ones(2, np.float32), None)  # fmt: skip
    src = InMemorySource([chunk], d)
    code = np.arange(d, dtype=np.int32)
    code[[3, 70]] = [d, d + 1]
    src.relabel(code, n_threads=2)
    np.testing.assert_array_equal(src.chunks[0].indices, code[ids])
    assert not np.shares_memory(src.chunks[0].indices, ids) and (ids == 3).any()
    src.relabel(None)
    assert src.chunks[0] is chunk


def test_three_sharing_threads_reach_one_threads_optimum():
    """Three threads take the loop that damps the hot part of the curvature (``hot_damp``
    0.5); the fit's certified optimum is one thread's."""
    from snapfit.train import train

    rng = np.random.default_rng(4)
    X = sp.random(3000, 199, density=0.02, random_state=5, format="csr", dtype=np.float32)
    X = sp.hstack([np.ones((3000, 1), np.float32), X], format="csr")
    y = np.where(rng.random(3000) < 0.3, 1.0, -1.0).astype(np.float32)
    coefs = []
    for n_cpu in (1, 3):
        src = InMemorySource(csr_chunks(X, y, None, 1000), 200)
        prob = Problem(n_features=200, c_pos=0.1, c_neg=0.1, bias=1.0, tol=1e-8, max_iter=500,
                       seed=2)  # fmt: skip
        res = train(src, prob, devices=Devices(n_cpu=n_cpu, share_cpu=True))
        assert res.converged
        coefs.append(res.w)
    np.testing.assert_allclose(coefs[1], coefs[0], rtol=1e-3, atol=1e-4)


def test_hot_ids_that_would_not_fit_32_bits_are_refused_before_any_work():
    from snapfit.engine.shared import MAX_HOT, hot_base, hot_code

    assert hot_base(1 << 20) == 1 << 20  # a page multiple already
    assert hot_base((1 << 20) + 1) > (1 << 20) + 1
    code = hot_code(np.array([5, 2]), 10)
    assert list(code[[2, 5]]) == [hot_base(10) + 1, hot_base(10)] and code[3] == 3
    with pytest.raises(ValueError, match="no room in 32-bit ids; use deterministic=True"):
        hot_base(2**31 - MAX_HOT)
    with pytest.raises(ValueError, match="no room in 32-bit ids"):
        HotSlots(2**31 - MAX_HOT, 2)
