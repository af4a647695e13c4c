"""Acceptance of the GPU kernel's step with many rows in flight, on the CPU emulator.

Criteo-like rows (13 dense integer fields, 26 hashed categoricals, an intercept) share their
dense columns with every other row: ``tau`` rows in flight that each take the plain Newton step
from one stale ``w`` overshoot on them together. With the ESO step the kernel now takes (and
``emulate`` models), every ``tau`` reaches the sequential (CPU) optimum, the dual rises every
epoch, and the price is stated: at most ``tau / 2`` times the epochs of one row at a time
(measured on these 2,048 rows: about ``tau / 2.7``; ``tau = 16384`` is capped at the 2,048 rows,
as the kernel caps it). The plain step, the kernel's before, diverges at the same ``tau``.
"""

import numpy as np
import pytest

from snapfit.datasets.criteo_like import make_criteo_like
from snapfit.solvers import cpu, emulate

N_ROWS, HASH_BITS, C, BIAS = 2048, 14, 0.01, 1.0
TOL = 5e-7  # relative duality gap: the primal is then within 1e-6 of the optimum


@pytest.fixture(scope="module")
def criteo():
    X, y = make_criteo_like(N_ROWS, seed=0, hash_bits=HASH_BITS)
    indptr, indices = X.indptr.astype(np.int64), X.indices.astype(np.int32)
    labels = np.where(y > 0, 1.0, -1.0).astype(np.float32)
    sq = np.zeros(N_ROWS, np.float32)
    cpu.row_sqnorms(indptr, indices, X.data, True, sq)
    args = (indptr, indices, X.data, True, labels, cpu.EMPTY_F32, False)
    assert np.all(np.bincount(indices[indices < 13], minlength=13) > N_ROWS / 5)  # dense columns
    one_at_a_time = _run(args, sq, 1, "plain", tol=TOL)
    optimum = _run(args, sq, 1, "plain", tol=1e-13)  # cpu.cd_pass's epochs, bit for bit
    assert one_at_a_time.converged and optimum.converged
    return args, sq, one_at_a_time.epochs, optimum.primal


def _run(args, sq, tau, rule, tol, max_epochs=20_000):
    return emulate.run(
        args, sq, 1 << HASH_BITS, C, C, BIAS, tau, rule, tol=tol, max_epochs=max_epochs
    )


@pytest.mark.parametrize("tau", [1, 64, 1024, 16384])
def test_safe_step_reaches_the_cpu_optimum(criteo, tau):
    args, sq, epochs_one, optimum = criteo
    safe = _run(args, sq, tau, "eso", TOL)
    assert safe.converged
    assert 0.0 <= safe.primal - optimum <= 1e-6 * optimum
    assert safe.dual_drops() == 0  # the dual never falls from one epoch to the next
    tau_eff = min(tau, N_ROWS)
    assert safe.epochs <= max(1.0, tau_eff / 2) * epochs_one
    if tau > 1:  # the same tau with the plain step: the dual falls, the fit blows up
        unsafe = _run(args, sq, tau, "plain", TOL, max_epochs=20)
        assert not unsafe.converged and unsafe.dual_drops() >= 3
        assert unsafe.primal > 2 * optimum
