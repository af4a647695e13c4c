"""The one scalar update of snapfit: dual coordinate descent for L2-regularized linear models.

Plain Python on scalars, no numba import: the same source is compiled by ``numba.njit`` for
the CPU kernels (``cpu.py``) and ``numba.cuda.jit(device=True)`` for the GPU's (``gpu.py``).

Problem (scikit-learn's convention, so optima can be checked against liblinear)::

    P(w) = 1/2 ||w||^2 + sum_i C_i log(1 + exp(-y_i w.x_i))
    D(a) = -1/2 ||w(a)||^2 - sum_i [a_i log(a_i/C_i) + (C_i-a_i) log((C_i-a_i)/C_i)],
    w(a) = sum_i a_i y_i x_i,   0 < a_i < C_i.

Coordinate step (Yu, Huang & Lin 2011, "Dual coordinate descent methods for logistic regression
and maximum entropy models", Machine Learning 85, Alg. 3 and Sec. 3.2; liblinear's
``solve_l2r_lr_dual``): with ``q = sigma' ||x_i||^2`` and ``b = y_i v.x_i`` (``v`` the solver's view
of ``w``), choose the new ``a_i`` minimizing::

    1/2 q (z - a_i)^2 + b (z - a_i) + z log z + (C_i - z) log(C_i - z)

by a Newton iteration inside (0, C_i). Near a bound ``C_i - a_i`` as a difference loses its
digits (liblinear keeps both); one float64 per row keeps both exactly: the *packed* value is
``a_i`` when ``a_i <= C_i/2``, else ``-(C_i - a_i)``; the larger, ``C_i - small``, has no
cancellation.

Per-row duality gap (Fenchel-Young, each term >= 0; margin ``m_i = y_i w.x_i``, and
``sum_i g_i = P(w(a)) - D(a)`` because ``sum_i a_i m_i = ||w||^2``)::

    g_i = C_i log(1 + e^{-m_i}) + a_i m_i + a_i log(a_i/C_i) + (C_i-a_i) log((C_i-a_i)/C_i)

Rows start at ``a_i = 0``, ``w = 0``; ``C_i = 0`` rows stay. Other losses: docs/losses.md.
"""

from math import exp, fabs, inf, log, log1p
from types import FunctionType, SimpleNamespace

# Newton on the one-dimensional subproblem. liblinear loosens the inner tolerance early and
# tightens it as the outer gradient shrinks; a tolerance relative to the row's own starting
# derivative (FORCING) does the same with no state kept across iterations.
INNER_TOL = 1e-12
MAX_INNER = 100
# Fraction kept when a Newton step would leave (0, C): the "xi" of Yu, Huang & Lin (2011).
SHRINK = 0.1
# Newton stops once |g'| is below FORCING times its value at the row's start (or INNER_TOL).
# Measured on 500k Criteo-like rows: the same duality gap after every epoch down to 1e-12 as a
# fixed 1e-12, with ~10 % less time per epoch (fewer logarithms).
FORCING = 1e-3
# First interior point of a row that starts at a_i = 0, as a fraction of C_i (liblinear starts
# every row at min(0.001 C, 1e-8)).
ALPHA0_FRACTION = 1e-3

# Loss codes, the ``loss`` argument of ``row_step`` and every kernel (``Problem.loss``).
LOGISTIC = 0
HINGE = 1
SQUARED_HINGE = 2
SQUARED = 3
LOSSES = {"logistic": LOGISTIC, "hinge": HINGE, "squared_hinge": SQUARED_HINGE, "squared": SQUARED}


def unpack_alpha(s, c):
    """Return ``(a, c - a)`` from the packed value ``s`` (see module docstring); 0 is ``(0, c)``."""
    if s >= 0.0:
        return s, c - s
    return c + s, -s


def pack_alpha(a, ca):
    """Pack ``(a, c - a)`` into one float64 that keeps the smaller of the two exactly."""
    if a <= ca:
        return a
    return -ca


