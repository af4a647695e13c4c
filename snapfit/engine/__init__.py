"""The epoch loop every unit plugs into: CPU threads today, GPUs and Dask workers through the
same ``ChunkSource`` / ``Trainer`` contracts."""

from snapfit.engine.loop import FitResult, Trainer, fit
from snapfit.engine.problem import EpochRecord, Problem
from snapfit.engine.source import ChunkSource, InMemorySource

__all__ = ["ChunkSource", "EpochRecord", "FitResult", "InMemorySource", "Problem", "Trainer", "fit"]
