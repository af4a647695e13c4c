"""Parquet CSR data layer: schema, validation and the chunk reader."""

from snapfit.data.chunk import Chunk

__all__ = ["Chunk"]
