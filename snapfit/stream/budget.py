"""How a memory budget is spent: parsing "2GB", sizing chunks, and splitting the bytes.

The budget charges everything that grows with the data or the model and stays for the fit:

* ``views``: per solver thread a view of ``w`` (8 bytes/feature; view 0 is ``w`` itself) and one
  more copy for the epoch's start / the result. Streamed chunks bring their rows' norms, so the
  solver threads need no norm scratch; the first pass computes norms with ``cpu.row_sqnorms``,
  whose scratch is a small per-row table, so its readers need none either. (A 2^24-feature
  model with 2 threads still holds 400 MB here.)
* ``pool``: the reusable buffers the reader fills while the solver works (at least two:
  double buffering);
* ``dual``: 8 bytes/row (alpha float64), spilled to a file read and written by chunk slices when
  it would leave less than the pool;
* ``resident``: whatever is left keeps decoded pieces in memory across epochs (DuHL picks which),
  or, when Parquet is decoded every epoch, holds the window of decoded row groups; but first
  up to ``RUNTIME_NBYTES`` of it (at most half) go to what the fit allocates outside this plan
  (see below).

The first pass runs before any of these exist and is charged separately: each reader holds one
batch being decoded (``PieceDecoder.batch_peak_nbytes``), so the minimum is the larger of the
two phases. Python objects, the interpreter, numba and pyarrow's own pools are not charged: they
are a constant measured at ~150-250 MB here, independent of the data size. (Arrow's allocator
keeps the pages it freed; they are handed back when the first pass ends and after each epoch
that decodes Parquet, so its pool does not grow that constant: ``memlimit.release_arrow_memory``.)
What the fit itself adds outside the plan (its compiled kernels, ~50 MB once loaded; heap and
thread stacks) is taken from the resident share, which has the room at large budgets: a 2 GB
fit of 200M rows peaked at 2.29-2.35 GB of RSS without this allowance.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from snapfit.errors import ResourceError


def parse_memory_budget(value) -> int:
    """Bytes from an int or a string such as ``"2GB"``, ``"512MB"``, ``"1.5GiB"``, ``"1e9"``.

    The one size parser of snapfit (the CLI's ``--memory-budget`` uses it too), and Dask's: a
    string means exactly what ``dask.utils.parse_bytes`` makes of it, so the same text given
    to a Dask worker's ``memory_limit`` and to ``memory_budget`` is the same number of bytes.
    ``kB/MB/GB/TB`` and the bare letters ``k/M/G/T`` are decimal (10^3 ...), ``KiB/MiB/GiB/TiB``
    binary (2^10 ...); case does not matter.
    """
    if isinstance(value, bool):
        raise TypeError(f"memory_budget must be an int or a string like '2GB'; got {value!r}.")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"memory_budget is {value}; it must be a positive number of bytes.")
        return value
    if not isinstance(value, str):
        raise TypeError(
            f"memory_budget must be an int or a string like '2GB'; got {type(value).__name__}."
        )
    from dask.utils import parse_bytes

    try:
        n = parse_bytes(value) if value.strip() else 0
    except ValueError:
        raise ValueError(
            f"memory_budget {value!r} is not a size; write e.g. '2GB', '512MB', '1.5GiB' or an "
            "int number of bytes."
        ) from None
    if n <= 0:
        raise ValueError(f"memory_budget {value!r} is not a positive size.")
    return int(n)


def default_memory_budget() -> int:
    """Half of the memory this process may still use (the host's ``MemAvailable``, and no more
    than its cgroup limits allow: see ``memlimit``), or 2 GB when neither can be read."""
    from snapfit.stream.memlimit import available_memory

    free = available_memory()
    return 2 * 10**9 if free is None else free // 2


def chunk_nbytes(n_rows: int, nnz: int, has_values: bool, has_weight: bool) -> int:
    """Bytes of a decoded chunk as the cache lays it out (each array 8-byte aligned)."""
    sizes = [8 * (n_rows + 1), 4 * nnz, 4 * nnz if has_values else 0, 4 * n_rows]
    sizes.append(4 * n_rows if has_weight else 0)
    return sum(_align(s) for s in sizes)


def buffer_nbytes(n_rows: int, nnz: int, has_values: bool, has_weight: bool,
                  width: int = 1) -> int:  # fmt: skip
    """A streamed chunk's buffer: its CSR arrays plus its rows' norms (f32) and duals (f64,
    ``width`` per row: K for one-vs-rest over K classes)."""
    return (chunk_nbytes(n_rows, nnz, has_values, has_weight) + _align(4 * n_rows)
            + 8 * width * n_rows)  # fmt: skip


#: What a fit allocates outside the plan (kernels, heap, thread stacks), paid from ``resident``.
RUNTIME_NBYTES = 96 * 10**6


def _align(n: int) -> int:
    return (n + 7) // 8 * 8


def fixed_nbytes(n_features: int, n_jobs: int, width: int = 1) -> int:
    """Per-thread ``w`` views of an in-memory fit (8 B per feature and thread; ``width``
    blocks of them for one-vs-rest over ``width`` classes)."""
    return max(1, n_jobs) * (n_features + 1) * 8 * width


def views_nbytes(n_features: int, n_jobs: int, width: int = 1) -> int:
    """A streamed fit's ``w`` views: one per solver thread plus one copy (see the docstring),
    of ``width`` blocks each (one-vs-rest)."""
    return (max(1, n_jobs) + 1) * (n_features + 1) * 8 * width


@dataclass(frozen=True)
class BudgetPlan:
    """How ``budget`` bytes are split; ``resident`` is what DuHL may keep across epochs."""

    budget: int
    fixed: int  # the w views
    pool: int
    n_buffers: int
    dual: int
    spill_dual: bool
    resident: int
    minimum: int
    ingest: int = 0  # per first-pass reader

    def describe(self) -> str:
        return (
            f"budget {size(self.budget)} = w views {size(self.fixed)} + read buffers "
            f"{self.n_buffers} x {size(self.pool / self.n_buffers)} + dual "
            f"{size(self.dual)}{' (spilled to disk)' if self.spill_dual else ''} + "
            f"resident up to {size(self.resident)} (minimum {size(self.minimum)})"
        )


def size(nbytes: float) -> str:
    """``812 B``, ``35.2 kB``, ``1.5 MB``, ``2.1 GB``: a size in a message, never ``0.0 MB``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes:.0f} B"


