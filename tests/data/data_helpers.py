"""Helpers shared by the data-layer tests (a unique module name: test dirs share sys.path)."""

import os

import numpy as np
import scipy.sparse as sp


def dense_of(chunks, n_features):
    """Dense matrix and ±1 labels of a list of chunks (duplicates add, values None = ones)."""
    mats, ys = [], []
    for c in chunks:
        values = np.ones(c.nnz, np.float32) if c.values is None else c.values
        m = sp.csr_array((values, c.indices, c.indptr), shape=(c.n_rows, n_features))
        mats.append(m.toarray())
        ys.append(c.y)
    return np.vstack(mats), np.concatenate(ys)


def leftovers(directory):
    """Files in ``directory`` that look like a writer's temporary files."""
    return [n for n in os.listdir(directory) if n.startswith(".") and n.endswith(".tmp")]
