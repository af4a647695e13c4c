"""Parquet CSR data layer: schema, validation and the chunk reader."""

from snapfit.data.chunk import Chunk
from snapfit.data.memory import ArrayDataset
from snapfit.data.reader import ChunkRef, Dataset, resolve_files
from snapfit.data.schema import DEFAULT_ROW_GROUP_ROWS, FORMAT_VERSION
from snapfit.data.validate import check_two_classes
from snapfit.data.writer import ChunkWriter, atomic_output, check_output, write_parquet

__all__ = [
    "ArrayDataset",
    "Chunk",
    "ChunkRef",
    "ChunkWriter",
    "DEFAULT_ROW_GROUP_ROWS",
    "Dataset",
    "FORMAT_VERSION",
    "atomic_output",
    "check_output",
    "check_two_classes",
    "resolve_files",
    "write_parquet",
]
