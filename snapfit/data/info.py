"""A dataset's summary for ``snapfit info``: sizes from footers, label balance (or the targets'
mean and spread) from one column."""

from __future__ import annotations

from snapfit.data import fs
from snapfit.data.reader import Dataset

_PLUMBING = ("row_group_nnz", "n_features", "format_version", "names")


def dataset_info(source) -> dict:
    """Rows, nnz, n_features, row groups, positive rate (or, for real targets, their mean,
    std, min and max), bytes on disk and provenance.

    Reads the footers and the ``label`` column only.
    """
    ds = Dataset(source, require_labels=False)
    real = ds.target_kind == "real"
    n_neg, n_pos = (0, 0) if real else ds.label_counts()
    return {
        "source": ds.source,
        "files": len(ds.files),
        "rows": ds.n_rows,
        "nnz": ds.nnz,
        "n_features": ds.n_features,
        "row_groups": len(ds.chunks),
        "has_labels": ds.has_labels,
        "has_values": any(ds.has_values_in(f) for f in ds.files),
        "target_kind": ds.target_kind,
        "positive_rate": n_pos / (n_pos + n_neg) if ds.has_labels and not real else None,
        "targets": ds.target_summary() if real else None,
        "bytes": sum(fs.size(f) for f in ds.files),
        "format_version": ds.metadata.get("format_version"),
        "provenance": {k: v for k, v in ds.metadata.items() if k not in _PLUMBING},
    }
