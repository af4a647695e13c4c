"""Where the engine gets chunks from: the ``ChunkSource`` base class and its in-memory forms.

The engine asks a source for chunks by id, in the order it wants them each epoch. Every source
is a subclass of ``ChunkSource``; what a source may do differently is stated by the base class,
with a default that fits a source of fixed chunks:

- ``begin_epoch(order)`` fixes the epoch's chunks before any is planned. A re-dealing source
  (``snapfit.stream.StreamSource``) deals its pieces into new chunks here, so ``chunk_rows`` and
  ``layout`` describe exactly the chunks ``epoch(order)`` will deliver.
- ``layout(k)`` names the *pieces* of chunk ``k``: the stable units of rows that residency (host
  or device, DuHL) and dual variables are keyed by. A fixed chunk is one piece whose id is ``k``.
- ``make_state()`` gives the dual state keyed by row (through the pieces), so every trainer, on
  any device, pairs each row with its own ``alpha`` whatever the chunking.
- ``release(k)``, ``update_gaps``, ``io_wait``, ``fingerprint`` and ``close`` have no-op or
  fixed-chunk defaults.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from snapfit.data.chunk import Chunk, concat_chunks, split_rows
from snapfit.data.fingerprint import arrays_fingerprint, dataset_fingerprint
from snapfit.engine.state import DualState
from snapfit.solvers import cpu


class Layout(NamedTuple):
    """The pieces of one chunk, in the chunk's row order, with their rows and nnz."""

    pieces: np.ndarray  # int64 piece ids
    rows: np.ndarray  # int64 rows per piece
    nnz: np.ndarray  # int64 stored values per piece


