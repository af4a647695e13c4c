"""Which source a Parquet fit uses: everything resident when it fits the budget, else streamed.

Resident (``ResidentSource``: the whole data as one chunk) converges best per epoch and costs
nothing per epoch, so it is used whenever its peak (decoded chunks + their concatenation + dual
state + per-thread arrays) fits; otherwise ``StreamSource`` keeps the fit inside the budget.
Without ``memory_budget`` the budget is half of the memory available when the fit starts.
"""

from __future__ import annotations

from snapfit.engine.source import ResidentSource
from snapfit.stream.budget import (
    chunk_nbytes,
    default_memory_budget,
    fixed_nbytes,
    parse_memory_budget,
)
from snapfit.stream.decode import file_flags as _file_flags
from snapfit.stream.source import StreamSource


def resident_peak_nbytes(dataset, n_jobs: int) -> int:
    """Peak bytes of an all-resident fit: row groups and their concatenation, dual, views."""
    has_values, has_weight = _file_flags(dataset)
    decoded = sum(chunk_nbytes(r.n_rows, r.nnz, has_values, has_weight) for r in dataset.chunks)
    return 2 * decoded + 12 * dataset.n_rows + fixed_nbytes(dataset.n_features, n_jobs)


def source_for_dataset(dataset, *, memory_budget, n_jobs: int, chunk_rows=None):
    """``ResidentSource`` when the data fits ``memory_budget`` (parsed), else ``StreamSource``."""
    budget = (
        default_memory_budget() if memory_budget is None else parse_memory_budget(memory_budget)
    )
    if not getattr(dataset, "files", None) or resident_peak_nbytes(dataset, n_jobs) <= budget:
        return ResidentSource(dataset)
    return StreamSource(dataset, budget, n_jobs=n_jobs, chunk_rows=chunk_rows)
