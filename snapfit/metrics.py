"""Streaming evaluation metrics: log loss, accuracy, calibration and ROC AUC in bounded memory.

Scores arrive in batches (one chunk at a time) as decision values ``s = w.x + b`` with labels in
{-1, +1} (or {0, 1}) and optional row weights, as scikit-learn's ``sample_weight``.

Log loss, accuracy and calibration are sums, so one pass and a few numbers suffice. ROC AUC needs
the order of all scores:

* **Exact** when every score fits the memory budget (:data:`EXACT_BYTES_PER_ROW` bytes per row):
  the scores are kept, sorted once, and tied scores count one half (scikit-learn's convention).
* **Bounded otherwise.** The score line is cut into disjoint segments; per segment we keep the
  positive and negative weight and the smallest and largest score of each class. A positive and a
  negative in different segments are ordered by their segments, exactly. Only pairs inside one
  segment are uncertain, and the per-class ranges bound them: a segment whose positives all lie
  above its negatives contributes all its pairs, one with all scores equal contributes half of
  them, and otherwise the contribution lies in ``[lo, hi]`` (see :func:`_pair_bounds`). Taking the
  midpoint, the AUC error is at most ``sum_seg W+ W- (hi - lo) / 2 / (W+ W-)``, a number computed
  from the segments themselves, not an estimate. While that bound exceeds ``tol``, further passes
  over the data refine the segments that contribute most: those whose rows fit the budget are
  collected and sorted (exact), larger ones are cut into finer segments over their observed range.
  Each pass only ever lowers the bound, and the bound is reported with the AUC.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from snapfit.errors import BudgetError

#: Bytes per row the exact AUC needs: the score, the signed weight, and an argsort index.
EXACT_BYTES_PER_ROW = 24
#: Bytes per segment of the bounded AUC: a left edge, two weights, a count, four extremes, a
#: resolved pair fraction.
SEGMENT_BYTES = 72
#: Smallest useful bounded-AUC state; a budget below this is a resource error.
MIN_SEGMENTS = 1024
#: New segments a large segment is cut into when it is refined.
SPLIT = 1024

Batches = Callable[[], Iterable[tuple[np.ndarray, np.ndarray, "np.ndarray | None"]]]


def _pm1(y) -> np.ndarray:
    y = np.asarray(y)
    return np.where(y > 0, 1.0, -1.0)


def _weights(weight, n: int) -> np.ndarray:
    return np.ones(n) if weight is None else np.asarray(weight, dtype=np.float64)


# -- sums: log loss, accuracy, calibration ---------------------------------------------------
@dataclass
class PointMetrics:
    """Log loss, accuracy and a calibration table, accumulated batch by batch.

    Calibration uses ``n_bins`` equal-width bins of the predicted probability; ``ece`` is the
    weighted mean of ``|mean predicted - observed rate|`` over the bins.
    """

    n_bins: int = 10
    rows: int = 0
    weight: float = 0.0
    positive_weight: float = 0.0
    loss: float = 0.0
    correct: float = 0.0
    prob_sum: float = 0.0
    bin_weight: np.ndarray = field(default=None)
    bin_prob: np.ndarray = field(default=None)
    bin_pos: np.ndarray = field(default=None)

    def __post_init__(self):
        self.bin_weight = np.zeros(self.n_bins)
        self.bin_prob = np.zeros(self.n_bins)
        self.bin_pos = np.zeros(self.n_bins)

    def update(self, scores, y, weight=None) -> None:
        s = np.asarray(scores, dtype=np.float64)
        y = _pm1(y)
        w = _weights(weight, len(s))
        pos = y > 0
        p = 0.5 * (1.0 + np.tanh(0.5 * s))  # sigmoid without overflow warnings
        self.rows += len(s)
        self.weight += float(w.sum())
        self.positive_weight += float(w[pos].sum())
        self.loss += float(w @ np.logaddexp(0.0, -y * s))
        self.correct += float(w[(s > 0) == pos].sum())
        self.prob_sum += float(w @ p)
        b = np.minimum((p * self.n_bins).astype(np.int64), self.n_bins - 1)
        self.bin_weight += np.bincount(b, w, self.n_bins)
        self.bin_prob += np.bincount(b, w * p, self.n_bins)
        self.bin_pos += np.bincount(b, w * pos, self.n_bins)

    def result(self) -> dict:
        W = self.weight or float("nan")
        filled = self.bin_weight > 0
        mean_p = np.divide(self.bin_prob, self.bin_weight, where=filled, out=np.zeros(self.n_bins))
        rate = np.divide(self.bin_pos, self.bin_weight, where=filled, out=np.zeros(self.n_bins))
        ece = float((np.abs(mean_p - rate) * self.bin_weight).sum() / W)
        edges = np.linspace(0.0, 1.0, self.n_bins + 1)
        table = [
            {
                "bin": [float(edges[i]), float(edges[i + 1])],
                "weight": float(self.bin_weight[i]),
                "mean_predicted": float(mean_p[i]),
                "observed_rate": float(rate[i]),
            }
            for i in range(self.n_bins)
            if filled[i]
        ]
        return {
            "rows": self.rows,
            "logloss": self.loss / W,
            "accuracy": self.correct / W,
            "calibration": {
                "mean_predicted": self.prob_sum / W,
                "observed_rate": self.positive_weight / W,
                "ece": ece,
                "bins": table,
            },
        }


@dataclass
class MarginMetrics:
    """An SVM's accuracy and mean hinge and squared hinge losses of its margins, batch by
    batch (no probabilities: a margin is not one)."""

    rows: int = 0
    weight: float = 0.0
    hinge: float = 0.0
    squared_hinge: float = 0.0
    correct: float = 0.0

    def update(self, scores, y, weight=None) -> None:
        s = np.asarray(scores, dtype=np.float64)
        y = _pm1(y)
        w = _weights(weight, len(s))
        u = np.maximum(0.0, 1.0 - y * s)
        self.rows += len(s)
        self.weight += float(w.sum())
        self.hinge += float(w @ u)
        self.squared_hinge += float(w @ (u * u))
        self.correct += float(w[(s > 0) == (y > 0)].sum())

    def result(self) -> dict:
        W = self.weight or float("nan")
        return {"rows": self.rows, "accuracy": self.correct / W, "hinge": self.hinge / W,
                "squared_hinge": self.squared_hinge / W}  # fmt: skip


@dataclass
class RegressionMetrics:
    """RMSE, MAE and R² (scikit-learn's ``r2_score``: 1 - SSE / SST about the weighted mean)
    of predictions against real targets, batch by batch."""

    rows: int = 0
    weight: float = 0.0
    sse: float = 0.0
    sae: float = 0.0
    sy: float = 0.0
    syy: float = 0.0

    def update(self, pred, y, weight=None) -> None:
        y = np.asarray(y, dtype=np.float64)
        e = np.asarray(pred, dtype=np.float64) - y
        w = _weights(weight, len(e))
        self.rows += len(e)
        self.weight += float(w.sum())
        self.sse += float(w @ (e * e))
        self.sae += float(w @ np.abs(e))
        self.sy += float(w @ y)
        self.syy += float(w @ (y * y))

    def result(self) -> dict:
        W = self.weight or float("nan")
        sst = self.syy - self.sy * self.sy / W
        return {"rows": self.rows, "rmse": float(np.sqrt(self.sse / W)), "mae": self.sae / W,
                "r2": 1.0 - self.sse / sst if sst > 0 else None}  # fmt: skip


# -- ROC AUC ---------------------------------------------------------------------------------
def _groups(scores: np.ndarray, yw: np.ndarray):
    """Sorted distinct scores with the positive and negative weight at each (``yw = y * w``)."""
    order = np.argsort(scores, kind="stable")
    s, yw = scores[order], yw[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    wp = np.add.reduceat(np.where(yw > 0, yw, 0.0), starts) if len(s) else np.zeros(0)
    wn = np.add.reduceat(np.where(yw < 0, -yw, 0.0), starts) if len(s) else np.zeros(0)
    return s[starts], wp, wn


def _auc_terms(wp, wn, within, spread):
    """AUC numerator and error bound numerator over ordered segments.

    ``within`` is the midpoint and ``spread`` the half-width of each segment's own pair fraction.
    """
    below = np.cumsum(wn) - wn
    pairs = wp * wn
    return float(wp @ below + pairs @ within), float(pairs @ spread)


def exact_auc(scores, y, weight=None) -> float:
    """ROC AUC by sorting (ties count one half), equal to ``sklearn.metrics.roc_auc_score``."""
    s = np.asarray(scores, dtype=np.float64)
    yw = _pm1(y) * _weights(weight, len(s))
    _, wp, wn = _groups(s, yw)
    num, _ = _auc_terms(wp, wn, np.full(len(wp), 0.5), np.zeros(len(wp)))
    denom = wp.sum() * wn.sum()
    return num / denom if denom > 0 else float("nan")


def _pair_bounds(min_p, max_p, min_n, max_n):
    """Bounds ``[lo, hi]`` on the fraction of (positive, negative) pairs of a segment ranked
    correctly (ties count one half), from each class's smallest and largest score."""
    lo = np.where(min_p > max_n, 1.0, np.where(min_p >= max_n, 0.5, 0.0))
    hi = np.where(max_p < min_n, 0.0, np.where(max_p <= min_n, 0.5, 1.0))
    return lo, hi


class _Segments:
    """Disjoint segments ``[edges[i], edges[i+1])`` of the score line (the last one open)."""

    def __init__(self, edges: np.ndarray):
        self.edges = edges
        m = len(edges)
        self.wp, self.wn, self.n = np.zeros(m), np.zeros(m), np.zeros(m, dtype=np.int64)
        self.min_p, self.max_p = np.full(m, np.inf), np.full(m, -np.inf)
        self.min_n, self.max_n = np.full(m, np.inf), np.full(m, -np.inf)
        # The exact fraction of correctly ranked pairs, once a segment's rows have been sorted.
        self.fixed = np.full(m, np.nan)

    def __len__(self) -> int:
        return len(self.edges)

    def locate(self, s: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.edges, s, side="right") - 1

    def add(self, seg: np.ndarray, s: np.ndarray, yw: np.ndarray) -> None:
        m = len(self)
        pos = yw > 0
        self.wp += np.bincount(seg[pos], yw[pos], m)
        self.wn += np.bincount(seg[~pos], -yw[~pos], m)
        self.n += np.bincount(seg, minlength=m)
        np.minimum.at(self.min_p, seg[pos], s[pos])
        np.maximum.at(self.max_p, seg[pos], s[pos])
        np.minimum.at(self.min_n, seg[~pos], s[~pos])
        np.maximum.at(self.max_n, seg[~pos], s[~pos])

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = _pair_bounds(self.min_p, self.max_p, self.min_n, self.max_n)
        known = ~np.isnan(self.fixed)
        return np.where(known, self.fixed, lo), np.where(known, self.fixed, hi)

    def error_terms(self) -> np.ndarray:
        """Each segment's contribution to the error bound numerator."""
        lo, hi = self.bounds()
        return self.wp * self.wn * (hi - lo) / 2

    def resolve(self, s: np.ndarray, yw: np.ndarray) -> None:
        """Fix the pair fraction of the segments holding rows ``s`` exactly (all their rows)."""
        values, wp, wn = _groups(s, yw)
        seg = self.locate(values)  # non-decreasing, as values are sorted
        starts = np.flatnonzero(np.r_[True, seg[1:] != seg[:-1]])
        below = np.cumsum(wn) - wn
        below -= np.repeat(below[starts], np.diff(np.r_[starts, len(seg)]))
        num = np.bincount(seg, wp * below + 0.5 * wp * wn, len(self))
        ids = seg[starts]
        pairs = self.wp[ids] * self.wn[ids]
        self.fixed[ids] = np.divide(num[ids], pairs, where=pairs > 0, out=np.full(len(ids), 0.5))

    def auc(self) -> tuple[float, float]:
        lo, hi = self.bounds()
        num, err = _auc_terms(self.wp, self.wn, (lo + hi) / 2, (hi - lo) / 2)
        denom = self.wp.sum() * self.wn.sum()
        if denom <= 0:
            return float("nan"), 0.0
        return num / denom, err / denom

    def replace(self, removed: list[int], parts: list[_Segments]) -> _Segments:
        """A new segmentation with the ``removed`` segments replaced by ``parts``, which cover
        exactly their intervals."""
        keep = np.ones(len(self), dtype=bool)
        keep[removed] = False
        parts = [self._take(keep)] + parts
        order = np.argsort(np.concatenate([p.edges for p in parts]), kind="stable")
        out = _Segments(np.concatenate([p.edges for p in parts])[order])
        for name in _STATS:
            setattr(out, name, np.concatenate([getattr(p, name) for p in parts])[order])
        return out

    def _take(self, mask) -> _Segments:
        out = _Segments(self.edges[mask])
        for name in _STATS:
            setattr(out, name, getattr(self, name)[mask])
        return out


_STATS = ("wp", "wn", "n", "min_p", "max_p", "min_n", "max_n", "fixed")


def _split_edges(left: float, lo: float, hi: float) -> np.ndarray:
    """Edges cutting a segment starting at ``left`` into ~SPLIT pieces over ``[lo, hi]``."""
    inner = np.linspace(lo, hi, SPLIT + 1)[1:-1]
    inner = np.unique(inner[inner > left])
    return np.r_[left, inner]


@dataclass
class AUCResult:
    auc: float
    error_bound: float
    method: str  # "exact" or "bounded"
    passes: int


def streaming_auc(
    batches: Batches, *, n_rows: int, memory_budget: int, tol: float = 1e-4, max_passes: int = 20
) -> AUCResult:
    """ROC AUC over the batches yielded by ``batches()`` (called once per pass).

    Exact when ``n_rows`` scores fit ``memory_budget``; otherwise bounded (module docstring),
    refining until the proven error bound is at most ``tol`` or after ``max_passes`` passes.
    """
    if n_rows * EXACT_BYTES_PER_ROW <= memory_budget:
        parts_s, parts_yw = [], []
        for s, y, w in batches():
            parts_s.append(np.asarray(s, dtype=np.float64))
            parts_yw.append(_pm1(y) * _weights(w, len(s)))
        s = np.concatenate(parts_s) if parts_s else np.zeros(0)
        yw = np.concatenate(parts_yw) if parts_yw else np.zeros(0)
        return AUCResult(exact_auc(s, yw > 0, np.abs(yw)), 0.0, "exact", 1)
    max_segments = memory_budget // 2 // SEGMENT_BYTES
    if max_segments < MIN_SEGMENTS:
        need = 2 * MIN_SEGMENTS * SEGMENT_BYTES
        raise BudgetError(
            f"a memory budget of {memory_budget} bytes cannot hold the AUC state; "
            f"give at least {need} bytes."
        )
    # A quarter of the segments for the first pass leaves room to refine.
    segs = _first_pass(batches, min(max_segments // 4, 1 << 16))
    passes = 1
    auc, err = segs.auc()
    while err > tol and passes < max_passes:
        plan = _plan_refinement(segs, tol, memory_budget, max_segments)
        if not plan[0] and not plan[1]:
            break
        segs = _refine(batches, segs, *plan)
        passes += 1
        auc, err = segs.auc()
    return AUCResult(auc, err, "bounded", passes)


def _first_pass(batches: Batches, n_segments: int) -> _Segments:
    """Equal-width segments over the range of the first batch (the outer two are open-ended)."""
    segs = None
    for s, y, w in batches():
        s = np.asarray(s, dtype=np.float64)
        if not len(s):
            continue
        if segs is None:
            lo, hi = float(s.min()), float(s.max())
            pad = max(0.1 * (hi - lo), 1e-9 * max(abs(lo), abs(hi)), 1e-300)
            edges = np.r_[-np.inf, np.linspace(lo - pad, hi + pad, n_segments - 1)[:-1]]
            segs = _Segments(edges)
        segs.add(segs.locate(s), s, _pm1(y) * _weights(w, len(s)))
    return segs if segs is not None else _Segments(np.array([-np.inf]))


def _plan_refinement(segs: _Segments, tol, memory_budget, max_segments):
    """Which segments to collect exactly and which to cut, largest error first, within budget."""
    err = segs.error_terms()
    denom = segs.wp.sum() * segs.wn.sum()
    target = 0.5 * tol * denom
    rows_left = memory_budget // 2 // EXACT_BYTES_PER_ROW
    segs_left = max_segments - len(segs)
    exact, split = [], []
    remaining = float(err.sum())
    for i in np.argsort(-err):
        if remaining <= target or err[i] <= 0:
            break
        if segs.n[i] <= rows_left:
            exact.append(int(i))
            rows_left -= int(segs.n[i])
        elif segs_left >= SPLIT:
            lo = min(segs.min_p[i], segs.min_n[i])
            hi = max(segs.max_p[i], segs.max_n[i])
            if not lo < hi:
                continue
            split.append(int(i))
            segs_left -= SPLIT
        else:
            continue
        remaining -= float(err[i])
    return exact, split


def _refine(batches: Batches, segs: _Segments, exact: list[int], split: list[int]) -> _Segments:
    """One pass: collect the rows of ``exact`` segments, re-bin those of ``split`` segments."""
    role = np.zeros(len(segs), dtype=np.int8)  # 0 keep, 1 exact, 2 split
    role[exact], role[split] = 1, 2
    # The split segments are disjoint, so their new edges together partition their union.
    cuts = [
        _split_edges(
            segs.edges[i],
            min(segs.min_p[i], segs.min_n[i]),
            max(segs.max_p[i], segs.max_n[i]),
        )
        for i in split
    ]
    fine = _Segments(np.sort(np.concatenate(cuts)) if cuts else np.zeros(0))
    kept_s, kept_yw = [], []
    for s, y, w in batches():
        s = np.asarray(s, dtype=np.float64)
        r = role[segs.locate(s)]
        yw = _pm1(y) * _weights(w, len(s))
        m = r == 1
        if m.any():
            kept_s.append(s[m])
            kept_yw.append(yw[m])
        m = r == 2
        if m.any():
            fine.add(fine.locate(s[m]), s[m], yw[m])
    if kept_s:
        segs.resolve(np.concatenate(kept_s), np.concatenate(kept_yw))
    return segs.replace(split, [fine]) if split else segs


def evaluate_batches(
    batches: Batches, *, n_rows: int, memory_budget: int, tol: float = 1e-4, loss: str = "logistic"
) -> dict:
    """All metrics of scores from ``batches()`` for a model of ``loss``: log loss, accuracy,
    calibration and ROC AUC (logistic); accuracy, mean hinge and squared hinge loss and ROC AUC
    (hinge, squared_hinge); RMSE, MAE and R² of real targets, in one pass (squared).

    The first pass feeds both the sums and the AUC; only a bounded AUC may read the data again.
    """
    if loss == "squared":
        reg = RegressionMetrics()
        for s, y, w in batches():
            reg.update(s, y, w)
        return reg.result()
    point = PointMetrics() if loss == "logistic" else MarginMetrics()

    def first():
        for s, y, w in batches():
            point.update(s, y, w)
            yield s, y, w

    calls = {"n": 0}

    def once_then_plain():
        calls["n"] += 1
        return first() if calls["n"] == 1 else batches()

    auc = streaming_auc(once_then_plain, n_rows=n_rows, memory_budget=memory_budget, tol=tol)
    out = point.result()
    out.update(
        auc=None if np.isnan(auc.auc) else auc.auc,
        auc_error_bound=auc.error_bound,
        auc_method=auc.method,
        passes=auc.passes,
    )
    return out
