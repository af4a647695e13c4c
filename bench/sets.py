"""Benchmark data sets, made once under ``bench/data/`` (git-ignored) and reused.

Every set is a directory holding ``train.npz`` and ``test.npz`` (scipy CSR, float32, plus
labels in {0, 1}), ``train.parquet`` (the training rows in snapfit's format, for out-of-core
fits) and ``meta.json``. Five kinds, all seeded:

* ``criteo-like``: ``make_criteo_like`` rows; the test rows are the blocks that follow the
  training rows (same seed, hence the same planted model and hashing);
* ``criteo-40``: the same generator with no missing fields: 39 entries in every row (40 with
  the intercept), the shape of the independent Snap ML comparison (2^20 features);
* ``criteo-tsv``: ``make_criteo_like_tsv`` written as raw Criteo TSV, then ``convert``-ed (the
  path a real Criteo day takes), last sixth held out;
* ``onehot-svm``: categorical fields one-hot encoded, written by scikit-learn's
  ``dump_svmlight_file`` and ``convert``-ed, last sixth held out;
* ``tiny``: a small Criteo-like set on which every system converges, for the objective check;
  its columns are compacted to those the training rows use (a column no training row touches
  has ``w_j = 0`` at the optimum, so the objective and its minimum are unchanged), which makes
  the O(features) vector work of liblinear, lbfgs, saga and VW's L-BFGS ~10x cheaper.

The snapfit imports are local to the functions that need them, so a benchmark job that only
loads a set (``load_xy``) does not pay for importing snapfit, numba and scikit-learn.
"""

from __future__ import annotations

import json
import os

import numpy as np
import scipy.sparse as sp

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
HASH_BITS = 20
# Bumped whenever a kind's recipe changes, so sets made by an older recipe are made again.
RECIPE = 2


def save_xy(path: str, X, y) -> None:
    X = sp.csr_matrix(X)
    np.savez(path, data=X.data, indices=X.indices, indptr=X.indptr, shape=X.shape, y=y)


def load_xy(path: str):
    """(CSR float32 with int32 indices, labels in {0, 1} as int8)."""
    z = np.load(path)
    X = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]))
    return X, z["y"]