def row_update(q, b, s, c):
    """One coordinate minimization of the dual: ``(packed s, delta a, gap before, entropy after)``.

    ``q = sigma' ||x_i||^2``, ``b = y_i v.x_i``, ``s`` the packed alpha of the row, ``c`` its bound
    ``C_i``. ``delta a`` is what the caller adds, times ``y_i x_i``, into its view of ``w``. Also
    returned, because they share its logarithms: the row's gap term ``g_i`` at the old alpha (with
    margin ``b``) and its dual entropy at the new alpha (summed over an epoch: the exact entropy
    term of the dual). Rows with ``c <= 0`` (zero weight) never move and count for nothing.
    """
    if c <= 0.0:
        return s, 0.0, 0.0, 0.0
    a, ca = unpack_alpha(s, c)
    # log(a/c) and log((c-a)/c) give the old entropy and, by difference, the first Newton
    # derivative's log(a/(c-a)) too: three logarithms for the price of two.
    ent_old = 0.0
    log_ratio = 0.0
    if a > 0.0:
        la = log(a / c)
        lca = log(ca / c)
        ent_old = a * la + ca * lca
        log_ratio = la - lca
    gap = c * softplus_neg(b) + a * b + ent_old
    # Minimize over the variable that moves towards its bound (liblinear's ind1/ind2 choice):
    # if the derivative at z = a pushes a up, work on t = c - a instead, so the Newton iterate
    # always approaches 0 from above, where the safeguard t *= SHRINK keeps it positive.
    sign = 1.0
    t_old = a
    if 0.5 * q * (ca - a) + b < 0.0:
        sign = -1.0
        t_old = ca
        log_ratio = -log_ratio
    # g(t) = 1/2 q (t - t_old)^2 + sign*b (t - t_old) + t log t + (c - t) log(c - t),
    # g'(t) = q (t - t_old) + sign*b + log(t / (c - t)); lt holds log(t / (c - t)).
    t = t_old
    lt = log_ratio
    if c - t < 0.5 * c:
        t = 0.1 * t
        lt = log(t / (c - t))
    elif t <= 0.0:
        t = ALPHA0_FRACTION * c
        lt = log(t / (c - t))
    gp = q * (t - t_old) + sign * b + lt
    # g' is increasing and concave on (0, c/2], where the sign choice puts the minimizer, so
    # Newton iterates approach it from the left and every one lowers g. Stop once |g'| has
    # shrunk by FORCING from its start (an inexact step that still gains a fixed fraction of
    # the exact one; near the optimum the start is small, so this tightens by itself) or is
    # at g''s rounding noise.
    tol = max(INNER_TOL * (1.0 + fabs(b) + q * c), FORCING * fabs(gp))
    it = 0
    while it < MAX_INNER and fabs(gp) > tol:
        gpp = q + c / ((c - t) * t)
        tn = t - gp / gpp
        if tn <= 0.0:
            t = t * SHRINK
        else:
            t = tn
        lt = log(t / (c - t))
        gp = q * (t - t_old) + sign * b + lt
        it += 1
    # Entropy at the new point from the last logarithm: t log(t/c) + (c-t) log((c-t)/c)
    # = t lt + c log(1 - t/c).
    ent_new = t * lt + c * log1p(-t / c)
    if sign > 0.0:
        new_a = t
        new_ca = c - t
        delta = t - t_old
    else:
        new_a = c - t
        new_ca = t
        delta = t_old - t
    return pack_alpha(new_a, new_ca), delta, gap, ent_new


def alpha_at_margin(m, c):
    """Packed ``a = C / (1 + exp(m))``: the dual point the optimality conditions pair with a
    margin ``m = y_i w.x_i`` (a warm start). ``a`` and ``C - a`` are both formed from the margin
    directly, so neither loses digits, and both are kept off exact 0 (which means "not
    started"); rows with ``c <= 0`` get 0."""
    if c <= 0.0:
        return 0.0
    if m >= 0.0:
        e = exp(-m)
        a = c * e / (1.0 + e)
        ca = c / (1.0 + e)
    else:
        e = exp(m)
        a = c / (1.0 + e)
        ca = c * e / (1.0 + e)
    return pack_alpha(max(a, 1e-300), max(ca, 1e-300))


