"""The Criteo feature map, shared by the TSV converter and the Criteo-like maker.

Row layout (the Criteo display-advertising files): ``label``, 13 integer fields ``I1..I13``,
26 categorical fields ``C1..C26`` holding 8 hex digits; any field may be empty. Features:

* integer field ``j`` (0..12) -> index ``j``, value ``log1p(max(x, 0))`` (float64 math, stored
  float32); a value of 0 is stored as an explicit entry of 0.
* categorical field ``c`` (0..25) with token ``t`` (the 8 hex digits as a uint32) -> index
  ``13 + splitmix64((c + 1) << 32 | t) mod (2**hash_bits - 13)``, value 1.
* an empty field produces no entry. Entries of a row are in field order (0..38).

splitmix64's finalizer (Steele, Lea & Flood 2014) is plain uint64 arithmetic: numpy does it
vectorized with wrap-around and gives the same bits on every platform.
"""

from __future__ import annotations

import numpy as np

N_INT, N_CAT = 13, 26
N_FIELDS = N_INT + N_CAT

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)

HEX_DIGITS = np.frombuffer(b"0123456789abcdef", np.uint8)


def check_hash_bits(hash_bits: int) -> int:
    """``hash_bits`` in [5, 31]: indices must fit int32 and leave room past the 13 int slots."""
    if not 5 <= int(hash_bits) <= 31:
        raise ValueError(f"hash_bits is {hash_bits}; it must be between 5 and 31.")
    return int(hash_bits)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer on a uint64 array (a bijection that mixes every input bit)."""
    z = np.asarray(x, dtype=np.uint64).copy()
    z ^= z >> np.uint64(30)
    z *= _M1
    z ^= z >> np.uint64(27)
    z *= _M2
    z ^= z >> np.uint64(31)
    return z


def cat_index(field, tokens: np.ndarray, hash_bits: int) -> np.ndarray:
    """Feature index (int32) of categorical ``field`` (0..25, or an array broadcasting against
    ``tokens``) holding ``tokens`` (uint32)."""
    field = np.asarray(field, dtype=np.uint64)
    key = ((field + np.uint64(1)) << np.uint64(32)) | tokens.astype(np.uint64)
    slots = np.uint64((1 << hash_bits) - N_INT)
    return (splitmix64(key) % slots + np.uint64(N_INT)).astype(np.int32)


def int_values(x: np.ndarray) -> np.ndarray:
    """Value (float32) of an integer field: ``log1p(max(x, 0))``."""
    return np.log1p(np.maximum(x, 0).astype(np.float64)).astype(np.float32)


def format_hex8(tokens: np.ndarray) -> np.ndarray:
    """8 lowercase hex digits per uint32 token, as an (n, 8) uint8 array of characters."""
    shifts = np.arange(28, -1, -4, dtype=np.uint32)
    return HEX_DIGITS[(tokens[:, None] >> shifts) & np.uint32(15)]


def rows_to_csr(
    ints: np.ndarray,
    int_present: np.ndarray,
    tokens: np.ndarray,
    cat_present: np.ndarray,
    hash_bits: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR (indptr int64, indices int32, values float32) of parsed Criteo rows.

    ``ints`` (n, 13) int64 and ``tokens`` (n, 26) uint32 with masks of the non-empty fields.
    """
    n = len(ints)
    idx = np.empty((n, N_FIELDS), dtype=np.int32)
    val = np.ones((n, N_FIELDS), dtype=np.float32)
    idx[:, :N_INT] = np.arange(N_INT, dtype=np.int32)
    val[:, :N_INT] = int_values(ints)
    idx[:, N_INT:] = cat_index(np.arange(N_CAT), tokens, hash_bits)
    present = np.concatenate([int_present, cat_present], axis=1)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(present.sum(axis=1), out=indptr[1:])
    return indptr, idx[present], val[present]