def _criteo_like_test(n_train: int, n_test: int, seed: int, dense: bool = False):
    """Rows of the blocks after the training rows: same seed, no row shared."""
    from snapfit.datasets.criteo_hash import rows_to_csr
    from snapfit.datasets.criteo_like import BLOCK, _block_rows

    first = (n_train + BLOCK - 1) // BLOCK
    parts, labels = [], []
    for b in range(first, first + (n_test + BLOCK - 1) // BLOCK):
        lab, ints, ip, tok, cp = _block_rows(seed, b, BLOCK, dense)
        indptr, idx, val = rows_to_csr(ints, ip, tok, cp, HASH_BITS)
        parts.append(sp.csr_matrix((val, idx, indptr), shape=(len(lab), 1 << HASH_BITS)))
        labels.append(lab)
    return sp.vstack(parts, format="csr")[:n_test], np.concatenate(labels)[:n_test]


def _onehot(rows: int, seed: int, fields: int = 26):
    """Categorical fields with Zipf-like value frequencies and a planted logistic model."""
    rng = np.random.default_rng(seed)
    card = np.unique(np.geomspace(4, 200_000, fields).astype(np.int64))
    offsets = np.r_[0, np.cumsum(card)]
    cols = np.empty((rows, len(card)), np.int64)
    for f, k in enumerate(card):
        cols[:, f] = np.minimum(np.exp(rng.random(rows) * np.log(k + 1)), k).astype(np.int64) - 1
    cols += offsets[:-1]
    w = rng.normal(0.0, 0.6, offsets[-1])
    logit = -1.5 + w[cols].sum(1)
    y = (rng.random(rows) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int8)
    indptr = np.arange(0, rows * len(card) + 1, len(card))
    X = sp.csr_matrix(
        (np.ones(cols.size, np.float32), cols.ravel(), indptr), shape=(rows, offsets[-1])
    )
    return X, y


def _read_parquet_csr(path: str):
    from snapfit.data import Dataset

    ds = Dataset(path)
    chunks = list(ds.iter_chunks())
    X = sp.vstack(
        [
            sp.csr_matrix(
                (
                    c.values if c.values is not None else np.ones(c.nnz, np.float32),
                    c.indices,
                    c.indptr,
                ),
                shape=(c.n_rows, ds.n_features),
            )  # fmt: skip
            for c in chunks
        ],
        format="csr",
    )
    y = (np.concatenate([c.y for c in chunks]) > 0).astype(np.int8)
    return X, y


def _compact(Xtr, Xte):
    """Keep only the columns the training rows use, in order (see the module docstring)."""
    used = np.unique(Xtr.indices)
    Xtr = sp.csr_matrix(Xtr)[:, used]
    return Xtr, sp.csr_matrix(Xte)[:, used]


def _split(X, y, n_test: int):
    n = X.shape[0] - n_test
    return (X[:n], y[:n]), (X[n:], y[n:])


def make_set(kind: str, rows: int, *, seed: int = 0, log=print) -> str:
    """Directory of set ``kind`` with ``rows`` training rows; made if missing."""
    name = f"{kind}-{rows}"
    out = os.path.join(DATA_DIR, name)
    if os.path.exists(os.path.join(out, "meta.json")) and meta_of(out).get("recipe") == RECIPE:
        return out
    os.makedirs(out, exist_ok=True)
    n_test = max(rows // 5, 1000)
    log(f"making {name} ...")
    from snapfit.data.writer import write_parquet
    from snapfit.datasets.convert import convert
    from snapfit.datasets.criteo_like import make_criteo_like, make_criteo_like_tsv

    if kind in ("criteo-like", "tiny", "criteo-40"):
        dense = kind == "criteo-40"
        Xtr, ytr = make_criteo_like(rows, seed=seed, hash_bits=HASH_BITS, dense=dense)
        Xte, yte = _criteo_like_test(rows, n_test, seed, dense)
        if kind == "tiny":
            Xtr, Xte = _compact(Xtr, Xte)
    elif kind == "criteo-tsv":
        tsv = os.path.join(out, "raw.tsv")
        make_criteo_like_tsv(tsv, rows + n_test, seed=seed + 7, force=True)
        pq_all = os.path.join(out, "converted.parquet")
        convert(tsv, pq_all, format="criteo", hash_bits=HASH_BITS, force=True)
        os.remove(tsv)
        (Xtr, ytr), (Xte, yte) = _split(*_read_parquet_csr(pq_all), n_test)
        os.remove(pq_all)
    elif kind == "onehot-svm":
        from sklearn.datasets import dump_svmlight_file

        X, y = _onehot(rows + n_test, seed)
        svm = os.path.join(out, "raw.svm")
        dump_svmlight_file(X, y, svm, zero_based=True)
        pq_all = os.path.join(out, "converted.parquet")
        convert(svm, pq_all, format="svmlight", zero_based=True, force=True)
        os.remove(svm)
        (Xtr, ytr), (Xte, yte) = _split(*_read_parquet_csr(pq_all), n_test)
        os.remove(pq_all)
    else:
        raise ValueError(f"unknown data set kind {kind!r}")
    Xtr, Xte = sp.csr_matrix(Xtr, dtype=np.float32), sp.csr_matrix(Xte, dtype=np.float32)
    Xtr.indices = Xtr.indices.astype(np.int32)
    Xte.indices = Xte.indices.astype(np.int32)
    save_xy(os.path.join(out, "train.npz"), Xtr, ytr)
    save_xy(os.path.join(out, "test.npz"), Xte, yte)
    # Row groups of 64k rows keep the streaming engine's two read buffers small enough for a
    # budget of 20 % of the data from ~1M rows up (its minimum is w copies + 2 row groups).
    write_parquet(os.path.join(out, "train.parquet"), Xtr, ytr, row_group_rows=1 << 16, force=True)
    meta = {
        "recipe": RECIPE, "name": name, "kind": kind, "rows": int(Xtr.shape[0]),
        "test_rows": int(Xte.shape[0]),
        "n_features": int(Xtr.shape[1]), "nnz": int(Xtr.nnz), "positive_rate": float(ytr.mean()),
    }  # fmt: skip
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return out


def meta_of(path: str) -> dict:
    with open(os.path.join(path, "meta.json")) as f:
        return json.load(f)


def memory_source(X, y):
    """A loaded set (``load_xy``: labels in {0, 1}) as the engine's in-memory source."""
    from snapfit.engine import InMemorySource
    from snapfit.inputs import csr_chunks

    y_pm = np.where(y > 0, 1.0, -1.0).astype(np.float32)
    return InMemorySource(csr_chunks(X, y_pm, None, None), X.shape[1])


def fit_inputs(X, y, C: float, bias: float, **problem):
    """``(memory_source, problem)`` for an engine fit with ``C`` for both classes and
    ``bias``, the rest of ``Problem``'s fields from ``problem``."""
    from snapfit.engine import Problem

    problem = Problem(n_features=X.shape[1], c_pos=C, c_neg=C, bias=bias, **problem)
    return memory_source(X, y), problem
