"""Which source a Parquet fit uses: everything resident when it fits the budget, else streamed.

Resident (``ResidentSource``: the whole data as one chunk) converges best per epoch and costs
nothing per epoch, so it is used whenever its peak (decoded chunks + their concatenation + dual
state + per-unit arrays) fits; otherwise ``StreamSource`` keeps the fit inside the budget.
The budget arrives resolved to bytes (``snapfit.train.resolve_budget``).
"""

from __future__ import annotations

from snapfit.engine.source import ResidentSource
from snapfit.stream.budget import chunk_nbytes, fixed_nbytes
from snapfit.stream.decode import file_flags as _file_flags
from snapfit.stream.source import StreamSource


def resident_peak_nbytes(dataset, n_units: int) -> int:
    """Peak bytes of an all-resident fit: row groups and their concatenation, dual, views."""
    has_values, has_weight = _file_flags(dataset)
    decoded = sum(chunk_nbytes(r.n_rows, r.nnz, has_values, has_weight) for r in dataset.chunks)
    return 2 * decoded + 12 * dataset.n_rows + fixed_nbytes(dataset.n_features, n_units)


def source_for_dataset(dataset, *, budget: int, n_units: int, chunk_rows=None, seed: int = 0,
                       hot: bool = False):  # fmt: skip
    """``ResidentSource`` when the data fits ``budget`` bytes, else ``StreamSource`` (``hot``:
    for threads sharing ``w``, see ``StreamSource``)."""
    if not getattr(dataset, "files", None) or resident_peak_nbytes(dataset, n_units) <= budget:
        return ResidentSource(dataset, chunk_rows)
    return StreamSource(dataset, budget, n_jobs=n_units, chunk_rows=chunk_rows, seed=seed,
                        hot=hot)  # fmt: skip
