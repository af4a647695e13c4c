"""Threads sharing w: the hot set, the slots' round trip, sigma', and the w(alpha) rebuild."""

import numpy as np
import scipy.sparse as sp

from snapfit.engine import Devices, InMemorySource, Problem, Trainer, shared
from snapfit.engine.shared import HotSlots, choose_hot
from snapfit.inputs import csr_chunks
from snapfit.solvers import cpu


def test_hot_features_by_row_fraction_most_frequent_first(monkeypatch):
    counts = np.array([0, 50, 11, 10, 9, 1000, 12])
    np.testing.assert_array_equal(choose_hot(counts, n_rows=1000), [1, 2, 5, 6])
    monkeypatch.setattr(shared, "MAX_HOT", 2)
    np.testing.assert_array_equal(choose_hot(counts, n_rows=1000), [1, 5])


def test_tag_then_fold_gives_w_back_and_tags_only_hot_entries():
    slots = HotSlots(10, 2)
    slots.w[:] = np.arange(11) - 4.5
    slots.hot = np.array([2, 7, 10])
    before = slots.w.copy()
    slots.tag()
    assert np.isnan(slots.w[slots.hot]).all()
    np.testing.assert_array_equal(np.delete(slots.w, slots.hot), np.delete(before, slots.hot))
    rows = slots.buf[11:].reshape(4, slots.stride)  # own rows, then published ones
    rows[1, 1:4] += [1.0, 2.0, 3.0]  # thread 1's moves on the three hot coordinates
    slots.fold()
    np.testing.assert_array_equal(slots.w[slots.hot], before[slots.hot] + [1.0, 2.0, 3.0])
    assert not slots.buf[11:].any()


D = 3000


def _trainer(share: bool, n_cpu: int = 2, sigma=None):
    """2000 rows over 3000 features, ~6 rows each (cold), and column 0 in every row (hot)."""
    rng = np.random.default_rng(0)
    X = sp.random(2000, D - 1, density=0.003, random_state=1, format="csr", dtype=np.float32)
    X = sp.hstack([np.ones((2000, 1), np.float32), X], format="csr")
    y = np.where(rng.random(2000) < 0.5, 1.0, -1.0).astype(np.float32)
    src = InMemorySource(csr_chunks(X, y, None, 500), D)
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


def test_exact_check_rebuilds_w_of_alpha_after_lost_updates():
    tr, X, y = _trainer(True)
    try:
        for _ in range(3):
            tr.run_epoch()
        np.testing.assert_array_equal(tr.slots.hot, [0, D])  # the dense column, the intercept
        assert tr.drifted
        tr.w[5] += 0.25  # what a lost update on a cold coordinate leaves behind
        alpha = tr.alpha()
        primal, dual, gap = tr.exact_objective()
        exact = np.zeros(D + 1)
        args = (X.indptr.astype(np.int64), X.indices, X.data, True, y, cpu.EMPTY_F32, False)
        cpu.accumulate_w(*args, 1.0, 1.0, 1.0, alpha, exact)
        np.testing.assert_allclose(tr.w, exact, rtol=0, atol=1e-12)
        loss, ent, _ = cpu.chunk_objective(*args, 1.0, 1.0, 1.0, alpha, exact)
        wsq = exact @ exact
        assert abs(primal - (0.5 * wsq + loss)) <= 1e-9 * primal
        assert abs(dual - (-0.5 * wsq - ent)) <= 1e-9 * primal
        assert not tr.drifted
    finally:
        tr.close()


def test_a_larger_sigma_moves_w_by_its_share_as_one_view(monkeypatch):
    """As in a Dask part (sigma' = 2): the group's view moves by sigma' times the dual steps and
    w by 1/sigma' of that, so w = w(alpha). Every feature hot here: no update can be lost."""
    monkeypatch.setattr(shared, "HOT_FRACTION", 0.0)
    tr, X, y = _trainer(True, n_cpu=2, sigma=2.0)
    try:
        tr.run_epoch()
        assert len(tr.slots.hot) == len(np.unique(X.indices)) + 1
        exact = np.zeros(D + 1)
        args = (X.indptr.astype(np.int64), X.indices, X.data, True, y, cpu.EMPTY_F32, False)
        cpu.accumulate_w(*args, 1.0, 1.0, 1.0, tr.alpha(), exact)
        np.testing.assert_allclose(tr.w, exact, rtol=1e-12, atol=1e-14)
        assert np.linalg.norm(exact) > 0.1
    finally:
        tr.close()
