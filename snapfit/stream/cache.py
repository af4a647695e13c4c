"""The epoch format: row groups decoded once into one raw CSR cache file, re-read by ``preadv``.

Why a cache: decoding Parquet ``list<int32>`` + ``list<float32>`` runs at about the solver's own
rate on one core (93-136M nnz/s here), so re-decoding every epoch cannot be hidden on 2 cores.
The first pass decodes each row group once (reader threads in parallel) and writes its rows as
raw little-endian arrays; later epochs read them back with one ``preadv`` per piece straight into
a reusable buffer: no decoding, no allocation, the GIL released (like Vowpal Wabbit's cache).

Why pieces: the engine needs chunks whose rows change from epoch to epoch. Visiting a FIXED
grouping of rows (the same 2048 rows together every epoch, rows shuffled inside) reached a
relative gap of ~5e-3 after 30 epochs on 20k Criteo-like rows, where groups re-dealt every
epoch from 512-row pieces reached ~1e-6, as a full shuffle does; this held with the rows
randomly permuted beforehand too, so it is the fixed grouping, not locality in the file. So
each row group is cut into small pieces, and ``snapfit.stream.source`` deals the pieces into new
chunks every epoch; each piece record also carries its rows' squared norms (computed once here)
so a chunk's norms arrive with its data.

One file per fit, in ``SNAPFIT_TMPDIR`` or the system temp dir, deleted on close. The file
holds *compact* records (``snapfit.stream.record``: narrow lengths and indices, only the values
that are not 1.0, int8 labels; ~185 bytes for a Criteo-like row of 40 entries), read back with
one ``preadv`` and expanded into the chunk buffer. When even that would not fit the free space,
``snapfit.stream.direct`` decodes Parquet every epoch instead, into raw records in memory::

    indptr[1:] int64 (n) | indices int32 (nnz) | values f32 (nnz, if any) | y f32 (n)
    | weight f32 (n, if any) | sqnorm f32 (n)
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass

import numpy as np

from snapfit import progress
from snapfit.data.fileio import preadv_all, pwrite_all
from snapfit.engine.state import temp_prefix
from snapfit.errors import ResourceError
from snapfit.solvers import cpu
from snapfit.stream import record as record_format
from snapfit.stream.decode import PieceDecoder, run_readers, where
from snapfit.stream.formats import COMPACT, Shape

log = logging.getLogger("snapfit")


@dataclass(frozen=True)
class Pieces:
    """Piece ``p`` is rows ``[lo[p], hi[p])`` of row group ``rg[p]``."""

    rg: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    @property
    def rows(self) -> np.ndarray:
        return self.hi - self.lo

    def __len__(self) -> int:
        return len(self.rg)


def make_pieces(rg_rows, piece_rows: int) -> Pieces:
    """Cut every row group into near-equal pieces of about ``piece_rows`` rows."""
    rg, lo, hi = [], [], []
    for g, n in enumerate(rg_rows):
        m = max(1, round(n / max(1, piece_rows)))
        cuts = [n * i // m for i in range(m + 1)]
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            if b > a:
                rg.append(g)
                lo.append(a)
                hi.append(b)
    return Pieces(np.array(rg, np.int64), np.array(lo, np.int64), np.array(hi, np.int64))


def sweep_stale(directory: str) -> int:
    """Remove the temp directories of snapfit fits on this host whose process is gone.

    A fit deletes its cache and spilled arrays when it ends, but a killed one (SIGKILL, OOM,
    power) cannot: its cache (up to ~60 GB at 200M rows) would stay and push the next fit, often
    the resume of the killed one, off the cache. Directories are named by host and process id
    (``engine.state.temp_prefix``); only those of this host whose process no longer exists are
    removed. Returns the bytes freed.
    """
    host = temp_prefix("x").split("-")[2]
    pattern = re.compile(rf"^snapfit-(cache|dual)-{re.escape(host)}-(\d+)-[A-Za-z0-9_]+$")
    freed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        m = pattern.match(name)
        if m is None or _alive(int(m.group(2))):
            continue
        path = os.path.join(directory, name)
        for root, _, files in os.walk(path):
            for f in files:
                try:
                    freed += os.stat(os.path.join(root, f)).st_blocks * 512
                except OSError:
                    pass
        shutil.rmtree(path, ignore_errors=True)
    return freed


def free_room(directory: str, margin: float = 0.05) -> int:
    """Bytes a cache may take in ``directory``: its free space less ``margin`` of the disk (other
    files, the spilled duals), after removing what killed fits left (``sweep_stale``)."""
    freed = sweep_stale(directory)
    if freed:
        log.warning("removed %.1f GB left in %s by killed snapfit fits", freed / 1e9, directory)
    usage = shutil.disk_usage(directory)
    return int(usage.free - margin * usage.total)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. another user's process
        return True
    return True


class PieceStore:
    """Where the pieces' records come from; the base keeps what both kinds share.

    Parameters
    ----------
    dataset : snapfit.data.Dataset
    pieces : Pieces
    directory : str
        Where the store's files are created (a private directory removed on close).
    flags : (bool, bool)
        Whether records carry values / weights (``DataStats.flags``).
    stored : sequence of int, optional
        Stored bytes of every row group (``DataStats.rg_stored``), for the first pass's rate.
    """

    def __init__(self, dataset, pieces: Pieces, directory: str, flags: tuple[bool, bool],
                 stored=()):  # fmt: skip
        self.dataset = dataset
        self.pieces = pieces
        self.n_features = int(dataset.n_features)
        self.has_values, self.has_weight = flags
        self._stored = list(stored) or [0] * len(dataset.chunks)
        self.decoder = PieceDecoder(dataset, pieces, self.has_values, self.has_weight)
        self.piece_nnz = np.zeros(len(pieces), np.int64)
        self._dir = tempfile.mkdtemp(prefix=temp_prefix("cache"), dir=directory)
        self.ingest_seconds = 0.0

    def record_nbytes(self, p) -> np.ndarray | int:
        """Bytes of piece record(s) ``p`` (in the file, and when kept in memory)."""
        return self.decoder.record_nbytes(self.pieces.rows[p], self.piece_nnz[p])

    def where(self, ps) -> str:
        """Where pieces ``ps`` come from, for error messages."""
        return where(self.dataset, self.pieces, ps)

    def ingest(self, n_readers: int = 2) -> None:
        """First pass: decode every row group once (``n_readers`` threads). Its bar shows the
        rows read, their rate and the time left, and the MB of Parquet (as stored) read per
        second."""
        t0 = time.perf_counter()
        rg_bytes = self._stored
        lock = threading.Lock()
        done = [0]
        with progress.bar("first pass", total=self.dataset.n_rows) as bar:

            def one(g: int) -> None:
                self._ingest_row_group(g)
                with lock:
                    done[0] += rg_bytes[g]
                    rate = done[0] / max(1e-9, time.perf_counter() - t0)
                    bar.set_postfix_str(f"{rate / 1e6:.0f} MB/s", refresh=False)
                    bar.update(self.dataset.chunks[g].n_rows)

            run_readers(sorted(self.decoder.by_rg), one, n_readers, "snapfit-ingest")
        self.ingest_seconds = time.perf_counter() - t0

    def _ingest_row_group(self, g: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)


class PieceCache(PieceStore):
    """Decoded pieces as compact records in one file; build with :meth:`ingest`, then
    :meth:`fill` chunk buffers from it.

    ``code``: store every piece's ids relabeled by it (``cpu.relabel``; the ids of threads
    sharing ``w``, ``snapfit.engine.shared``), so that epochs need not relabel them; at 200M
    Criteo-like rows that is 6.7e9 ids (~8 s of a core) per epoch, against once here.
    ``id_bound``: the stored ids are below it (default ``n_features``). ``fmt``: how records
    are encoded (``snapfit.stream.formats``: the store itself only keeps bytes and offsets).
    ``need``: the cache's estimated bytes (``snapfit.stream.plan.cache_bytes``), checked
    against the free space before the first pass.
    """

    def __init__(self, dataset, pieces: Pieces, directory: str, flags: tuple[bool, bool], *,
                 fmt=COMPACT, code: np.ndarray | None = None, id_bound: int | None = None,
                 need: int = 0, stored=()):  # fmt: skip
        super().__init__(dataset, pieces, directory, flags, stored)
        self.need = need
        self.format = fmt
        self.piece_plain = np.zeros(len(pieces), np.int64)  # a record's bytes expanded
        self.code = code
        self.id_bound = int(id_bound or self.n_features)
        if code is not None and len(code) and int(code.max()) >= self.id_bound:
            raise ValueError(f"relabeled ids reach {int(code.max())}; id_bound={self.id_bound}")
        self.piece_off = np.zeros(len(pieces), np.int64)
        self.piece_bytes = np.zeros(len(pieces), np.int64)
        self.shape = Shape(*flags, record_format.index_width(self.id_bound))
        self.path = os.path.join(self._dir, "pieces.bin")
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        self._end = 0
        self._lock = threading.Lock()
        self._scratch = threading.local()

    def record_nbytes(self, p) -> np.ndarray | int:
        """Bytes of stored record(s) ``p`` (known once the first pass wrote them)."""
        return self.piece_bytes[p]

    @property
    def bytes_per_row(self) -> float:
        """The cache file's bytes per row (after the first pass)."""
        return self._end / max(1, int(self.pieces.rows.sum()))

    def check_space(self) -> None:
        need = self.need
        free = shutil.disk_usage(self._dir).free
        if need > free:
            raise ResourceError(
                f"the chunk cache needs {need / 1e9:.2f} GB in {self._dir} but only "
                f"{free / 1e9:.2f} GB are free; set SNAPFIT_TMPDIR to a disk with more space."
            )

    def ingest(self, n_readers: int = 2) -> None:
        self.check_space()
        super().ingest(n_readers)

    def _ingest_row_group(self, g: int) -> None:
        def emit(p, parts):
            nnz = len(parts[1])
            if self.code is not None:  # parts are views of the decoded batch: relabel a copy
                ids = np.empty(nnz, np.int32)
                cpu.relabel(parts[1], self.code, ids)
                parts = [parts[0], ids, *parts[2:]]
            parts, self.piece_plain[p] = self.format.encode(parts, self.shape)
            size = sum(x.nbytes for x in parts)
            with self._lock:
                off = self._end
                self._end += size
            self.piece_nnz[p], self.piece_off[p], self.piece_bytes[p] = nnz, off, size
            self._write(parts, off, g)

        self.decoder.decode(g, emit)

    def _write(self, parts, off: int, g: int) -> None:
        ref = self.dataset.chunks[g]

        def fail(e: OSError) -> str:
            return (
                f"{ref.file}, row group {ref.row_group}: cannot write the chunk cache "
                f"{self.path} ({e.strerror}); free disk space or set SNAPFIT_TMPDIR."
            )

        for x in parts:
            pwrite_all(self._fd, x, off, fail)
            off += x.nbytes

    # -- later epochs ----------------------------------------------------------------------
    def read_record(self, p: int) -> np.ndarray:
        """Piece ``p``'s record as fresh bytes (to keep it resident)."""
        buf = np.empty(int(self.record_nbytes(p)), np.uint8)
        self._readv([buf], int(self.piece_off[p]), [p])
        return buf

    def fill(self, targets: list[np.ndarray], p: int, record: np.ndarray | None = None) -> None:
        """Expand piece ``p`` into ``targets`` (its arrays' places in a chunk buffer), from its
        resident ``record`` or else read from the file with one ``preadv``: straight into the
        targets when the format stores them as they are, else into this thread's scratch."""
        size = int(self.piece_bytes[p])
        if record is None and self.format.direct:
            self._readv(targets, int(self.piece_off[p]), [p])
            return
        if record is None:
            scratch = getattr(self._scratch, "buf", None)
            if scratch is None or len(scratch) < size:
                scratch = self._scratch.buf = np.empty(int(self.piece_bytes.max()), np.uint8)
            record = scratch[:size]
            self._readv([record], int(self.piece_off[p]), [p])
        n, nnz = int(self.pieces.rows[p]), int(self.piece_nnz[p])
        self.format.expand(record, n, nnz, targets, self.shape, int(self.piece_plain[p]))

    def _readv(self, arrays, off: int, ps) -> None:
        def fail(e: OSError | None) -> str:
            if e is None:  # regular files return short reads only at EOF: the cache was cut
                return (
                    f"chunk cache {self.path}: rows of {self.where(ps)} are truncated; was the "
                    "file deleted or the disk full? Refit."
                )
            return (
                f"chunk cache {self.path}: reading rows of {self.where(ps)} failed "
                f"({e.strerror}); the temp disk may be full or failing, set SNAPFIT_TMPDIR."
            )

        preadv_all(self._fd, arrays, off, fail)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        super().close()
