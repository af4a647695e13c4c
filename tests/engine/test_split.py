"""The proportional split of rows between units, and the rate meter behind it."""

import numpy as np
import pytest

from snapfit.engine.split import RateMeter, Span, proportional_split


def _rows_per_unit(plan):
    return [sum(p.hi - p.lo for p in spans) for spans in plan]


def _covers_every_row_once(plan, chunk_rows):
    seen = [np.zeros(n, int) for n in chunk_rows]
    for spans in plan:
        for p in spans:
            seen[p.k][p.lo : p.hi] += 1
    return all((s == 1).all() for s in seen)


def test_one_chunk_is_cut_in_proportion():
    plan = proportional_split([100], [3.0, 1.0, 1.0])
    assert plan == [[Span(0, 0, 60)], [Span(0, 60, 80)], [Span(0, 80, 100)]]


def test_residue_goes_to_the_last_unit_and_no_row_is_lost():
    rows = [7, 13, 5]
    plan = proportional_split(rows, [1.0, 1.0, 1.0], order=[2, 0, 1], align=False)
    assert _covers_every_row_once(plan, rows)
    assert sum(_rows_per_unit(plan)) == 25
    assert plan[0][0].k == 2  # chunks are laid out in the given order


def test_many_chunks_go_whole_to_one_unit():
    rows = [10] * 8
    plan = proportional_split(rows, [3.0, 1.0])
    assert _rows_per_unit(plan) == [60, 20]
    assert all(p.lo == 0 and p.hi == 10 for spans in plan for p in spans)
    assert _covers_every_row_once(plan, rows)


def test_zero_rate_and_empty_units():
    plan = proportional_split([10, 10], [0.0, 1.0])
    assert plan[0] == [] and _rows_per_unit(plan) == [0, 20]
    plan = proportional_split([1], [1.0, 1.0, 1.0])
    assert _rows_per_unit(plan) == [0, 0, 1] or sum(_rows_per_unit(plan)) == 1
    for bad in ([], [0.0, 0.0], [1.0, -1.0], [np.inf]):
        with pytest.raises(ValueError, match="rates"):
            proportional_split([5], bad)


@pytest.mark.parametrize("seed", range(5))
def test_random_splits_are_partitions_close_to_the_shares(seed):
    rng = np.random.default_rng(seed)
    rows = rng.integers(1, 50, size=rng.integers(1, 12)).tolist()
    rates = rng.uniform(0.1, 5.0, size=rng.integers(1, 5))
    plan = proportional_split(rows, rates, order=rng.permutation(len(rows)), align=False)
    assert _covers_every_row_once(plan, rows)
    share = np.array(_rows_per_unit(plan)) / sum(rows)
    assert np.abs(share - rates / rates.sum()).max() <= 1.0 / sum(rows) + 1e-12


def test_rate_meter_smooths_and_keeps_idle_units():
    m = RateMeter([8.0, 1.0], smoothing=0.5)
    m.update(0, 100, 1.0)  # first measurement replaces the prior
    m.update(0, 300, 1.0)
    m.update(1, 0, 1.0)  # nothing processed: the prior stays
    m.update(1, 10, 0.0)
    assert m.rates.tolist() == [200.0, 1.0]