def buffers_wanted(n_jobs: int) -> int:
    """Read buffers to aim for: four per solver thread (at least three).

    The engine deals each chunk to a fixed thread (for reproducible arithmetic) and the reader
    fills buffers in the engine's order, so a thread that falls behind holds buffers with its
    queued chunks while the other thread waits for one. With 3 buffers of 64k-row chunks the
    streamed epoch took 1.31x the compute-only epoch on the same chunks (4M Criteo-like rows, 2
    threads, a loaded 2-core machine); with 8 it took 1.05x, at 64k- or 32k-row chunks alike.
    """
    return max(3, 4 * max(1, n_jobs))


def plan_budget(
    budget: int,
    *,
    n_features: int,
    n_jobs: int,
    n_rows: int,
    max_chunk_bytes: int,
    ingest_bytes: int = 0,
    n_buffers: int | None = None,
    pool_share: float = 0.5,
    width: int = 1,
    resident_min: int = 0,
) -> BudgetPlan:
    """Split ``budget``; raise :class:`ResourceError` naming the minimum when it cannot work.

    The minimum is the larger of the first pass (one reader's ``ingest_bytes``) and training:
    the ``w`` views, two chunk buffers (double buffering) and ``resident_min`` (what decoding
    Parquet every epoch needs for its window). The dual variables stay in memory when they fit
    next to two buffers; then up to ``n_buffers`` (default :func:`buffers_wanted`) buffers are
    used, at most ``pool_share`` of what is left, and the rest is the resident share.
    """
    fixed = views_nbytes(n_features, n_jobs, width)
    slot = max(1, max_chunk_bytes)
    minimum = max(fixed + 2 * slot + resident_min, ingest_bytes)
    if budget < minimum:
        window = f" + {size(resident_min)} of decoded row groups" if resident_min else ""
        training = (
            f"{size(fixed)} of w views for {n_jobs} thread(s) x {n_features} features + "
            f"2 read buffers of {size(slot)}, the largest chunk{window}"
        )
        if ingest_bytes > fixed + 2 * slot + resident_min:
            why = f"the first pass decodes a batch of {size(ingest_bytes)}; training needs "
            why += training
        else:
            why = training
        raise ResourceError(
            f"memory_budget of {size(budget)} is too small: the minimum here is "
            f"{math.ceil(minimum / 1e5) / 10:.1f} MB ({why}). Raise the budget or pass a smaller "
            "chunk_rows."
        )
    dual = 8 * width * n_rows  # alpha, float64, ``width`` per row (one-vs-rest: K)
    avail = budget - fixed - resident_min
    spill = dual + 2 * slot > avail
    avail -= 0 if spill else dual
    want = buffers_wanted(n_jobs) if n_buffers is None else n_buffers
    n_buffers = int(max(2, min(want, pool_share * avail // slot)))
    pool = n_buffers * slot
    left = budget - fixed - pool - (0 if spill else dual)
    left -= min(RUNTIME_NBYTES, max(0, left) // 2)
    return BudgetPlan(budget, fixed, pool, n_buffers, dual, spill, max(0, left), minimum,
                      ingest_bytes)  # fmt: skip


def temp_dir() -> str:
    """Where caches and spilled arrays go: ``$SNAPFIT_TMPDIR``, else the system temp dir."""
    import tempfile

    return os.environ.get("SNAPFIT_TMPDIR") or tempfile.gettempdir()
