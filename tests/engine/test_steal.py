"""Rows of a cut chunk follow the cores: a thread done early takes the slowest's rows."""

import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapfit.engine import steal
from snapfit.solvers import cpu
from tests.engine.test_shared import D, _trainer


def _race(board, slices, delays, k=0, starts=None):
    """Every thread ``t`` runs ``board.run(k, t, slices[t], ...)`` at once, sleeping
    ``delays[t]`` per block (after ``starts[t]`` first); the blocks each ran, and the sums."""
    ran = [[] for _ in slices]
    sums = [None] * len(slices)

    def work(t):
        time.sleep(starts[t] if starts else 0.0)

        def fn(block):
            ran[t].append(block.copy())
            time.sleep(delays[t])
            return float(len(block)), float(block.sum())

        sums[t] = board.run(k, t, slices[t], fn)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(len(slices))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return ran, sums


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 400), min_size=2, max_size=4),
    delays=st.lists(st.sampled_from([0.0, 0.0005, 0.002]), min_size=4, max_size=4),
    min_block=st.integers(1, 16),
    seed=st.integers(0, 2**16),
)
def test_every_row_runs_once_whatever_the_threads_speeds(sizes, delays, min_block, seed):
    rows = np.random.default_rng(seed).permutation(sum(sizes))
    slices = np.split(rows, np.cumsum(sizes)[:-1])
    board = steal.RowBoard(len(sizes), min_block=min_block, max_block=4 * min_block)
    ran, sums = _race(board, slices, delays[: len(sizes)])
    every = np.concatenate([b for blocks in ran for b in blocks] or [np.zeros(0, int)])
    np.testing.assert_array_equal(np.sort(every), np.arange(len(rows)))
    assert sum(s[0] for s in sums) == len(rows) and sum(s[1] for s in sums) == rows.sum()
    for t, blocks in enumerate(ran):  # a thread starts at the front of its own rows
        if len(slices[t]):
            np.testing.assert_array_equal(blocks[0], slices[t][: len(blocks[0])])
    assert board.stolen.sum() <= len(rows)


def test_a_slow_thread_is_relieved_until_both_end_together():
    rows = np.arange(4000)
    board = steal.RowBoard(2, min_block=50, max_block=200)
    ran, _ = _race(board, [rows[:2000], rows[2000:]], [0.004, 0.0])
    mine = sum(len(b) for b in ran[0])
    assert board.stolen[1] > 1000 > board.stolen[0]
    assert mine < 1500  # thread 1 ran many blocks while thread 0 ran each of its own


def test_blocks_shrink_from_the_largest_to_the_smallest_as_rows_run_out():
    board = steal.RowBoard(1, min_block=10, max_block=100)
    ran, sums = _race(board, [np.arange(2000)], [0.0])
    sizes = [len(b) for b in ran[0]]
    assert sizes[0] == 100 and sizes[-1] <= 10 and sum(sizes) == 2000
    assert all(np.diff(sizes) <= 0) and min(sizes[:-1]) == 10
    assert sums[0][0] == 2000.0


def test_a_thread_that_comes_late_runs_its_own_rows_and_takes_nothing_gone():
    board = steal.RowBoard(2, min_block=10)
    rows = np.arange(300)
    ran, sums = _race(board, [rows[:100], rows[100:]], [0.0, 0.0], starts=[0.0, 0.2])
    assert sum(len(b) for b in ran[0]) == 100 and sum(len(b) for b in ran[1]) == 200
    assert board.stolen.sum() == 0 and sums[1] == (200.0, float(rows[100:].sum()))


def test_a_sharing_pass_gives_a_slow_threads_rows_to_the_other(monkeypatch):
    """One chunk, cut between two threads sharing w; thread 0 sleeps after every block, so
    thread 1 takes most of its rows. Every row is still visited once: its dual moved, the
    epoch's dual (its entropy summed over every block, whoever ran it) is the exact one, and
    w is w(alpha) (every feature in two rows or more is hot: no update can be lost)."""
    monkeypatch.setattr(steal, "MIN_BLOCK", 16)
    monkeypatch.setattr(steal, "MAX_BLOCK", 64)
    boards = []

    class Spy(steal.RowBoard):
        def __init__(self, n_threads):
            super().__init__(n_threads)
            boards.append(self)

    monkeypatch.setattr("snapfit.engine.trainer.RowBoard", Spy)
    tr, X, y = _trainer(True, chunk_rows=2000)
    real = tr.slots.run

    def slow(me, *args):
        if me == 0:
            time.sleep(0.01)
        return real(me, *args)

    monkeypatch.setattr(tr.slots, "run", slow)
    try:
        assert set(tr.slots.hot) == set(np.flatnonzero(np.bincount(X.indices) >= 2))
        rec = tr.run_epoch()
        assert len(boards) == 1 and boards[0].stolen[1] > 500 and boards[0].stolen[0] < 200
        alpha = tr.alpha()
        assert np.count_nonzero(alpha) == 2000
        exact = np.zeros(D + 1)
        args = (X.indptr.astype(np.int64), X.indices, X.data, True, y, cpu.EMPTY_F32, False)
        cpu.accumulate_w(*args, 1.0, 1.0, 1.0, alpha, exact)
        np.testing.assert_allclose(tr.coef(), exact, rtol=1e-12, atol=1e-14)
        _, ent, _ = cpu.chunk_objective(*args, 1.0, 1.0, 1.0, alpha, exact)
        assert rec.dual == pytest.approx(-0.5 * exact @ exact - ent, rel=1e-12)
    finally:
        tr.close()


def test_threads_that_do_not_share_w_keep_their_own_rows(monkeypatch):
    """CoCoA+ threads are reproducible for a seed: no board, each its own slice."""
    made = []
    monkeypatch.setattr("snapfit.engine.trainer.RowBoard", lambda n: made.append(n))
    tr, _, _ = _trainer(False, chunk_rows=2000)
    try:
        tr.run_epoch()
        assert made == []
    finally:
        tr.close()
