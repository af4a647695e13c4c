"""Feature keys (``"site=news"``, ``"price"``, ``"site=news^ad=42"``) -> hashed feature indices.

A table's features are named by strings, so they need a string hash; it is built from the
splitmix64 finalizer that hashes Criteo tokens (:mod:`snapfit.datasets.criteo_hash`), over the
key's UTF-8 bytes taken as little-endian 64-bit words (the last one zero-padded)::

    h = splitmix64(GAMMA ^ n_bytes)
    for each word w: h = splitmix64(h ^ w)
    index = h mod 2**hash_bits          (the low bits)

Plain uint64 arithmetic with wrap-around: numpy runs it over a whole Arrow array of keys (one
numpy step per word position, over the keys long enough to have it), and every platform gets
the same bits, so a key's index can be recomputed anywhere, e.g. to look up its weight.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from snapfit.datasets.criteo_hash import splitmix64

#: Seed of every key's hash: 2**64 / golden ratio, splitmix64's own increment.
GAMMA = 0x9E3779B97F4A7C15

# MASKS[r] keeps the first r bytes of a little-endian word (r = 8: all of it).
_MASKS = np.array([(1 << (8 * r)) - 1 for r in range(8)] + [2**64 - 1], dtype=np.uint64)


def hash_keys(keys) -> np.ndarray:
    """64-bit hashes (uint64) of an Arrow string/binary array, or of a list of str/bytes.

    A null hashes as the empty key; callers mask nulls themselves.
    """
    if not isinstance(keys, (pa.Array, pa.ChunkedArray)):
        keys = pa.array([k.encode() if isinstance(k, str) else k for k in keys], pa.binary())
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    arr = pc.cast(keys, pa.large_binary())
    n = len(arr)
    if n == 0:
        return np.empty(0, dtype=np.uint64)
    _, off_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(off_buf, np.int64, count=n + 1, offset=arr.offset * 8)
    base, end = int(offsets[0]), int(offsets[-1])
    # The bytes, padded so that an 8-byte read at any start stays inside; a uint64 view with a
    # stride of one byte reads the word starting at any offset (unaligned reads are fine).
    padded = np.zeros(end - base + 8, dtype=np.uint8)
    if end > base:
        padded[: end - base] = np.frombuffer(data_buf, np.uint8, count=end - base, offset=base)
    words = np.ndarray((len(padded) - 7,), dtype="<u8", buffer=padded, strides=(1,))
    lengths = np.diff(offsets).astype(np.uint64)
    h = splitmix64(lengths ^ np.uint64(GAMMA))
    n_words = (lengths + np.uint64(7)) // np.uint64(8)
    # Longest keys first: the keys that still have a word k are then a prefix of the order.
    order = np.argsort(n_words, kind="stable")[::-1]
    starts = offsets[:-1][order] - base
    left = lengths[order].astype(np.int64)
    hs = h[order]
    have = np.bincount(n_words.astype(np.int64))[::-1].cumsum()[::-1]  # have[k]: keys of >= k words
    for k in range(1, len(have)):
        m = int(have[k])
        w = words[starts[:m] + 8 * (k - 1)]
        w &= _MASKS[np.minimum(left[:m] - 8 * (k - 1), 8)]
        hs[:m] = splitmix64(hs[:m] ^ w)
    h[order] = hs
    return h


def key_index(keys: str | Iterable[str], hash_bits: int):
    """Feature index of a key (an int) or of each key in a list (an int32 array).

    E.g. ``key_index("site=news", 20)`` is the column of ``site == "news"`` in a table converted
    with 20 hash bits; ``model.coef_[0, key_index("price", 20)]`` is the weight of ``price``.
    """
    one = isinstance(keys, str)
    h = hash_keys([keys] if one else list(keys)) & np.uint64((1 << int(hash_bits)) - 1)
    return int(h[0]) if one else h.astype(np.int32)
