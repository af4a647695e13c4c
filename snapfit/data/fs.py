"""Local paths and URLs (``s3://``, ``gs://``, ``hdfs://``, ``file://``, any fsspec protocol).

Click logs live in object stores. Every reader of snapfit (Parquet datasets, Criteo TSV and
svmlight for ``convert``) opens its inputs through here, so a URL works wherever a path does;
outputs, the raw cache and spilled arrays stay local. A URL is kept as a string from end to end
(a Dataset's files, what Dask workers receive) and resolved to a filesystem where it is opened:
pyarrow's own filesystems for the schemes it has natively (``FileSystem.from_uri``: S3, GCS,
HDFS, local), otherwise fsspec's (``memory://``, ``abfs://``, ``http://``... when the fsspec
backend is installed) behind ``pyarrow.fs.PyFileSystem``.
"""

from __future__ import annotations

import fnmatch
import functools
import glob
import os

import pyarrow as pa
import pyarrow.fs as pafs

from snapfit.errors import DataError


def is_url(path) -> bool:
    return isinstance(path, str) and "://" in path


@functools.lru_cache(maxsize=64)
def _filesystem(root: str) -> pafs.FileSystem:
    try:
        fs, _ = pafs.FileSystem.from_uri(root)
        return fs
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        pass
    try:
        import fsspec

        fs, _ = fsspec.core.url_to_fs(root)
    except (ImportError, ValueError) as e:
        raise DataError(
            f"{root}: no filesystem for this URL ({e}); install its fsspec backend."
        ) from None
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs))


def resolve(url: str) -> tuple[pafs.FileSystem, str]:
    """``(filesystem, path inside it)`` of a URL (one filesystem per scheme and host)."""
    scheme, rest = url.split("://", 1)
    host = rest.split("/", 1)[0]
    if scheme == "file":
        return pafs.LocalFileSystem(), rest
    fs = _filesystem(f"{scheme}://{host}")
    if isinstance(fs, pafs.PyFileSystem):
        import fsspec

        return fs, fsspec.core.url_to_fs(url)[1]
    return fs, pafs.FileSystem.from_uri(url)[1]


def _child(url: str, base: str, path: str) -> str:
    """The URL of ``path`` (a filesystem path under ``base``, the path of ``url``)."""
    return url.rstrip("/") + "/" + path[len(base.rstrip("/")) :].lstrip("/")


def list_files(url: str, suffix: str = ".parquet") -> list[str]:
    """URLs a dataset URL names: the file itself, a directory's ``*suffix`` files (not hidden,
    sorted), or the matches of a glob (``*``, ``?``, ``[``) in its last components."""
    fs, path = resolve(url)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.File:
        return [url]
    if info.type == pafs.FileType.Directory:
        found = fs.get_file_info(pafs.FileSelector(path))
        return sorted(
            _child(url, path, f.path)
            for f in found
            if f.type == pafs.FileType.File
            and f.base_name.endswith(suffix)
            and not f.base_name.startswith((".", "_"))
        )
    if glob.has_magic(url):
        cut = min(i for i in (url.find(c) for c in "*?[") if i >= 0)
        head = url[: url.rfind("/", 0, cut)]
        fs, base = resolve(head)
        found = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        urls = [_child(head, base, f.path) for f in found if f.type == pafs.FileType.File]
        return sorted(u for u in urls if fnmatch.fnmatchcase(u, url))
    raise DataError(f"{url}: no such file or directory; check the URL.")


def open_input(url: str, *, stream: bool = False, compression: str | None = None):
    """A pyarrow file for a URL: random access (``stream=False``, for Parquet) or a sequential
    stream (for text; ``compression="gzip"`` decompresses)."""
    fs, p = resolve(url)
    try:
        if stream:
            return fs.open_input_stream(p, compression=compression)
        return fs.open_input_file(p)
    except FileNotFoundError:
        raise DataError(f"{url}: no such file; check the URL.") from None


def parquet_file(path, **kw):
    """``pyarrow.parquet.ParquetFile`` of a local path or a URL."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(open_input(path) if is_url(path) else path, **kw)


def size(path) -> int:
    if not is_url(path):
        return os.path.getsize(path)
    fs, p = resolve(path)
    return fs.get_file_info(p).size
