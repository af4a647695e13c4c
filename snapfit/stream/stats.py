"""What the stream plans with, read once per fit: footers, file flags and ONE decoded sample.

Like scikit-learn's ``get_auto_step_size(max_squared_sum, ...)``, the data is looked at once
and passed on as numbers: ``DataStats.read`` opens each file's footer once (its columns, the
stored bytes of its row groups), takes rows and nnz per row group from the ``Dataset`` and
decodes one batch of the first row group, from which come the share of values that are not 1.0
and how much lz4 shrinks compact records. ``snapfit.stream.plan.plan_stream`` then decides from
these numbers alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from snapfit.data.fs import parquet_file
from snapfit.data.schema import VALUES, WEIGHT
from snapfit.errors import DataError
from snapfit.stream import record as record_format

#: Rows of the sample whose values give the share of entries that are not 1.0.
SAMPLE_ROWS = 4096


@dataclass(frozen=True)
class DataStats:
    """Numbers about a Parquet data set: all a stream plan needs, no file handles.

    ``rg_rows`` / ``rg_nnz`` / ``rg_stored`` per row group (``rg_stored``: compressed bytes
    in the file); ``has_values`` / ``has_weight``: any file has the column (a chunk mixes
    pieces of all files); ``valued_share``: of the sampled stored values, the share that is not
    1.0; ``lz4_ratio``: how many times lz4 shrinks the sample's compact records cut into
    ``sample_piece_rows``-row pieces. ``on_files``: False for data already in memory.
    ``real_targets``: the labels are read as real targets (float32 in a compact record).
    """

    n_features: int
    rg_rows: tuple[int, ...]
    rg_nnz: tuple[int, ...]
    has_values: bool = False
    has_weight: bool = False
    rg_stored: tuple[int, ...] = ()
    valued_share: float = 1.0
    lz4_ratio: float = 1.0
    sample_piece_rows: int = 4096
    on_files: bool = True
    real_targets: bool = False

    # derived once, plain attributes: the planner reads them without calling back here
    n_rows: int = field(init=False)
    nnz: int = field(init=False)
    flags: tuple[bool, bool] = field(init=False)
    groups: tuple[tuple[int, int], ...] = field(init=False)  # (rows, nnz) per row group

    def __post_init__(self):
        object.__setattr__(self, "n_rows", int(sum(self.rg_rows)))
        object.__setattr__(self, "nnz", int(sum(self.rg_nnz)))
        object.__setattr__(self, "flags", (bool(self.has_values), bool(self.has_weight)))
        groups = tuple(zip(self.rg_rows, self.rg_nnz, strict=True))
        object.__setattr__(self, "groups", groups)

    @classmethod
    def read(cls, dataset, *, piece_rows: int = 4096, id_bound: int | None = None,
             sample: bool = True) -> DataStats:  # fmt: skip
        """Footers once per file, then (``sample``) one sample: the first batch of the first
        row group, its compact records cut into ``piece_rows``-row pieces with ids below
        ``id_bound`` (default ``n_features``) for the lz4 ratio (1.0 when the sample cannot be
        read: the first pass then reports the bad data by file, row group and row)."""
        refs = dataset.chunks
        rows = tuple(int(r.n_rows) for r in refs)
        nnz = tuple(int(r.nnz) for r in refs)
        files = list(getattr(dataset, "files", None) or [])
        if not files:
            return cls(int(dataset.n_features), rows, nnz, on_files=False)
        stored = getattr(dataset, "stored_nbytes", None)
        if stored is not None and len(stored) == len(refs):  # the Dataset read the footers
            has_values = any(dataset.has_values_in(f) for f in files)
            has_weight = any(dataset.has_weight_in(f) for f in files)
        else:
            has_values, has_weight, stored = _footers(files, refs)
        stats = cls(int(dataset.n_features), rows, nnz, has_values, has_weight, tuple(stored),
                    sample_piece_rows=int(piece_rows),
                    real_targets=getattr(dataset, "targets", "class") == "real")  # fmt: skip
        if not sample:
            return stats
        share, ratio = _sample(dataset, stats, int(piece_rows), id_bound or dataset.n_features)
        return replace(stats, valued_share=share, lz4_ratio=ratio)


def _footers(files, refs) -> tuple[bool, bool, list[int]]:
    """``(has values, has weights, compressed bytes per row group)`` from the files' footers,
    for a dataset that did not keep them."""
    has_values = has_weight = False
    meta = {}
    for f in files:
        pf = parquet_file(f)
        names = pf.schema_arrow.names
        has_values |= VALUES in names
        has_weight |= WEIGHT in names
        meta[f] = pf.metadata
    stored = []
    for r in refs:
        rg = meta[r.file].row_group(r.row_group)
        stored.append(sum(rg.column(c).total_compressed_size for c in range(rg.num_columns)))
    return has_values, has_weight, stored


def _sample(dataset, stats: DataStats, piece_rows: int, id_bound: int) -> tuple[float, float]:
    """``(valued share, lz4 ratio)`` from the first batch of the first row group."""
    from snapfit.stream.cache import make_pieces
    from snapfit.stream.decode import PieceDecoder

    has_values, has_weight = stats.flags
    dec = PieceDecoder(dataset, make_pieces(stats.rg_rows[:1], piece_rows), has_values,
                       has_weight)  # fmt: skip
    batches = dec._batches(0)
    try:
        _, c = next(batches)
    except (StopIteration, DataError):
        return 1.0, 1.0
    finally:
        batches.close()
    share = 0.0
    if dataset.has_values_in(dataset.chunks[0].file) and c.values is not None:
        flat = c.values[: int(c.indptr[min(SAMPLE_ROWS, c.n_rows)])]
        share = float(np.mean(flat != np.float32(1.0))) if len(flat) else 0.0
    return share, _lz4_ratio(dec, c, record_format.index_width(id_bound), piece_rows)


def _lz4_ratio(dec, c, index_bytes: int, piece_rows: int) -> float:
    """How many times lz4 shrinks the compact records of chunk ``c`` cut into ``piece_rows``-row
    pieces (small ones shrink less)."""
    from snapfit.solvers import cpu
    from snapfit.stream.formats import COMPACT, LZ4, Shape

    shape = Shape(dec.has_values, dec.has_weight, index_bytes)
    sq = np.zeros(c.n_rows, np.float32)
    values = c.values if c.values is not None else np.zeros(0, np.float32)
    cpu.row_sqnorms(c.indptr, c.indices, values, c.values is not None, sq)
    codec, plain, packed = LZ4.codec(), 0, 0
    step = max(1, piece_rows)
    for lo in range(0, c.n_rows, step):
        hi = min(c.n_rows, lo + step)
        parts = dec._parts(c.rows(lo, hi), sq[lo:hi])
        (rec,), _ = COMPACT.encode(parts, shape)
        plain, packed = plain + len(rec), packed + codec.compress(rec).size
    return plain / max(1, packed)


def column_counts(dataset, rg_rows, flags, n_rows: int) -> tuple[np.ndarray, int]:
    """Per-feature row counts over about ``n_rows`` rows spread over the row groups
    (``PieceDecoder.count_columns``): what threads sharing ``w`` choose their hot set from."""
    from snapfit.stream.cache import make_pieces
    from snapfit.stream.decode import PieceDecoder

    pieces = make_pieces(rg_rows, max(rg_rows, default=1))
    return PieceDecoder(dataset, pieces, *flags).count_columns(n_rows)
