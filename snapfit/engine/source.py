"""Where the engine gets chunks from: the ``ChunkSource`` protocol and its in-memory form.

The engine asks a source for chunks by id, in the order it wants them each epoch. An in-memory
source returns resident chunks; a streaming source (``snapfit.stream``) reads ahead into a
bounded buffer pool and keeps the highest-gap chunks resident. Both look the same here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np

from snapfit.data.chunk import Chunk


class ChunkSource(Protocol):
    n_features: int

    @property
    def n_chunks(self) -> int: ...

    def chunk_rows(self, k: int) -> int: ...

    def chunk_nnz(self, k: int) -> int: ...

    def epoch(self, order: Sequence[int]) -> Iterator[tuple[int, Chunk]]:
        """Yield ``(k, chunk)`` for every ``k`` in ``order``, in that order."""
        ...

    def update_gaps(self, gaps: np.ndarray) -> None:
        """Per-chunk duality gaps after an epoch (streaming sources pick residents from them)."""
        ...

    @property
    def io_wait(self) -> float:
        """Seconds the consumer has waited for data so far."""
        ...


class InMemorySource:
    """Chunks already in memory: every chunk is resident, nothing to wait for."""

    def __init__(self, chunks: Sequence[Chunk], n_features: int):
        self.chunks = list(chunks)
        self.n_features = int(n_features)

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

    def update_gaps(self, gaps: np.ndarray) -> None:
        pass

    @property
    def io_wait(self) -> float:
        return 0.0
