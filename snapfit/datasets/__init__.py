"""Converters into snapfit Parquet (Criteo TSV, svmlight, numpy/scipy) and data makers."""

from snapfit.data.writer import write_parquet
from snapfit.datasets.convert import FORMATS, convert, convert_parquet, detect_format
from snapfit.datasets.criteo import ConvertReport, convert_criteo
from snapfit.datasets.criteo_like import (
    make_criteo_like,
    make_criteo_like_parquet,
    make_criteo_like_tsv,
)
from snapfit.datasets.svmlight import convert_svmlight

__all__ = [
    "FORMATS",
    "ConvertReport",
    "convert",
    "convert_criteo",
    "convert_parquet",
    "convert_svmlight",
    "detect_format",
    "make_criteo_like",
    "make_criteo_like_parquet",
    "make_criteo_like_tsv",
    "write_parquet",
]
