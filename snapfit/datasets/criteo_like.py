"""A seeded Criteo-like data maker: same field layout, frequencies and label rate, any size.

Rows come in blocks of :data:`BLOCK` rows, block ``b`` drawn from ``default_rng([seed, b])``, so
a set is the same whatever the row-group size, ``rows=n`` is a prefix of ``rows=m > n``, memory
stays bounded, and everything is vectorized numpy. Per field:

* integers: log-normal magnitudes (heavy tails), I2 sometimes negative, field-wise missing rates;
* categoricals: ranks drawn log-uniformly in ``[1, K]`` (Zipf with exponent 1: frequency ~ 1/rank)
  with the Kaggle Criteo cardinalities K (3 to ~10 M), token = 32 bits of a seeded hash of
  (field, rank), field-wise missing rates;
* labels: a planted logistic model (weights from a seeded hash of (field, rank), so nothing
  of size K is stored); the positive rate is about 20 %.

The Parquet output is what converting the ``--tsv`` output gives (same feature map, same rows).
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import scipy.sparse as sp

from snapfit.data.schema import DEFAULT_ROW_GROUP_ROWS
from snapfit.data.writer import ChunkWriter, atomic_output, check_output
from snapfit.datasets.criteo import ConvertReport, criteo_transform
from snapfit.datasets.criteo_hash import (
    N_CAT,
    N_INT,
    check_hash_bits,
    format_hex8,
    int_values,
    rows_to_csr,
    splitmix64,
)

BLOCK = 1 << 15

CARDINALITY = np.array(
    [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194]
    + [27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572]
)
CAT_MISSING = np.array([0, 0, 0.03, 0.03, 0, 0.12, 0, 0, 0, 0, 0, 0.03, 0, 0, 0, 0.03, 0, 0])
CAT_MISSING = np.concatenate([CAT_MISSING, [0.44, 0.44, 0, 0.76, 0, 0, 0.44, 0.44]])
INT_MISSING = np.array([0.45, 0, 0.21, 0.22, 0.03, 0.22, 0.04, 0, 0.04, 0.45, 0.04, 0.77, 0.22])
INT_MU = np.array([0.8, 1.5, 2.5, 1.8, 8.5, 4.5, 1.8, 2.5, 3.8, 0.3, 1.2, 0.2, 1.8])
INT_SIGMA = np.array([1.3, 1.9, 1.6, 1.1, 2.2, 1.9, 1.6, 1.0, 1.3, 0.7, 1.1, 0.9, 1.2])
CAT_SCALE = 0.7  # planted weights are uniform in [-CAT_SCALE, CAT_SCALE] per categorical field
BIAS = -2.9
INT_MU32, INT_SIGMA32 = INT_MU.astype(np.float32), INT_SIGMA.astype(np.float32)
MISSING32 = np.concatenate([INT_MISSING, CAT_MISSING]).astype(np.float32)
CARD32 = CARDINALITY.astype(np.float32)
LOG_CARD32 = np.log(CARDINALITY + 1.0).astype(np.float32)
FIELD_KEYS = (np.arange(N_CAT, dtype=np.uint64) + np.uint64(1)) << np.uint64(40)


def make_block(seed: int, b: int, dense: bool = False):
    """Block ``b`` for ``seed``: (labels int8, ints, int_present, tokens, cat_present).

    ``dense``: no field is ever missing, so every row has all 39 entries (the shape of
    benchmarks that count 40 nnz per row with the intercept); values are drawn as without it.
    """
    rng = np.random.default_rng([seed, b])
    n = BLOCK
    z = rng.standard_normal((n, N_INT), dtype=np.float32)
    ints = np.floor(np.exp(INT_MU32 + INT_SIGMA32 * z)) - 1
    ints = np.minimum(ints, 2**31 - 1).astype(np.int64)
    ints[:, 1] -= 3 * (rng.random(n, dtype=np.float32) < 0.1)  # I2 has small negatives
    present = rng.random((n, N_INT + N_CAT), dtype=np.float32) >= MISSING32
    if dense:
        present[:] = True
    int_present, cat_present = present[:, :N_INT], present[:, N_INT:]
    u = rng.random((n, N_CAT), dtype=np.float32)
    ranks = np.minimum(np.exp(u * LOG_CARD32), CARD32).astype(np.uint64)
    salt = splitmix64(np.array([seed], dtype=np.uint64))[0]
    mixed = splitmix64((ranks | FIELD_KEYS) ^ salt)
    tokens = (mixed & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    # The planted weight of a value comes from the other 32 bits of the same hash.
    w_cat = (mixed >> np.uint64(32)).astype(np.float32) * np.float32(2 * CAT_SCALE / 2**32)
    w_cat -= np.float32(CAT_SCALE)
    w_int = np.random.default_rng([seed, 2**40]).normal(0, 0.3, N_INT).astype(np.float32)
    centred = (int_values(ints) - INT_MU32) * int_present
    logit = BIAS + (w_cat * cat_present).sum(1) + centred @ w_int
    labels = (rng.random(n, dtype=np.float32) * (1 + np.exp(-logit)) < 1).astype(np.int8)
    return labels, ints, int_present, tokens, cat_present


def _block_rows(seed: int, b: int, n: int, dense: bool = False):
    return tuple(a[:n] for a in make_block(seed, b, dense))


def iter_blocks(rows: int, seed: int, transform=None, workers: int = 2, dense: bool = False):
    """Blocks covering ``rows`` rows (the last one cut short), optionally ``transform``-ed.

    Blocks are made ahead by ``workers`` threads (numpy's generators and ufuncs release the
    GIL), at most ``2 * workers`` in flight, so memory stays bounded and order is kept.
    """
    if rows < 1:
        raise ValueError(f"rows is {rows}; make at least one row.")
    sizes = [min(BLOCK, rows - b * BLOCK) for b in range((rows + BLOCK - 1) // BLOCK)]

    def job(b):
        block = _block_rows(seed, b, sizes[b], dense)
        return block if transform is None else transform(block)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending = deque()
        for b in range(len(sizes)):
            pending.append(pool.submit(job, b))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def make_criteo_like(rows: int, seed: int = 0, hash_bits: int = 20, dense: bool = False):
    """A small Criteo-like set in memory (the rows :func:`make_criteo_like_parquet` writes;
    ``dense``: no missing fields, 39 entries in every row, see :func:`make_block`).

    Returns
    -------
    X : scipy.sparse.csr_array, shape (rows, 2**hash_bits), float32
    y : ndarray of int8 in {0, 1}
    """
    hash_bits = check_hash_bits(hash_bits)
    indptrs, indices, values, labels, total = [np.zeros(1, np.int64)], [], [], [], 0
    for lab, ints, ip, tok, cp in iter_blocks(rows, seed, dense=dense):
        indptr, idx, val = rows_to_csr(ints, ip, tok, cp, hash_bits)
        indptrs.append(indptr[1:] + total)
        total += int(indptr[-1])
        indices.append(idx)
        values.append(val)
        labels.append(lab)
    X = sp.csr_array(
        (np.concatenate(values), np.concatenate(indices), np.concatenate(indptrs)),
        shape=(rows, 1 << hash_bits),
    )
    return X, np.concatenate(labels)


def make_criteo_like_parquet(
    path,
    rows: int,
    seed: int = 0,
    *,
    hash_bits: int = 20,
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
    force: bool = False,
) -> ConvertReport:
    """Write a Criteo-like set as snapfit Parquet (already hashed), atomically.

    Parameters
    ----------
    path : str or path
        Output file.
    rows, seed : int
        Size and seed; equal seeds give equal rows.
    hash_bits : int
        ``n_features = 2**hash_bits``, as for ``convert_criteo``.
    row_group_rows : int
        Rows per row group.
    force : bool
        Overwrite an existing file.
    """
    hash_bits = check_hash_bits(hash_bits)
    out = check_output(path, force=force)
    provenance = {
        "source": f"make-data criteo-like rows={rows} seed={seed}",
        "format": "criteo-like",
        "hash_bits": hash_bits,
        "transform": criteo_transform(hash_bits),
    }
    with atomic_output(out) as tmp:
        writer = ChunkWriter(
            tmp,
            n_features=1 << hash_bits,
            row_group_rows=row_group_rows,
            provenance=provenance,
        )
        with writer:  # closed at the end, aborted on an error
            to_csr = lambda blk: (*rows_to_csr(*blk[1:], hash_bits), blk[0])  # noqa: E731
            for indptr, indices, values, labels in iter_blocks(rows, seed, to_csr):
                writer.append(indptr, indices, values, labels)
    nnz = sum(writer.row_group_nnz)
    return ConvertReport(out, writer.n_rows, nnz, len(writer.row_group_nnz), 0, [])


def _tsv_table(labels, ints, int_present, tokens, cat_present) -> pa.Table:
    n = len(labels)
    cols, names = [pa.array(labels)], ["label"]
    for j in range(N_INT):
        cols.append(pa.array(ints[:, j], mask=~int_present[:, j]))
        names.append(f"I{j + 1}")
    offsets = pa.py_buffer(np.arange(0, 8 * n + 1, 8, dtype=np.int32))
    for c in range(N_CAT):
        chars = pa.py_buffer(np.ascontiguousarray(format_hex8(tokens[:, c])))
        validity = pa.py_buffer(np.packbits(cat_present[:, c], bitorder="little"))
        cols.append(pa.StringArray.from_buffers(n, offsets, chars, validity))
        names.append(f"C{c + 1}")
    return pa.Table.from_arrays(cols, names=names)


def make_criteo_like_tsv(path, rows: int, seed: int = 0, *, force: bool = False) -> str:
    """Write a Criteo-like set as raw Criteo TSV (gzip if ``path`` ends in ``.gz``), atomically.

    Converting it with ``convert_criteo`` gives what :func:`make_criteo_like_parquet` writes.
    """
    out = check_output(path, force=force)
    options = pacsv.WriteOptions(include_header=False, delimiter="\t", quoting_style="none")
    gz = os.fspath(out).endswith(".gz")
    with atomic_output(out) as tmp:
        with pa.output_stream(tmp, compression="gzip" if gz else None) as sink:
            for block in iter_blocks(rows, seed):
                pacsv.write_csv(_tsv_table(*block), sink, options)
    return out