def softplus_neg(m):
    """``log(1 + exp(-m))`` without overflow for any margin ``m``."""
    if m > 0.0:
        return log1p(exp(-m))
    return -m + log1p(exp(m))


def row_loss(m, c):
    """Primal loss term ``C_i log(1 + exp(-m_i))`` of one row."""
    if c <= 0.0:
        return 0.0
    return c * softplus_neg(m)


def row_dual_entropy(s, c):
    """``a log(a/C) + (C-a) log((C-a)/C)`` of one row (<= 0); the dual is ``-1/2||w||^2 - sum``."""
    if c <= 0.0:
        return 0.0
    a, ca = unpack_alpha(s, c)
    if a <= 0.0:
        return 0.0
    return a * log(a / c) + ca * log(ca / c)


def row_terms(m, s, c):
    """``(loss, entropy, gap)`` of one row with margin ``m = y_i w.x_i``: what an exact
    objective pass sums (``P = 1/2||w||^2 + sum loss``, ``D = -1/2||w||^2 - sum entropy``)."""
    if c <= 0.0:
        return 0.0, 0.0, 0.0
    a, _ = unpack_alpha(s, c)
    loss = row_loss(m, c)
    ent = row_dual_entropy(s, c)
    return loss, ent, loss + a * m + ent


def row_gap(m, s, c):
    """Duality-gap term ``g_i >= 0`` of one row with margin ``m = y_i w.x_i``."""
    return row_terms(m, s, c)[2]


def row_step(q, dot, y, s, c, loss):
    """One coordinate step of any loss: ``(new alpha, move of w along x_i, gap before, dual
    term after)``; ``dot = v.x_i``, ``y`` the row's label (or target for the squared loss).

    The move is what the caller adds, times ``x_i``, into its view of ``w`` (``delta a y_i``,
    ``delta a`` for the squared loss). The dual term is what an epoch sums into ``entropy``
    (``D = -1/2||w||^2 - sum``). Logistic is ``row_update`` (packed alpha); the others are
    closed form, with ``q = 0`` (an empty row and no intercept) taken to its limit.
    """
    if loss == LOGISTIC:
        s_new, delta, gap, ent = row_update(q, y * dot, s, c)
        return s_new, delta * y, gap, ent
    if c <= 0.0:
        return s, 0.0, 0.0, 0.0
    if loss == SQUARED:
        r = c * (y - dot) - s
        a = s + r / (c * q + 1.0)
        return a, a - s, 0.5 * r * r / c, a * (0.5 * a / c - y)
    m = y * dot
    gap = row_gap_of(m, s, c, loss)
    if loss == HINGE:
        g = m - 1.0
        a = s
        if q > 0.0:
            a = min(max(s - g / q, 0.0), c)
        elif g < 0.0:
            a = c
        elif g > 0.0:
            a = 0.0
        return a, (a - s) * y, gap, -a
    a = max(s - (m - 1.0 + 0.5 * s / c) / (q + 0.5 / c), 0.0)  # squared hinge
    return a, (a - s) * y, gap, a * (0.25 * a / c - 1.0)


def row_gap_of(m, s, c, loss):
    """Fenchel-Young gap term ``>= 0`` of a hinge or squared hinge row at margin ``m = y w.x``,
    written as a sum of non-negative parts so that rounding keeps it so."""
    u = 1.0 - m
    if loss == HINGE:
        if u > 0.0:
            return (c - s) * u
        return -s * u
    if u > 0.0:
        r = c * u - 0.5 * s
        return r * r / c
    return s * (0.25 * s / c - u)


