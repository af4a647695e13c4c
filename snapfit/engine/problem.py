"""What the engine solves (``Problem``) and what it reports per epoch (``EpochRecord``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from snapfit.solvers import cpu


@dataclass(frozen=True)
class Problem:
    """The optimization problem and the solver's knobs, with no estimator attached.

    ``c_pos`` / ``c_neg`` are ``C`` times the class weight of the positive / negative class;
    per-row sample weights multiply them inside the kernels. ``bias`` is the constant feature
    value of the intercept (``intercept_scaling``; 0 means no intercept). ``loss`` is a loss
    code of ``snapfit.solvers.dual`` (``LOSSES``: logistic, hinge, squared hinge, squared).

    ``class_bounds``: one-vs-rest over K classes (``snapfit.solvers.ovr``): per class k its
    ``(c_neg, c_pos)``; labels are then class indices and ``c_pos``/``c_neg`` go unused. Empty
    for one problem (binary labels ±1, or real targets).
    """

    n_features: int
    c_pos: float = 1.0
    c_neg: float = 1.0
    bias: float = 1.0
    tol: float = 1e-4
    max_iter: int = 100
    seed: int = 0
    loss: int = 0
    # Rows are visited in a full random permutation (buckets of 1). Buckets of consecutive rows
    # read memory in order but group the same rows together every epoch, which converged far
    # slower (8-row buckets: relative gap 2.8e-4 after 30 epochs where a full permutation reached
    # 9e-7); cpu.cd_pass's prefetch pipeline makes the full permutation as fast.
    bucket_rows: int = 1
    # CoCoA+ sigma': the number of units updating w in one round. None means this process's
    # units (the trainer's ``Devices``); a Dask driver sets the total over all workers.
    sigma: float | None = None
    class_bounds: tuple[tuple[float, float], ...] = ()
    # Hot columns as a primal block (``snapfit.engine.hot``): rows in flight couple only
    # through sparse columns; the dense ones take a Newton step after each round.
    hot_columns: bool = False

    @property
    def n_classes(self) -> int:
        """Problems solved side by side: K for one-vs-rest, else 1."""
        return max(1, len(self.class_bounds))


@dataclass
class EpochRecord:
    """One line of ``history_``.

    ``dual`` is exact. ``gap`` is the sum of per-row gap terms, each taken right after that row's
    update (free to compute during the pass, exact at a fixed point); when ``exact`` is True the
    gap and primal come from a separate exact pass. ``primal = dual + gap``, but under the hot
    block (``hot_columns``) an estimated epoch's primal also counts the block's lag (the dual
    plus the rows' terms plus ``1/2 ||w_H - v_H(alpha)||^2``: ``D(alpha)`` lags far below the
    primal early on) and its gap and ``rel_gap`` are the stopping estimate, the rows' terms
    scaled by what the last exact check found.

    ``io_wait``: seconds the engine's consuming thread was blocked on the source for its next
    chunk. ``idle``: seconds of the pass the solver units spent on no rows, averaged over the
    units (waiting for chunks, or for the slowest unit at the end of the pass). They differ
    when the consuming thread runs ahead of the units: with CPU threads sharing ``w`` on a
    streamed source it waits for free buffers most of the pass while the threads compute, so
    ``io_wait`` nears the epoch and only ``idle`` says whether the disk held the threads up.
    """

    epoch: int
    primal: float
    dual: float
    gap: float
    rel_gap: float
    exact: bool
    seconds: float
    rows_per_s: float
    nnz_per_s: float
    io_wait: float = 0.0
    idle: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_pass(
        cls, *, epoch, w, entropy, gap, seconds, n_rows, nnz, io_wait, idle, wsq=None
    ) -> EpochRecord:
        """The record of an epoch's pass: the exact dual from ``w`` and the entropy sum, the
        estimated gap, and the rates (every trainer reports epochs the same way). ``wsq``:
        ``||v(alpha)||^2`` where ``w`` is not ``v(alpha)`` (the hot block)."""
        dual = -0.5 * (cpu.squared_norm(w) if wsq is None else wsq) - entropy
        primal = dual + gap
        rate = (lambda count: count / seconds) if seconds > 0 else (lambda count: float("inf"))
        return cls(
            epoch=epoch,
            primal=primal,
            dual=dual,
            gap=gap,
            rel_gap=gap / max(abs(primal), 1e-300),
            exact=False,
            seconds=seconds,
            rows_per_s=rate(n_rows),
            nnz_per_s=rate(nnz),
            io_wait=io_wait,
            idle=idle,
        )
