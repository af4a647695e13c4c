"""Out-of-core training: a plan made once, a piece cache, a prefetching reader, a memory budget.

``DataStats.read`` and ``plan_stream`` decide (``StreamPlan``); ``StreamSource``, a
``snapfit.engine.ChunkSource``, carries the plan out: the engine runs the same epochs over it as
over in-memory chunks. See ``docs/out-of-core.md`` for the design and its measurements.
"""

from snapfit.stream.budget import (
    BudgetPlan,
    default_memory_budget,
    parse_memory_budget,
    plan_budget,
)
from snapfit.stream.cache import PieceCache, Pieces, make_pieces
from snapfit.stream.formats import FORMATS
from snapfit.stream.plan import StreamPlan, plan_stream
from snapfit.stream.source import StreamSource
from snapfit.stream.stats import DataStats

__all__ = [
    "FORMATS",
    "BudgetPlan",
    "DataStats",
    "PieceCache",
    "Pieces",
    "StreamPlan",
    "StreamSource",
    "default_memory_budget",
    "make_pieces",
    "parse_memory_budget",
    "plan_budget",
    "plan_stream",
]