class ChunkSource(ABC):
    """Chunks by id for the engine's epochs (see the module docstring for the contract)."""

    n_features: int
    #: True when the chunks live in device memory (CuPy input): only GPU units can read them.
    device_resident: bool = False
    #: True when chunk ``k`` holds other rows every epoch (pieces re-dealt): a device may keep
    #: pieces, but never a chunk's ``alpha``, across epochs.
    redeals: bool = False
    #: True when ``epoch`` yields the same chunk objects every time (in memory): what a unit
    #: derives from a chunk (the hot block's relabeled ids) may be kept by chunk id.
    stable_chunks: bool = False

    @property
    @abstractmethod
    def n_chunks(self) -> int: ...

    @abstractmethod
    def chunk_rows(self, k: int) -> int:
        """Rows of chunk ``k`` in the current epoch's chunking."""

    @abstractmethod
    def chunk_nnz(self, k: int) -> int: ...

    @abstractmethod
    def epoch(self, order: Sequence[int]) -> Iterator[tuple[int, Chunk]]:
        """Yield ``(k, chunk)`` for every ``k`` in ``order``, in that order."""

    def begin_epoch(self, order: Sequence[int]) -> None:  # noqa: B027 - a no-op unless overridden
        """Fix the chunks of the epoch that will deliver ``order`` (fixed chunks: nothing)."""

    # -- pieces: what residency and dual variables are keyed by ---------------------------
    @property
    def n_pieces(self) -> int:
        return self.n_chunks

    def piece_sizes(self) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, nnz)`` of every piece, by piece id."""
        n = self.n_chunks
        rows = np.array([self.chunk_rows(k) for k in range(n)], dtype=np.int64)
        return rows, np.array([self.chunk_nnz(k) for k in range(n)], dtype=np.int64)

    def flags(self) -> tuple[bool, bool]:
        """``(has_values, has_weight)`` of the chunks (sizes data on a device; the default
        assumes both)."""
        return True, True

    def max_chunk_shape(self) -> tuple[int, int]:
        """``(rows, nnz)`` no chunk of any epoch exceeds (what a streaming slot must hold)."""
        n = range(self.n_chunks)
        return max((self.chunk_rows(k) for k in n), default=0), max(
            (self.chunk_nnz(k) for k in n), default=0
        )

    def layout(self, k: int) -> Layout:
        """The pieces of chunk ``k`` in this epoch (a fixed chunk is the one piece ``k``)."""
        one = np.array([k], dtype=np.int64)
        return Layout(one, np.array([self.chunk_rows(k)]), np.array([self.chunk_nnz(k)]))

    def piece_gaps(self, chunk_gaps: np.ndarray) -> np.ndarray:
        """Per-piece duality gaps from this epoch's per-chunk gaps (spread by rows)."""
        return np.asarray(chunk_gaps, dtype=np.float64)

    # -- life of a fit ---------------------------------------------------------------------
    def make_state(self, width: int = 1) -> DualState:
        """The fit's dual state: ``alpha`` (``width`` per row) and row norms of every row,
        laid out by piece."""
        return DualState([self.chunk_rows(k) for k in range(self.n_chunks)], width=width)

    def release(self, k: int) -> None:  # noqa: B027 - a no-op unless overridden
        """Chunk ``k`` is done for this epoch (a streaming source may refill its buffer)."""

    def update_gaps(self, gaps: np.ndarray) -> None:  # noqa: B027 - a no-op unless overridden
        """Per-chunk duality gaps after an epoch (streaming sources pick residents from them)."""

    @property
    def io_wait(self) -> float:
        """Seconds the consumer has waited for data so far."""
        return 0.0

    def fingerprint(self) -> dict:
        """The layout a checkpoint's alpha is stored in (part of the checkpoint fingerprint)."""
        return {"kind": "memory", "chunk_rows": [self.chunk_rows(k) for k in range(self.n_chunks)]}

    @abstractmethod
    def data_fingerprint(self) -> dict:
        """What names the data in a checkpoint: the files and their sizes, or a hash of the
        arrays (one pass over them)."""

    def hot_set(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The hot features of threads sharing ``w`` (ids and sync tiers, as
        ``shared.choose_hot``) when the source chose them itself, from a sample of its rows
        (its stored chunks may then carry their relabeling already); ``None``: the trainer
        counts them."""
        return None

    def relabel(self, code: np.ndarray | None, n_threads: int = 1) -> None:
        """From now on deliver chunks whose feature ids ``j < len(code)`` read ``code[j]``
        (``cpu.relabel``: threads sharing ``w`` run in their own feature order, see
        ``snapfit.engine.shared``); ``None``: the stored ids again. Never changes the caller's
        data; work done now may use ``n_threads`` threads."""
        raise NotImplementedError(f"{type(self).__name__} cannot relabel feature ids")

    def close(self) -> None:  # noqa: B027 - a no-op unless overridden
        """Free what the source holds (buffers, caches, temp files)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class InMemorySource(ChunkSource):
    """Chunks already in memory: every chunk is resident, nothing to wait for."""

    stable_chunks = True

    def __init__(self, chunks: Sequence[Chunk], n_features: int):
        self.chunks = list(chunks)
        self.n_features = int(n_features)
        self._stored: list[Chunk] | None = None  # the chunks as given, while relabeled

    def relabel(self, code: np.ndarray | None, n_threads: int = 1) -> None:
        """Relabeled copies of the indices (4 bytes per stored value; the chunks may be views
        of the caller's arrays, which are never written), made by ``n_threads`` threads (a
        4M-row chunk is cut into pieces for them); ``None`` gives the chunks back.

        The copies are plain numpy arrays, which Linux backs with 2 MB pages where it can: the
        kernel visits rows in random order, one new 4 KB page per row, and on a copy mapped in
        4 KB pages (``MAP_POPULATE``, tried) a pass of two threads over 4M Criteo-40 rows took
        ~10 % longer (paired ratio 1.12, quartiles 1.04-1.16, 40 interleaved passes). The huge
        pages cost at allocation instead: on the 2-core benchmark machine (a VM) a process's
        first 624 MB of them took ~1.3 s to fault in (fresh memory; 0.1-0.2 s when reused), 4 KB
        pages 0.2-0.3 s; so a fit pays ~1 s once and gains ~0.1 s per epoch."""
        if self.device_resident:
            raise NotImplementedError("chunks on a device are not relabeled")
        if self._stored is None:
            self._stored = self.chunks
        if code is None:
            self.chunks, self._stored = self._stored, None
            return
        copies = [np.empty(c.nnz, dtype=np.int32) for c in self._stored]
        jobs = []
        for c, out in zip(self._stored, copies, strict=True):
            ids = c.indices[: c.nnz]
            step = max(1 << 20, -(-len(ids) // max(1, n_threads)))
            jobs += [(ids[lo : lo + step], out[lo : lo + step]) for lo in range(0, len(ids), step)]
        if n_threads > 1 and len(jobs) > 1:
            with ThreadPoolExecutor(n_threads) as pool:  # the kernel releases the GIL
                list(pool.map(lambda job: cpu.relabel(job[0], code, job[1]), jobs))
        else:
            for ids, out in jobs:
                cpu.relabel(ids, code, out)
        self.chunks = [c._replace(indices=out) for c, out in zip(self._stored, copies, strict=True)]

    @property
    def n_chunks(self) -> int:
        return len(self.chunks)

    def chunk_rows(self, k: int) -> int:
        return self.chunks[k].n_rows

    def chunk_nnz(self, k: int) -> int:
        return self.chunks[k].nnz

    def epoch(self, order: Sequence[int]) -> Iterator[tuple[int, Chunk]]:
        for k in order:
            yield k, self.chunks[k]

    def flags(self) -> tuple[bool, bool]:
        return (any(c.values is not None for c in self.chunks),
                any(c.weight is not None for c in self.chunks))  # fmt: skip

    def data_fingerprint(self) -> dict:
        return arrays_fingerprint(self.chunks)


class ResidentSource(InMemorySource):
    """A whole dataset (Parquet or arrays) read once and kept in memory as ONE chunk.

    One chunk because the visiting order matters: rows shuffled across the whole data set
    converged in 31 epochs where the same rows visited row group by row group needed 162 (3000
    Criteo-like rows, 3 row groups). The out-of-core path (``snapfit.stream``) is used instead
    when the data must not all be resident. ``chunk_rows`` cuts the rows into chunks of that
    many (views, no copy): what a GPU whose memory cannot hold the whole set copies in turn.
    """

    def __init__(self, dataset, chunk_rows: int | None = None):
        self.dataset = dataset
        whole = concat_chunks(list(dataset.iter_chunks()))
        super().__init__(split_rows(whole, chunk_rows), dataset.n_features)

    def data_fingerprint(self) -> dict:
        return dataset_fingerprint(self.dataset)