def row_terms_of(dot, y, s, c, loss):
    """``(loss, dual term, gap)`` of one row of any loss at ``dot = w.x_i``: ``row_terms`` for
    logistic, summed the same way (``P = 1/2||w||^2 + sum loss``, ``D = -1/2||w||^2 - sum``)."""
    if loss == LOGISTIC:
        return row_terms(y * dot, s, c)
    if c <= 0.0:
        return 0.0, 0.0, 0.0
    if loss == SQUARED:
        e = y - dot
        r = c * e - s
        return 0.5 * c * e * e, s * (0.5 * s / c - y), 0.5 * r * r / c
    m = y * dot
    u = max(1.0 - m, 0.0)
    if loss == HINGE:
        return c * u, -s, row_gap_of(m, s, c, loss)
    return c * u * u, s * (0.25 * s / c - 1.0), row_gap_of(m, s, c, loss)


def row_coef(s, c, y, loss):
    """The coefficient of ``x_i`` in ``w(a)``: ``a_i y_i`` (``a_i`` for the squared loss)."""
    if loss == LOGISTIC:
        return unpack_alpha(s, c)[0] * y
    if c <= 0.0:
        return 0.0
    if loss == SQUARED:
        return s
    return s * y


def alpha_at(dot, y, c, loss):
    """The dual point the optimality conditions pair with ``dot = w.x_i`` (a warm start):
    ``alpha_at_margin`` for logistic; ``C_i (y_i - dot)``, ``2 C_i max(0, 1 - m)``, and for the
    hinge (where ``m = 1`` pairs with all of ``[0, C_i]``) ``C_i`` below margin 1, else 0."""
    if loss == LOGISTIC:
        return alpha_at_margin(y * dot, c)
    if c <= 0.0:
        return 0.0
    if loss == SQUARED:
        return c * (y - dot)
    m = y * dot
    if loss == HINGE:
        return c if m < 1.0 else 0.0
    return 2.0 * c * max(1.0 - m, 0.0)


def lag_entropy(a, ca, c, da, s):
    """A row's dual entropy ``e(s) = an log(an / C) + cn log(cn / C)`` at ``an = a + s da``,
    ``cn = (C - a) - s da`` with its slope and curvature in ``s``, ``(e, e', e'')``: what the
    exact check under the hot block sums along its lag correction (``hot.lag_terms`` on the
    CPU, ``gpu.lag_terms`` on the device). Outside ``[0, C]``: ``(inf, 0, inf)``; at a bound
    with ``da != 0`` the slope is infinite there and ``e''`` is ``inf`` (no bound on the
    curvature on that side), the slope left out (0)."""
    an = a + s * da
    cn = ca - s * da
    if an < 0.0 or cn < 0.0:
        return inf, 0.0, inf
    la = log(an / c) if an > 0.0 else 0.0
    lc = log(cn / c) if cn > 0.0 else 0.0
    e = an * la + cn * lc
    if da == 0.0:
        return e, 0.0, 0.0
    if an > 0.0 and cn > 0.0:
        return e, da * (la - lc), da * da * c / (an * cn)
    return e, 0.0, inf


_SCALAR_FUNCTIONS = (
    "unpack_alpha",
    "pack_alpha",
    "row_update",
    "alpha_at_margin",
    "softplus_neg",
    "row_loss",
    "row_dual_entropy",
    "row_terms",
    "row_gap",
    "row_gap_of",
    "row_step",
    "row_terms_of",
    "row_coef",
    "alpha_at",
    "lag_entropy",
)


def compile_with(decorate):
    """Compile every scalar function of this module with ``decorate``; return them by name.

    The functions call each other through module globals, which numba would see as plain Python
    functions. Each compiled twin therefore gets a copy of this module's globals in which those
    names are bound to the compiled twins, so ``row_update`` compiled for the GPU calls
    ``unpack_alpha`` compiled for the GPU. ``decorate`` is e.g. ``numba.njit(inline="always")`` or
    ``numba.cuda.jit(device=True)``; this module itself stays free of numba.
    """
    namespace = dict(globals())
    compiled = {}
    for name in _SCALAR_FUNCTIONS:
        fn = globals()[name]
        twin = FunctionType(fn.__code__, namespace, name, fn.__defaults__, fn.__closure__)
        twin.__doc__ = fn.__doc__
        compiled[name] = namespace[name] = decorate(twin)
    return SimpleNamespace(**compiled)
