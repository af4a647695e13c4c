"""Converters into snapfit Parquet (Criteo TSV, svmlight, tables of named columns, numpy/scipy)
and data makers."""

from snapfit.data.writer import write_parquet
from snapfit.datasets.convert import FORMATS, convert, convert_parquet, detect_format
from snapfit.datasets.criteo import ConvertReport, convert_criteo
from snapfit.datasets.criteo_like import (
    make_criteo_like,
    make_criteo_like_parquet,
    make_criteo_like_tsv,
)
from snapfit.datasets.keyhash import key_index
from snapfit.datasets.svmlight import convert_svmlight
from snapfit.datasets.tabular import convert_table

__all__ = [
    "FORMATS",
    "ConvertReport",
    "convert",
    "convert_criteo",
    "convert_parquet",
    "convert_svmlight",
    "convert_table",
    "detect_format",
    "key_index",
    "make_criteo_like",
    "make_criteo_like_parquet",
    "make_criteo_like_tsv",
    "write_parquet",
]
