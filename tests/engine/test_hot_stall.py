"""The hot block's stopping rule checks exactly when its estimate stalls (``HotBlock.stalled``).

Its estimate (the rows' gap terms times a ratio never below 1) can stay far above the exact
gap: after long hot steps the rows' terms measure their answer to the step. Without the rule
such a fit ran to ``max_iter`` past its target; with it the trainer checks after
``STALL_EPOCHS`` epochs without a new lowest estimate and stops at the first check that
certifies the target.
"""

from __future__ import annotations

import numpy as np

from bench.sets import fit_inputs
from snapfit.datasets.criteo_like import make_criteo_like
from snapfit.engine import Devices, hot
from snapfit.train import train


def _block():
    sample = hot.Sample.of([])
    return hot.HotBlock(np.zeros(0, np.int64), 4, sample, 10, 0.0)


def test_a_stalled_estimate_forces_a_check_and_a_check_starts_the_count_again():
    hb, k = _block(), hot.STALL_EPOCHS
    # falling, or a new low every other epoch (plain and accelerated epochs differ): never forced
    assert not any(hb.stalled(e) for e in [1.0, 0.5, 0.7, 0.3, 0.4, 0.2, 0.25, 0.1])
    # then k epochs in a row with no new low: the k-th is forced
    assert [hb.stalled(e) for e in [0.2, 0.15, 0.3, 0.1][: k - 1] + [0.1]] == [False] * (k - 1) + [
        True
    ]
    hb.calibrate(1e-3, 10.0)  # the check: the count and the low start again
    assert (hb.stale, hb.low, hb.due) == (0, np.inf, False)
    assert [hb.stalled(0.3) for _ in range(k + 1)] == [False] * k + [True]


def test_a_fit_whose_estimate_never_falls_is_stopped_by_its_exact_checks(monkeypatch):
    X, y = make_criteo_like(5_000, seed=3, hash_bits=12)
    source, problem = fit_inputs(X.tocsr(), np.where(y > 0, 1.0, -1.0), 0.1, 1.0, tol=1e-4,
                                 max_iter=200, hot_columns=True)  # fmt: skip
    # an estimate stuck far above any target, as the rows' terms were after long steps
    monkeypatch.setattr(hot.HotBlock, "rel_gap", lambda self, gap: 1.0)
    res = train(source, problem, devices=Devices(n_cpu=1), keep_alpha=False)
    checked = [r.epoch for r in res.history if r.exact]
    assert res.converged and res.history[-1].rel_gap <= 1e-4
    assert res.n_iter < 200
    assert checked == list(range(hot.STALL_EPOCHS + 1, res.n_iter + 1, hot.STALL_EPOCHS + 1))


def test_a_check_after_a_damped_step_is_put_off_at_most_twice():
    hb = _block()
    hb.length = 0.5  # the last step was halved
    assert [hb.hold() for _ in range(hot.HOLD_EPOCHS + 2)] == [True] * hot.HOLD_EPOCHS + [
        False,
        True,
    ]
    for length in (1.0, 0.0):  # not damped, no step yet: checked at once
        hb.length, hb.holds = length, 0
        assert not hb.hold()
    hb.length = 0.5
    hb.hold()
    hb.calibrate(1e-3, 10.0)  # a check starts the count again
    assert hb.holds == 0


def test_every_check_of_a_fit_whose_steps_are_all_damped_comes_after_two_held_epochs(
    monkeypatch,
):
    X, y = make_criteo_like(5_000, seed=3, hash_bits=12)
    source, problem = fit_inputs(X.tocsr(), np.where(y > 0, 1.0, -1.0), 0.1, 1.0, tol=1e-4,
                                 max_iter=200, hot_columns=True)  # fmt: skip
    monkeypatch.setattr(hot.HotBlock, "_damping", lambda self, *a: 0.5)
    held: list[bool] = []
    real_hold = hot.HotBlock.hold

    def hold(self):
        out = real_hold(self)
        held.append(out)
        return out

    monkeypatch.setattr(hot.HotBlock, "hold", hold)
    res = train(source, problem, devices=Devices(n_cpu=1), keep_alpha=False)
    assert res.converged and res.history[-1].rel_gap <= 1e-4
    checks = sum(r.exact for r in res.history)
    # each wanted check was put off twice, then taken
    assert held == [True, True, False] * checks
