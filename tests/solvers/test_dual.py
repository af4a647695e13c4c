"""Properties of the scalar dual math (snapfit/solvers/dual.py), run as plain Python."""

import math

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from snapfit.solvers import dual

bounds = st.floats(1e-6, 1e6)
margins = st.floats(-50, 50)


def packed(frac, c):
    a = frac * c
    return dual.pack_alpha(a, c - a)


@given(m=margins, frac=st.floats(1e-9, 1 - 1e-9), c=bounds)
def test_row_gap_is_nonnegative(m, frac, c):
    assert dual.row_gap(m, packed(frac, c), c) >= -1e-9 * c * (1 + abs(m))


@given(m=margins, c=bounds)
def test_row_gap_vanishes_at_the_paired_alpha(m, c):
    # a = c * sigmoid(-m) and c - a = c * sigmoid(m), each formed without cancellation.
    a = c / (1 + math.exp(m))
    ca = c / (1 + math.exp(-m))
    g = dual.row_gap(m, dual.pack_alpha(a, ca), c)
    assert abs(g) <= 1e-9 * c * (1 + abs(m))


def subproblem(q, b, a0, c, a, ca):
    """The 1-d dual subproblem at ``a`` (with ``ca = c - a``), up to a constant."""
    ent = (a * math.log(a / c) if a > 0 else 0.0) + (ca * math.log(ca / c) if ca > 0 else 0.0)
    return 0.5 * q * (a - a0) ** 2 + b * (a - a0) + ent


@settings(max_examples=300)
@given(
    q=st.floats(1e-3, 1e4),
    b=st.floats(-100, 100),
    start=st.one_of(st.just(0.0), st.floats(1e-12, 1 - 1e-12)),
    c=bounds,
)
def test_row_update_stays_strictly_inside_and_solves_the_subproblem(q, b, start, c):
    s = packed(start, c) if start else 0.0
    a0, ca0 = dual.unpack_alpha(s, c)
    s_new, delta, gap, ent = dual.row_update(q, b, s, c)
    a, ca = dual.unpack_alpha(s_new, c)
    # Strictly inside: both sides positive (the smaller one is stored exactly, so it cannot
    # round to 0 even when c - a rounds to c).
    assert a > 0.0 and ca > 0.0
    assert math.isclose(a + ca, c, rel_tol=1e-15)
    assert math.isclose(a - a0, delta, rel_tol=1e-9, abs_tol=1e-12 * c)
    # The step lowers the subproblem, and is nearly exact: |g'| at the new point is at most
    # FORCING times its size at the start of the Newton iteration (or at rounding level).
    scale = 1 + abs(b) + q * c
    if a0 > 0.0:
        before = subproblem(q, b, a0, c, a0, ca0)
        assert subproblem(q, b, a0, c, a, ca) <= before + 1e-12 * scale * c
    grad = q * delta + b + math.log(a / ca)
    assert abs(grad) <= max(2 * dual.FORCING * (abs(b) + q * c + 50), 1e-6 * scale)
    # What it reports on the side is the row's gap before and its entropy after the step.
    assert math.isclose(gap, dual.row_gap(b, s, c), rel_tol=1e-9, abs_tol=1e-12 * c * scale)
    assert math.isclose(ent, dual.row_dual_entropy(s_new, c), rel_tol=1e-9, abs_tol=1e-12 * c)


@given(q=st.floats(1e-2, 1e3), b=st.floats(-20, 20), c=st.floats(1e-3, 1e3))
def test_repeated_row_updates_reach_the_exact_minimizer(q, b, c):
    # The forcing tolerance is relative to the start, so updating the same row again with the
    # margin it now has drives |g'| to rounding level: no accuracy is lost at convergence.
    s, a0 = 0.0, 0.0
    for _ in range(6):
        a, _ = dual.unpack_alpha(s, c)
        s, _, _, _ = dual.row_update(q, b + q * (a - a0), s, c)
    a, ca = dual.unpack_alpha(s, c)
    assert abs(q * (a - a0) + b + math.log(a / ca)) <= 1e-9 * (1 + abs(b) + q * c)


@given(frac=st.floats(1e-300, 1.0), c=bounds)
def test_packing_keeps_both_sides_exact(frac, c):
    a = min(frac, 0.5) * c
    got_a, got_ca = dual.unpack_alpha(dual.pack_alpha(a, c - a), c)
    assert got_a == a
    assert math.isclose(got_ca, c - a, rel_tol=1e-15)


def test_zero_weight_rows_never_move():
    assert dual.row_update(3.0, -2.0, 0.0, 0.0) == (0.0, 0.0, 0.0, 0.0)
    assert dual.row_gap(1.0, 0.0, 0.0) == 0.0


def test_unstarted_row_has_zero_entropy_and_plain_loss_gap():
    assert dual.row_dual_entropy(0.0, 2.0) == 0.0
    assert math.isclose(dual.row_gap(0.3, 0.0, 2.0), 2.0 * math.log1p(math.exp(-0.3)))


@given(
    c=st.floats(0.01, 10.0),
    frac=st.floats(0.01, 0.99),
    rel=st.floats(-0.9, 0.9),
    s=st.floats(0.0, 1.5),
)
@settings(max_examples=200, deadline=None)
def test_lag_entropy_is_the_entropy_with_its_derivatives(c, frac, rel, s):
    """Inside the box, ``lag_entropy``'s slope and curvature are the entropy's central
    differences in ``s``; outside it ``(inf, 0, inf)``; at a bound with ``da != 0`` no
    finite curvature."""
    a = frac * c
    da = rel * min(a, c - a)  # a move that keeps a + s da in [0, C] for s <= 1
    e, e1, e2 = dual.lag_entropy(a, c - a, c, da, s)
    an = a + s * da
    if not 0.0 < an < c:
        assert (e, e1, e2) == (math.inf, 0.0, math.inf) or an in (0.0, c)
        return
    ent = an * math.log(an / c) + (c - an) * math.log((c - an) / c)
    assert math.isclose(e, ent, rel_tol=1e-12, abs_tol=1e-15)
    if da == 0.0:
        assert (e1, e2) == (0.0, 0.0)
        return
    assume(abs(rel) > 1e-3)  # a step h whose move h da is 1e-4 of the distance to a bound
    h = 1e-4 * min(an, c - an) / abs(da)
    f = [dual.lag_entropy(a, c - a, c, da, s + k * h)[0] for k in (-1, 0, 1)]
    assert math.isclose(e1, (f[2] - f[0]) / (2 * h), rel_tol=1e-5, abs_tol=1e-9)
    assert math.isclose(e2, (f[2] - 2 * f[1] + f[0]) / h**2, rel_tol=1e-3, abs_tol=1e-6)


def test_lag_entropy_at_and_past_a_bound():
    assert dual.lag_entropy(0.5, 0.5, 1.0, 1.0, 0.6) == (math.inf, 0.0, math.inf)  # a > C
    assert dual.lag_entropy(0.5, 0.5, 1.0, -1.0, 0.6) == (math.inf, 0.0, math.inf)  # a < 0
    # a = 0 exactly, still moving: the entropy 0, no finite curvature
    assert dual.lag_entropy(0.5, 0.5, 1.0, -1.0, 0.5) == (0.0, 0.0, math.inf)
    assert dual.lag_entropy(0.0, 1.0, 1.0, 0.0, 1.0) == (0.0, 0.0, 0.0)  # at a bound, still
