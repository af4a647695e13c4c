"""The engine: sources of chunks, the node trainer and its units, the epoch loop.

``snapfit.train.train`` is the one entry point that runs it; see that module for the tiers.
"""

from snapfit.engine.loop import FitResult
from snapfit.engine.problem import EpochRecord, Problem
from snapfit.engine.source import ChunkSource, InMemorySource, ResidentSource
from snapfit.engine.trainer import Devices, Trainer

__all__ = [
    "ChunkSource",
    "Devices",
    "EpochRecord",
    "FitResult",
    "InMemorySource",
    "Problem",
    "ResidentSource",
    "Trainer",
]
