"""What identifies a fit's data for its checkpoints: Parquet footers, or a hash of arrays."""

from __future__ import annotations

import hashlib
import os

import numpy as np


def dataset_fingerprint(dataset) -> dict:
    """Files (base name and size) and the rows and nnz of every row group, from metadata."""
    files = []
    for f in getattr(dataset, "files", []):
        groups = [[int(r.n_rows), int(r.nnz)] for r in dataset.chunks if r.file == f]
        size = os.path.getsize(f)
        files.append({"name": os.path.basename(f), "size": size, "row_groups": groups})
    return {"files": files, "n_features": int(dataset.n_features)}


def arrays_fingerprint(chunks) -> dict:
    """A SHA-256 over the arrays of in-memory chunks (one pass over the data)."""
    h = hashlib.sha256()
    n_rows = 0
    for c in chunks:
        n_rows += c.n_rows
        for a in c:
            h.update(b"-" if a is None else np.ascontiguousarray(a).view(np.uint8).data)
    return {"arrays_sha256": h.hexdigest(), "n_rows": n_rows}
