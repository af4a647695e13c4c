"""Rows of a cut chunk follow the cores: a thread done early takes the slowest's rows.

No test here depends on how the machine schedules threads: the board's rule is played on one
thread in an explicit interleaving (``_play``), and the trainer's race is forced into one
order with events (a slow thread is one that is made to wait, not one that sleeps).
"""

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapfit.engine import steal
from snapfit.solvers import cpu
from tests.engine.test_shared import D, _trainer

GUARD_S = 120  # a deadlock guard only: each wait below ends as soon as the other thread acts


def _play(board, slices, schedule, k=0):
    """Thread ``t`` of ``board`` runs ``slices[t]`` as ``RowBoard.run`` does (``start``, then
    ``take`` until None), one step per entry of ``schedule`` (a thread id; a thread's first
    step is its ``start``), then every unfinished thread in turn until all are done. Returns
    the blocks each thread ran and each thread's ``(rows, sum of row ids)``."""
    n = len(slices)
    started, done = [False] * n, [False] * n
    ran = [[] for _ in range(n)]

    def step(t):
        if done[t]:
            return
        if not started[t]:
            board.start(k, t, slices[t])
            started[t] = True
            return
        block = board.take(k, t)
        if block is None:
            done[t] = True
        else:
            ran[t].append(block.copy())

    for t in schedule:
        step(t)
    while not all(done):
        for t in range(n):
            step(t)
    sums = [(sum(len(b) for b in bl), sum(int(b.sum()) for b in bl)) for bl in ran]
    return ran, sums


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 400), min_size=2, max_size=4),
    schedule=st.lists(st.integers(0, 3), max_size=200),
    min_block=st.integers(1, 16),
    seed=st.integers(0, 2**16),
)
def test_every_row_runs_once_in_any_interleaving(sizes, schedule, min_block, seed):
    rows = np.random.default_rng(seed).permutation(sum(sizes))
    slices = np.split(rows, np.cumsum(sizes)[:-1])
    board = steal.RowBoard(len(sizes), min_block=min_block, max_block=4 * min_block)
    ran, sums = _play(board, slices, [t for t in schedule if t < len(sizes)])
    every = np.concatenate([b for blocks in ran for b in blocks] or [np.zeros(0, int)])
    np.testing.assert_array_equal(np.sort(every), np.arange(len(rows)))
    assert sum(s[0] for s in sums) == len(rows) and sum(s[1] for s in sums) == rows.sum()
    for t, blocks in enumerate(ran):  # a thread starts at the front of its own rows
        if len(slices[t]):
            np.testing.assert_array_equal(blocks[0], slices[t][: len(blocks[0])])
    assert board.stolen.sum() <= len(rows)


def test_the_threaded_run_visits_every_row_once_and_sums_what_each_block_returned():
    """``run`` on real threads (whatever order they run in): the rows and sums add up."""
    rows = np.random.default_rng(0).permutation(3000)
    slices = [rows[:500], rows[500:2500], rows[2500:]]
    board = steal.RowBoard(3, min_block=8, max_block=64)
    ran = [[] for _ in slices]
    sums = [None] * 3

    def work(t):
        def fn(block):
            ran[t].append(block.copy())
            return float(len(block)), float(block.sum())

        sums[t] = board.run(0, t, slices[t], fn)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    np.testing.assert_array_equal(
        np.sort(np.concatenate([b for r in ran for b in r])), np.arange(3000)
    )
    assert sum(s[0] for s in sums) == 3000.0 and sum(s[1] for s in sums) == float(rows.sum())


def test_a_slow_thread_is_relieved_until_both_end_together():
    """Thread 1 takes eight blocks for each of thread 0's: it runs its own rows, then takes
    the back half of thread 0's again and again, until thread 0 has under 2 min_block left."""
    rows = np.arange(4000)
    board = steal.RowBoard(2, min_block=50, max_block=200)
    schedule = [0, 1] + ([0] + [1] * 8) * 200
    ran, sums = _play(board, [rows[:2000], rows[2000:]], schedule)
    assert board.stolen[0] == 0 and board.stolen[1] > 1000
    assert sums[0][0] < 1000 and sums[0][0] + sums[1][0] == 4000
    # both end together: thread 0's last blocks are the small ones it was left (< 2 * 50)
    assert len(ran[0][-1]) < 50


def test_blocks_shrink_from_the_largest_to_the_smallest_as_rows_run_out():
    board = steal.RowBoard(1, min_block=10, max_block=100)
    ran, sums = _play(board, [np.arange(2000)], [])
    sizes = [len(b) for b in ran[0]]
    assert sizes[0] == 100 and sizes[-1] <= 10 and sum(sizes) == 2000
    assert all(np.diff(sizes) <= 0) and min(sizes[:-1]) == 10
    assert sums[0][0] == 2000


def test_a_thread_that_comes_late_runs_its_own_rows_and_takes_nothing_gone():
    """Thread 0 runs all its rows before thread 1 starts: there was nothing of thread 1's to
    take (its slice was not on the board yet), and thread 1 then runs all of its own."""
    board = steal.RowBoard(2, min_block=10)
    rows = np.arange(300)
    ran, sums = _play(board, [rows[:100], rows[100:]], [0] * 50)
    assert sums[0] == (100, int(rows[:100].sum())) and sums[1] == (200, int(rows[100:].sum()))
    assert board.stolen.sum() == 0


def test_a_sharing_pass_gives_a_slow_threads_rows_to_the_other(monkeypatch):
    """One chunk, cut between two threads sharing w. Thread 0 runs one block, then waits
    until thread 1 has run all of its own rows and taken all it could of thread 0's; thread
    1 starts only after thread 0's first block (the order is forced, not left to the cores).
    Every row is still visited once: its dual moved, the epoch's dual (its entropy summed
    over every block, whoever ran it) is the exact one, and w is w(alpha) (every feature in
    two rows or more is hot: no update can be lost)."""
    monkeypatch.setattr(steal, "MIN_BLOCK", 16)
    monkeypatch.setattr(steal, "MAX_BLOCK", 64)
    boards, slices, first = [], {}, []
    zero_went, one_done = threading.Event(), threading.Event()

    class Forced(steal.RowBoard):
        def __init__(self, n_threads):
            super().__init__(n_threads)
            boards.append(self)

        def run(self, k, t, rows, fn):
            slices[t] = len(rows)
            if t == 1:
                assert zero_went.wait(GUARD_S), "thread 0 never ran its first block"
            try:
                return super().run(k, t, rows, fn)
            finally:
                if t == 1:
                    one_done.set()

        def take(self, k, t):
            if t == 0 and first:
                assert one_done.wait(GUARD_S), "thread 1 never finished"
            block = super().take(k, t)
            if t == 0 and not first:
                first.append(len(block))
                zero_went.set()
            return block

    monkeypatch.setattr("snapfit.engine.trainer.RowBoard", Forced)
    tr, X, y = _trainer(True, chunk_rows=2000)
    try:
        assert set(tr.slots.hot) == set(np.flatnonzero(np.bincount(X.indices) >= 2))
        rec = tr.run_epoch()
        assert len(boards) == 1 and sorted(slices) == [0, 1] and sum(slices.values()) == 2000
        # thread 1 took the back half of what thread 0 had left until under 2 MIN_BLOCK were
        left = slices[0] - first[0] - boards[0].stolen[1]
        assert boards[0].stolen[0] == 0 and 0 <= left < 2 * 16 and boards[0].stolen[1] > 500
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
