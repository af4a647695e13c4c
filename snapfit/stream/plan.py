"""``plan_stream``: every decision of a Parquet fit's data path, made once from numbers.

Like Arrow's ``ScannerBuilder.Finish()``, the options are checked and fixed before anything is
read: resident or streamed; for a stream, where epochs read pieces from (the cache, or Parquet
decoded every epoch), how the cache stores them (raw, compact, lz4), rows per chunk and per
piece, the split of the budget and the first pass's readers. The planner is pure: it reads
``DataStats`` (``snapfit.stream.stats``), the budget and the free disk and memory it is
given, and returns a frozen ``StreamPlan``; ``StreamSource`` only carries it out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from snapfit.errors import ResourceError
from snapfit.stream import record as record_format
from snapfit.stream.budget import (
    BudgetPlan,
    buffer_nbytes,
    buffers_wanted,
    chunk_nbytes,
    fixed_nbytes,
    plan_budget,
    size,
)
from snapfit.stream.cache import Pieces, make_pieces
from snapfit.stream.decode import BATCH_ROWS, record_nbytes
from snapfit.stream.formats import FORMATS, LZ4, Shape
from snapfit.stream.stats import DataStats

DEFAULT_CHUNK_ROWS = 1 << 16
DEFAULT_PIECE_ROWS = 1 << 12
#: The default chunk size is halved down to this when two buffers would not fit the budget,
MIN_CHUNK_ROWS = 1 << 12
#: and down to this while the budget's pool share holds fewer buffers than wanted.
MIN_BUFFERED_CHUNK_ROWS = 1 << 14
MODES = ("auto", "cache", "parquet")
CACHE_FORMATS = ("auto", *FORMATS)


def piece_rows_for(chunk_rows: int, piece_rows: int | None = None) -> int:
    """Rows per piece: ``piece_rows`` (default ``chunk_rows // 16``, at most
    ``DEFAULT_PIECE_ROWS``), no more than a chunk's."""
    rows = int(piece_rows or max(1, min(DEFAULT_PIECE_ROWS, chunk_rows // 16)))
    return min(rows, int(chunk_rows))


def first_chunk_rows(n_rows: int, chunk_rows: int | None) -> int:
    """The chunk rows planning starts from: the caller's, else 65536, fewer so that there are at
    least 16 chunks (and what ``DataStats`` samples its lz4 pieces with)."""
    return int(chunk_rows or max(16, min(DEFAULT_CHUNK_ROWS, int(n_rows) // 16)))


def resident_peak_nbytes(stats: DataStats, n_units: int, width: int = 1) -> int:
    """Peak bytes of an all-resident fit: row groups and their concatenation, dual (``width``
    per row), views."""
    decoded = sum(chunk_nbytes(r, z, *stats.flags) for r, z in stats.groups)
    return (2 * decoded + (4 + 8 * width) * stats.n_rows
            + fixed_nbytes(stats.n_features, n_units, width))  # fmt: skip


def cache_bytes(stats: DataStats, fmt: str, id_bound: int) -> int:
    """Estimated bytes of the cache file in format ``fmt`` (``snapfit.stream.formats``), the
    sampled valued share given a 5 % margin."""
    share = min(1.0, 1.05 * stats.valued_share) if stats.has_values else 0.0
    shape = Shape(stats.has_values, stats.has_weight, record_format.index_width(id_bound))
    size = FORMATS[fmt].nbytes(stats.n_rows, stats.nnz, int(share * stats.nnz), shape,
                               stats.lz4_ratio)  # fmt: skip
    return int(size)


def batch_peak_nbytes(stats: DataStats, piece_rows: int, batch_rows: int = BATCH_ROWS) -> int:
    """What one first-pass reader holds at its peak: ~5x a decoded batch and a carried piece
    (``snapfit.stream.decode``)."""
    density = max((z / max(1, r) for r, z in stats.groups), default=0.0)
    rows = min(batch_rows, max(stats.rg_rows, default=0)) + int(piece_rows)
    return 5 * int(record_nbytes(rows, int(density * rows) + 1, *stats.flags))


@dataclass(frozen=True)
class StreamPlan:
    """What a Parquet fit does with its data, fixed before the first read.

    ``resident``: the whole data in memory (``ResidentSource``; the other fields but the
    budget are then unused). ``flags``: ``(has_values, has_weight)`` of the chunks;
    ``rg_stored``: stored bytes per row group (the first pass's rate). Else ``mode``
    ("cache" or "parquet"), ``cache_format``, ``cache_bytes`` (estimated), ``chunk_rows``,
    ``piece_rows``, ``per_chunk`` (pieces per chunk), ``n_chunks``, ``split`` (the budget's
    split from the estimated largest chunk; the source re-splits it with the measured one
    after the first pass: ``resplit``), ``ingest`` (bytes per first-pass reader),
    ``n_readers``, ``window_min`` (decoded row groups a Parquet epoch keeps), ``id_bound``
    (the stored ids are below it) and ``note`` (why the cache was given up, for a log line).
    """

    resident: bool
    budget: int
    n_units: int
    n_features: int
    rg_rows: tuple[int, ...] = ()
    flags: tuple[bool, bool] = (False, False)
    rg_stored: tuple[int, ...] = ()
    mode: str | None = None
    cache_format: str | None = None
    cache_bytes: int | None = None
    chunk_rows: int = 0
    piece_rows: int = 0
    per_chunk: int = 1
    n_chunks: int = 0
    split: BudgetPlan | None = None
    ingest: int = 0
    n_readers: int = 1
    window_min: int = 0
    id_bound: int = 0
    note: str = ""
    width: int = 1

    def pieces(self) -> Pieces:
        return make_pieces(self.rg_rows, self.piece_rows)

    def resplit(self, max_chunk_bytes: int) -> BudgetPlan:
        """The same budget split with the largest chunk measured by the first pass."""
        return plan_budget(self.budget, n_features=self.n_features, n_jobs=self.n_units,
                           n_rows=sum(self.rg_rows), max_chunk_bytes=max_chunk_bytes,
                           ingest_bytes=self.ingest, resident_min=self.window_min,
                           width=self.width)  # fmt: skip

    def describe(self) -> str:
        if self.resident:
            return f"resident: all rows in memory within {size(self.budget)}"
        where = "Parquet decoded every epoch" if self.mode == "parquet" else (
            f"a {self.cache_format} cache of ~{size(self.cache_bytes or 0)}")  # fmt: skip
        return (
            f"streamed from {where}: {self.n_chunks} chunks of ~{self.chunk_rows} rows in "
            f"pieces of {self.piece_rows}, {self.n_readers} first-pass reader(s); "
            f"{self.split.describe()}"
        )


def plan_stream(stats: DataStats, *, budget: int, n_units: int, chunk_rows: int | None = None,
                piece_rows: int | None = None, mode: str = "auto", cache_format: str = "auto",
                disk_free: int = 0, memory: int = 0, id_bound: int | None = None,
                n_readers: int = 2, allow_resident: bool = True,
                width: int = 1) -> StreamPlan:  # fmt: skip
    """The plan for a fit of ``stats``'s data in ``budget`` bytes by ``n_units`` units.

    ``disk_free``: bytes the cache may take on the temp disk; ``memory``: bytes available now
    (the raw cache is preferred while it fits half of them, so that the page cache holds it);
    ``id_bound``: the stored ids are below it (hot ids of threads sharing ``w`` run past
    ``n_features``); ``allow_resident=False`` streams even data that would fit. Raises
    ``ResourceError`` naming the minimum budget when none fits, and ``ValueError`` for an
    unknown mode or format. ``width``: dual variables per row (K for one-vs-rest over K
    classes), which size the dual state, the buffers and the ``w`` views.
    """
    budget, n_units = int(budget), max(1, int(n_units))
    nf = int(stats.n_features)
    fits = allow_resident and resident_peak_nbytes(stats, n_units, width) <= budget
    if not stats.on_files or fits:
        return StreamPlan(True, budget, n_units, nf, stats.rg_rows, stats.flags, width=width)
    id_bound = int(id_bound or nf)
    user_rows = chunk_rows is not None
    chunk_rows = first_chunk_rows(stats.n_rows, chunk_rows)
    mode, fmt, need, note = _pick_mode(stats, mode, cache_format, disk_free, memory, id_bound)
    rg_bytes = max(record_nbytes(r, z, *stats.flags) for r, z in stats.groups)
    window_min = 2 * rg_bytes if mode == "parquet" else 0
    density = max(z / max(1, r) for r, z in stats.groups)
    plan_args = dict(n_features=nf, n_jobs=n_units, n_rows=stats.n_rows, resident_min=window_min,
                     width=width)  # fmt: skip
    while True:
        rows = piece_rows_for(chunk_rows, piece_rows)
        pieces = make_pieces(stats.rg_rows, rows)
        per_chunk = max(1, round(chunk_rows / max(1, rows)))
        ingest = batch_peak_nbytes(stats, int(pieces.rows.max(initial=0)))
        biggest = int(np.sort(pieces.rows)[-per_chunk:].sum())
        estimate = buffer_nbytes(biggest, int(np.ceil(density * biggest)), *stats.flags, width)
        try:
            split = plan_budget(budget, max_chunk_bytes=estimate, ingest_bytes=ingest,
                                **plan_args)  # fmt: skip
        except ResourceError:
            if user_rows or chunk_rows // 2 < MIN_CHUNK_ROWS:
                raise
            chunk_rows //= 2
            continue
        # Smaller chunks rather than fewer buffers (see ``budget.buffers_wanted``).
        enough = split.n_buffers >= buffers_wanted(n_units)
        if user_rows or enough or chunk_rows // 2 < MIN_BUFFERED_CHUNK_ROWS:
            break
        chunk_rows //= 2
    return StreamPlan(
        False, budget, n_units, nf, stats.rg_rows, stats.flags, stats.rg_stored, mode, fmt,
        need, chunk_rows, rows, per_chunk, -(-len(pieces) // per_chunk), split, ingest,
        int(max(1, min(n_readers, budget // max(1, ingest)))), window_min, id_bound, note,
        width,
    )  # fmt: skip


def _pick_mode(stats: DataStats, mode: str, fmt: str, room: int, memory: int, id_bound: int):
    """``(mode, cache format, cache bytes, note)``. The raw cache is the fastest to read while
    the page cache holds it; once it would not fit half of the memory available, reads come
    from the disk and the compact one (half the bytes) is faster; when that does not fit the
    disk, compact records compressed with lz4 (~1.4x fewer bytes on Criteo-like rows, estimated
    on the sample); when none fits, Parquet is decoded every epoch."""
    if mode not in MODES:
        raise ValueError(
            f"stream mode is {mode!r} (mode= or SNAPFIT_STREAM); use auto, cache or parquet."
        )
    if fmt not in CACHE_FORMATS:
        raise ValueError(
            f"cache format is {fmt!r} (cache_format= or SNAPFIT_CACHE_FORMAT); use auto, "
            "raw, compact or lz4."
        )
    if mode == "parquet":
        return mode, None, None, ""
    auto = fmt == "auto"
    if auto:
        raw = cache_bytes(stats, "raw", id_bound)
        fmt = "raw" if raw <= min(room, memory // 2) else "compact"
    need = cache_bytes(stats, fmt, id_bound)
    if auto and fmt == "compact" and need > room:
        squeezed = cache_bytes(stats, LZ4.name, id_bound)
        if squeezed <= room:
            fmt, need = LZ4.name, squeezed
    if mode == "cache" or need <= room:
        return "cache", fmt, need, ""
    note = (
        f"the chunk cache would need {need / 1e9:.1f} GB but {max(0, room) / 1e9:.1f} GB are "
        "free: decoding Parquet every epoch instead (slower; set SNAPFIT_TMPDIR to a disk with "
        "more room)."
    )
    return "parquet", None, None, note
