"""Pieces decoded from Parquet every epoch, for when the raw cache would not fit the temp disk.

Even the compact cache holds ~150 bytes per Criteo-like row (``snapfit.stream.record``), 30 GB
for 200M rows next to their ~24 GB of Parquet. When the temp dir has not that much free
(``shutil.disk_usage``), ``StreamSource`` uses this store instead: the first pass
decodes every row group once to learn each piece's nnz and to store its rows' norms (4
bytes/row, in a file), and every epoch a decoder thread decodes the row groups again, batch by
batch, into piece records in memory (the same bytes the cache would hold).

Re-dealing pieces into chunks needs their row groups decoded at the same time, so an epoch's deal
is windowed: the row groups get a random rank, each piece the key ``rank + window * u`` (``u``
uniform in [0, 1)), and chunk ``i`` of the engine's order takes the ``i``-th run of pieces in key
order. A chunk then mixes pieces from about ``window`` row groups that are consecutive in this
epoch's random order, and the decoder must hold about ``window / 2 + 2`` row groups' records at a
time; the window is sized from the resident share of the budget. Decoding is serial in one
thread (pyarrow releases the GIL), ahead of the reader thread that assembles chunks.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np

from snapfit.engine.state import DiskArray
from snapfit.errors import ResourceError
from snapfit.stream.cache import Pieces, PieceStore
from snapfit.stream.formats import copy_into

_POLL = 0.05


class _Stopped(Exception):
    """The epoch ended while a piece was awaited (the consumer has gone)."""


class ParquetPieces(PieceStore):
    """Piece records decoded from Parquet each epoch; see the module docstring."""

    def __init__(self, dataset, pieces: Pieces, directory: str, flags: tuple[bool, bool],
                 stored=()):  # fmt: skip
        super().__init__(dataset, pieces, directory, flags, stored)
        self.row_off = np.zeros(len(pieces) + 1, np.int64)
        np.cumsum(pieces.rows, out=self.row_off[1:])
        self.norms = DiskArray(os.path.join(self._dir, "sqnorm.f32"), self.row_off[-1], np.float32)
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._records: dict[int, tuple] = {}
        self._slab: np.ndarray | None = None
        self._free: list[int] = []
        self.pending = 0  # bytes of records decoded and not yet taken
        self.peak_pending = 0
        self.decode_seconds = 0.0

    def slot_nbytes(self) -> int:
        """Bytes of one record slot: the largest piece record."""
        return int(np.max(self.record_nbytes(np.arange(len(self.pieces))), initial=1))

    def window_rgs(self, cap: int) -> float:
        """How many of the largest row groups ``cap`` bytes of slots hold."""
        most = int(np.bincount(self.pieces.rg).max(initial=1))
        return (int(cap) // self.slot_nbytes()) / most

    def rg_record_nbytes(self) -> np.ndarray:
        """Record bytes of every row group, from the file metadata."""
        refs = self.dataset.chunks
        return np.array(
            [self.decoder.record_nbytes(r.n_rows, r.nnz) for r in refs], dtype=np.int64
        ).reshape(len(refs))

    def _ingest_row_group(self, g: int) -> None:
        def emit(p, parts):
            self.piece_nnz[p] = len(parts[1])
            self.norms.write(int(self.row_off[p]), parts[-1])

        self.decoder.decode(g, emit)

    def _norms_of(self, p: int) -> np.ndarray:
        return self.norms[int(self.row_off[p]) : int(self.row_off[p + 1])]

    # -- an epoch --------------------------------------------------------------------------
    def begin(self, rg_order, cap: int) -> None:
        """Start decoding the row groups in ``rg_order`` into at most ``cap`` bytes of slots.

        Records go to fixed slots of one slab allocated once (the largest record each), so the
        window's memory is that slab, touched as used: no allocator churn or fragmentation from
        ~1 MB records allocated in one thread and freed in another. Only when the reader waits
        for a row group the slots cannot hold yet does the decoder allocate beyond them.
        """
        self.end()
        self._order = [int(g) for g in rg_order]
        self._rank = np.empty(len(self._order), np.int64)
        self._rank[self._order] = np.arange(len(self._order))
        slot = self.slot_nbytes()
        n_slots = max(1, int(cap) // slot)
        if self._slab is None or self._slab.shape != (n_slots, slot):
            self._slab = None
            self._slab = np.empty((n_slots, slot), np.uint8)
        self._free = list(range(n_slots - 1, -1, -1))
        self._n_pieces = np.bincount(self.pieces.rg, minlength=len(self._order))
        self._records = {}
        self.pending = 0
        self._need = -1  # rank the reader waits for (the decoder may exceed cap to reach it)
        self._stop = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="snapfit-decoder", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for i, g in enumerate(self._order):
                with self._cond:
                    while (
                        not self._stop
                        and self._need < i
                        and self.pending > 0
                        and len(self._free) < self._n_pieces[g]
                    ):
                        self._cond.wait(_POLL)
                    if self._stop:
                        return
                t0 = time.perf_counter()
                self.decoder.decode(g, self._keep, norms=self._norms_of)
                self.decode_seconds += time.perf_counter() - t0
        except BaseException as e:  # noqa: BLE001 - raised in the reader by take()
            with self._cond:
                self._error = e
                self._cond.notify_all()

    def _keep(self, p: int, parts) -> None:
        size = sum(x.nbytes for x in parts)
        with self._cond:
            slot = self._free.pop() if self._free else None
        record = self._slab[slot, :size] if slot is not None else np.empty(size, np.uint8)
        pos = 0
        for x in parts:
            record[pos : pos + x.nbytes] = x.view(np.uint8)
            pos += x.nbytes
        with self._cond:
            if self._stop:
                raise _Stopped()
            self._records[p] = (record, slot)
            self.pending += size
            self.peak_pending = max(self.peak_pending, self.pending)
            self._cond.notify_all()

    def _take(self, p: int):
        """Piece ``p``'s record and slot, waiting for the decoder."""
        with self._cond:
            while p not in self._records:
                if self._error is not None:
                    if isinstance(self._error, _Stopped):
                        raise _Stopped()
                    raise self._error
                if self._stop:
                    raise _Stopped()
                if self._thread is None or not self._thread.is_alive():
                    raise ResourceError(
                        f"the Parquet decoder stopped before delivering {self.where([p])}; "
                        "this is a bug, please report it."
                    )
                self._need = max(self._need, int(self._rank[self.pieces.rg[p]]))
                self._cond.notify_all()
                self._cond.wait(_POLL)
            return self._records.pop(p)

    def fill(self, targets: list[np.ndarray], p: int, record=None) -> None:
        """Copy piece ``p`` into ``targets``, then hand its slot back to the decoder."""
        if record is not None:
            copy_into(targets, record)
            return
        record, slot = self._take(p)
        copy_into(targets, record)
        with self._cond:
            if slot is not None:
                self._free.append(slot)
            self.pending -= len(record)
            self._cond.notify_all()

    def abort(self) -> None:
        """Make waits return (the epoch is being stopped)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()

    def end(self) -> None:
        """Stop the decoder and drop what it decoded."""
        if self._thread is not None:
            self.abort()
            self._thread.join(30)
            self._thread = None
        self._records = {}
        self.pending = 0

    def close(self) -> None:
        self.end()
        self._slab = None
        self.norms.close()
        super().close()
