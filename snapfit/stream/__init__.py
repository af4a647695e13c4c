"""Out-of-core training: a raw chunk cache, a prefetching reader and a memory budget.

``StreamSource`` is a ``snapfit.engine.ChunkSource``: the engine runs the same epochs over it as
over in-memory chunks. See ``docs/out-of-core.md`` for the design and its measurements.
"""

from snapfit.stream.budget import (
    BudgetPlan,
    default_memory_budget,
    parse_memory_budget,
    plan_budget,
)
from snapfit.stream.cache import PieceCache, Pieces, make_pieces
from snapfit.stream.source import StreamSource

__all__ = [
    "BudgetPlan",
    "PieceCache",
    "Pieces",
    "StreamSource",
    "default_memory_budget",
    "make_pieces",
    "parse_memory_budget",
    "plan_budget",
]
