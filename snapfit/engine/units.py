"""Units: the CoCoA+ workers of a node, each with its own view of ``w`` and its own host thread.

A node trainer (``snapfit.engine.trainer``) runs K units, CPU threads (``CpuUnit``) and GPUs
(``snapfit.gpu.unit.GpuUnit``), every one of them driven by one thread of a ``ThreadGroup``
and touched only from that thread. The trainer speaks to every unit through ``Unit``:

=====================  ==========================================================================
``bind()``             first call on the unit's thread (a GPU makes its device current there)
``begin(w, n, width)`` start a pass from ``w``: ``n`` items, results of ``width`` numbers each
``run(...)``           a coordinate pass over an item's rows; returns the items it *completed*
``objective(...)``     the exact ``(loss, entropy, gap)`` of an item's rows at the uploaded ``w``
``flush()``            complete what is still pending after the last item of the pass
``finish()``           the unit's view of ``w`` and the per-item results it kept (or None)
``warm(...)``          warm-start passes: ``alpha`` from margins at ``w0``, ``w(alpha)`` summed
=====================  ==========================================================================

A completed item is ``(item, result)``; ``result`` None means "in ``finish()``'s results, row
``item.seq``" (a GPU reads its results back once per pass).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from snapfit.engine.workers import Item, item_span
from snapfit.solvers import cpu, hot_pass, ovr


class HostKernels(NamedTuple):
    """A problem's CPU kernels, each taking ``bounds`` where the binary ones take ``c_pos,
    c_neg`` (one-vs-rest's take per-class arrays; the arguments are otherwise the same)."""

    cd_pass: object
    objective: object
    from_margins: object
    accumulate: object
    bounds: tuple


@lru_cache(maxsize=64)
def host_kernels(p) -> HostKernels:
    """``cpu``'s kernels for one problem, ``ovr``'s for K of them (``Problem.class_bounds``)."""
    if p.n_classes == 1:
        return HostKernels(cpu.cd_pass, cpu.chunk_objective, cpu.alpha_from_margins,
                           cpu.accumulate_w, (p.c_pos, p.c_neg))  # fmt: skip
    b = np.asarray(p.class_bounds, dtype=np.float64)
    return HostKernels(ovr.ovr_pass, ovr.ovr_objective, ovr.ovr_alpha_from_margins,
                       ovr.ovr_accumulate, (b[:, 1].copy(), b[:, 0].copy()))  # fmt: skip


class Unit(ABC):
    """One CoCoA+ worker; see the module docstring for the protocol."""

    #: rows/s before anything was measured, relative to one CPU thread (the first split)
    prior_rate: float = 1.0
    #: whether the unit can read chunks that live in device memory (CuPy input)
    reads_device: bool = False
    #: rows visited in buckets of this many consecutive rows (1: a full permutation)
    bucket_rows: int = 1

    def bind(self) -> None:  # noqa: B027 - a no-op unless overridden
        """Called once, on the unit's own thread, before anything else."""

    @abstractmethod
    def begin(self, w: np.ndarray, n_items: int, width: int = 2) -> None: ...

    @abstractmethod
    def run(self, item: Item, chunk, alpha, sqnorm, rows, layout) -> list: ...

    @abstractmethod
    def objective(self, item: Item, chunk, alpha, sqnorm, w, layout) -> list:
        """Exact ``(loss, entropy, gap)`` of the item's rows at ``w``. ``sqnorm`` (the rows'
        norms, None for device chunks) is for a unit that may keep the chunk (a GPU)."""

    def flush(self) -> list:
        return []

    @abstractmethod
    def finish(self) -> tuple[np.ndarray, np.ndarray | None]: ...

    @abstractmethod
    def warm(self, item: Item, chunk, alpha, w0: np.ndarray | None) -> None:
        """Add ``w(alpha)`` of the item's chunk into the unit's view, after setting ``alpha``
        from the margins at ``w0`` (``cpu.alpha_from_margins``) unless ``w0`` is None."""

    def drop_alpha(self) -> None:  # noqa: B027 - a no-op unless overridden
        """Forget any device copy of ``alpha``: the host state was just written."""

    def sync_alpha(self, alpha_of, only: set[int] | None = None) -> None:  # noqa: B027 - a no-op unless overridden
        """Bring ``alpha`` kept on a device home (``alpha_of(k)``: the host arrays), for the
        chunks in ``only`` or for all."""

    def choose(self, gaps: np.ndarray, sizes, largest, alpha_of) -> None:  # noqa: B027 - a no-op unless overridden
        """Pick what stays on the unit's device from the pieces' ``gaps`` (DuHL); ``sizes``
        are the pieces' ``(rows, nnz)``, ``largest`` the largest chunk's; what leaves takes
        its ``alpha`` home (``alpha_of``)."""

    def resident_chunks(self) -> set[int]:
        """Chunks this unit holds whole on its device (their alpha may live there)."""
        return set()

    def close(self) -> None:  # noqa: B027 - a no-op unless overridden
        """Free the unit's resources (on its own thread)."""

    def set_hot(self, labels: hot_pass.HotLabels) -> None:
        """From now on passes run under the hot block (``snapfit.engine.hot``; ``labels``: its
        positions, ``hot_pos`` and ``nh``, and the CPU units' relabeling): rows write only the
        cold columns of the view and add their hot moves (``sigma`` times) into an accumulator
        of ``nh`` entries, which ``hot_moves`` gives after ``finish``."""
        raise NotImplementedError(f"{type(self).__name__} has no hot-block pass")

    def hot_moves(self) -> np.ndarray:
        """The hot moves of the last pass (``set_hot``)."""
        raise NotImplementedError(f"{type(self).__name__} has no hot-block pass")


class CpuUnit(Unit):
    """A CPU thread: ``cpu.cd_pass`` on its own view of ``w`` (``view``, or ``w`` itself);
    under the hot block ``hot_pass.cd_pass_hot`` on the extended ``[w | w_H | acc]``
    (``HotLabels.extend``), whose head is then the view."""

    def __init__(self, problem, sigma: float, view: np.ndarray):
        self.p = problem
        self.sigma = float(sigma)
        self.view = view
        self.bucket_rows = int(problem.bucket_rows)
        self.labels = None

    def set_hot(self, labels):
        self.labels = labels
        self.wx = labels.extend(self.view)
        self.view = self.wx[: labels.d + 1]

    def hot_moves(self):
        return self.labels.moves(self.wx)

    def begin(self, w, n_items, width=2):
        if self.labels is not None:
            self.labels.extend(w, self.wx)
        elif self.view is not w:
            self.view[:] = w

    def run(self, item, chunk, alpha, sqnorm, rows, layout):
        p = self.p
        if self.labels is not None:
            lab = self.labels
            args = cpu.chunk_args(chunk)
            ids, cold = lab.of(args, sqnorm, item.k)
            result = hot_pass.cd_pass_hot(
                args[0], ids, *args[2:], p.c_pos, p.c_neg, p.bias, cold, lab.ib, alpha, self.wx,
                lab.nh, rows, self.sigma, p.loss,
            )  # fmt: skip
            return [(item, result)]
        kern = host_kernels(p)
        result = kern.cd_pass(
            *cpu.chunk_args(chunk), *kern.bounds, p.bias, sqnorm, alpha, self.view, rows,
            self.sigma, p.loss,
        )  # fmt: skip
        return [(item, result)]

    def objective(self, item, chunk, alpha, sqnorm, w, layout):
        p = self.p
        lo, hi = item_span(item, chunk.n_rows)
        kern = host_kernels(p)
        result = kern.objective(
            *cpu.chunk_args(chunk, lo, hi), *kern.bounds, p.bias, alpha[lo:hi], w, p.loss
        )
        return [(item, result)]

    def finish(self):
        return self.view, None

    def warm(self, item, chunk, alpha, w0):
        host_warm(self.p, chunk, alpha, w0, self.view, *item_span(item, chunk.n_rows))


class SharedCpuUnit(CpuUnit):
    """A CPU thread of a node whose threads share ``w`` (``snapfit.engine.shared``): its
    passes run ``cpu.cd_pass_views`` on its aliased view of that ``w`` as thread ``me``; its
    own ``view`` serves only the passes that sum over chunks (``warm``, the ``w(alpha)``
    rebuild) and the column counts that pick the hot coordinates."""

    def __init__(self, problem, sigma: float, view: np.ndarray, slots, me: int):
        super().__init__(problem, sigma, view)
        self.slots = slots
        self.me = int(me)

    def begin(self, w, n_items, width=2):
        if w is not self.slots.w:  # a summing pass (from zero), not a pass on the shared w
            self.view[:] = w

    def run(self, item, chunk, alpha, sqnorm, rows, layout):
        result = self.slots.run(self.me, chunk, self.p, sqnorm, alpha, rows, self.sigma)
        return [(item, result)]

    @property
    def counts(self) -> np.ndarray:
        """Column counts, kept in the view's memory (free during the counting pass: no
        ``n_features`` array more per thread); zero the view first."""
        return self.view[: self.slots.d].view(np.int64)

    def count(self, item, chunk, step: int) -> int:
        """Add the column counts of every ``step``-th row of the item's into ``counts``;
        returns how many rows that was."""
        lo, hi = item_span(item, chunk.n_rows)
        return cpu.count_columns(chunk.indptr[lo : hi + 1], chunk.indices, self.counts, step)


def host_warm(p, chunk, alpha, w0, out: np.ndarray, lo: int = 0, hi: int | None = None) -> None:
    """``alpha`` from the margins at ``w0`` (if given), then ``out += w(alpha)``, over rows
    ``[lo, hi)`` of ``chunk`` (all by default)."""
    hi = chunk.n_rows if hi is None else hi
    args = cpu.chunk_args(chunk, lo, hi)
    kern = host_kernels(p)
    if w0 is not None:
        kern.from_margins(*args, *kern.bounds, p.bias, w0, alpha[lo:hi], p.loss)
    kern.accumulate(*args, *kern.bounds, p.bias, alpha[lo:hi], out, p.loss)
