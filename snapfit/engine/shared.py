"""CPU threads sharing one ``w``: hot coordinates in per-thread copies, the rest Hogwild-style.

CoCoA+ threads damp every step by ``sigma' = K`` because of the few coordinates that many rows
share (on Criteo-like rows they hold ~85 % of ``||x_i||^2``), so two of them need ~1.7-2x the
epochs of one. Threads of this scheme share one ``w`` and treat the two kinds apart:

* **cold** coordinates (all but the ``MAX_HOT`` most frequent features) are read and written
  in ``w`` by every thread, Hogwild-style; a race may lose an update, so ``w`` may drift from
  ``w(alpha)`` and the trainer recomputes it exactly before certifying a gap;
* **hot** coordinates (the ``MAX_HOT`` most frequent features in two rows or more, counted over
  ~``COUNT_ROWS`` rows, and the intercept) live during a pass in a per-thread copy that the
  thread publishes and syncs every ``sync_every`` rows, tiered by frequency (``TIERS``,
  ``HOT_FRACTION``); each published row has one writer, so no hot update is lost.

Each thread's ``w`` is an aliased view (``snapfit.engine.alias``): its head, the cold ids, is
one memory shared by every view; its tail, the hot ids (relabeled from ``hot_base``) and the
intercept, is its own. ``HotSlots`` owns the views, the published rows and the relabeling
(``hot_code``); ``hot_damp`` adds curvature on hot coordinates for the rows in flight.

The design, its measurements and the kernels it replaced are in ``docs/threads.md`` ("The
shared scheme's design notes").
"""

from __future__ import annotations

import numpy as np

from snapfit.engine.alias import aliased_views, page_entries
from snapfit.solvers import cpu

#: The ``MAX_HOT`` most frequent features (of those in two rows or more) are hot: their copies
#: stay in L1/L2, and a cold feature is rare enough that two threads seldom update it at once.
MAX_HOT = 16384
#: A thread syncs its first tier of hot coordinates (features in more than this fraction of the
#: rows, and the intercept) with the others every ``sync_every(n_rows)`` of its rows.
HOT_FRACTION = 0.01
SYNC_EVERY = 64
#: Staleness up to this fraction of the rows cost no epochs in emulation (module docstring);
#: the period grows no further than ``MAX_SYNC_EVERY`` (the longest measured).
FREE_STALENESS = 2e-4
MAX_SYNC_EVERY = 512
#: Tier ``t`` (features in more than ``HOT_FRACTION / 4**t`` of the rows) is synced every
#: ``sync_every(n_rows) * 4**t`` rows; the last tier holds the rest of the hot set.
TIERS = 5


#: The hot set is chosen from the column counts of about this many rows (every
#: ``count_step``-th row): counting all 4M Criteo-40 rows took 0.62-0.67 s of one thread's time,
#: more than their norms. Counted on every 4th of those rows, 97 % of the 16384 hot features
#: are the same, the cold entries grow by 0.1 %, and the most frequent cold feature is in 494
#: rows instead of 402 (every 8th row: 0.25 %, 568).
COUNT_ROWS = 1_000_000


def count_step(n_rows: int) -> int:
    """Count every ``count_step(n_rows)``-th row of each span (all rows of a small data set)."""
    return max(1, int(n_rows) // COUNT_ROWS)


def sync_every(n_rows: int) -> int:
    """Rows between a thread's first-tier syncs: ``SYNC_EVERY``, doubled while the result is
    at most ``FREE_STALENESS`` of the rows and ``MAX_SYNC_EVERY`` (each sync moves cache lines
    between the cores)."""
    every = SYNC_EVERY
    while 2 * every <= min(MAX_SYNC_EVERY, FREE_STALENESS * n_rows):
        every *= 2
    return every


def hot_damp(n_threads: int) -> float:
    """Extra curvature on hot coordinates for ``n_threads`` rows in flight (module docstring)."""
    return max(0.0, n_threads / 2.0 - 1.0)


def choose_hot(counts: np.ndarray, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Hot feature ids from per-feature row counts, most frequent first (ties by id): the
    ``MAX_HOT`` most frequent of those in two rows or more; and the end of each publishing
    tier in that list (``TIERS`` entries, the last ``len(hot)``). The intercept (id
    ``len(counts)``) is added by ``HotSlots``."""
    counts = np.asarray(counts)
    cand = np.flatnonzero(counts >= 2)
    hot = cand[np.argsort(-counts[cand], kind="stable")[:MAX_HOT]].astype(np.int64)
    freq = counts[hot]
    ends = [int(np.sum(freq > HOT_FRACTION * n_rows / 4**t)) for t in range(TIERS - 1)]
    return hot, np.array([*ends, len(hot)], dtype=np.int64)


def hot_base(n_features: int) -> int:
    """The first hot id: ``n_features`` rounded up to whole memory pages (where the threads'
    private tails of ``w`` start, ``snapfit.engine.alias``). Refused when the hot ids would
    not fit 32-bit ids."""
    page = page_entries()
    h0 = -(-int(n_features) // page) * page
    if h0 + MAX_HOT >= 2**31:
        raise ValueError(
            f"threads sharing w relabel hot features past n_features={n_features}, which leaves "
            "no room in 32-bit ids; use deterministic=True (CoCoA+ threads)"
        )
    return h0


def hot_code(hot: np.ndarray, n_features: int) -> np.ndarray:
    """The relabeling (``cpu.relabel``) that makes hot feature ``hot[h]`` id ``hot_base + h``
    and leaves every other feature's id as it is."""
    hot = np.asarray(hot, dtype=np.int64)
    code = np.arange(int(n_features), dtype=np.int32)
    code[hot] = hot_base(n_features) + np.arange(len(hot), dtype=np.int32)
    return code


class HotSlots:
    """``w`` in the fit's feature order and the threads' views of it (``snapfit.engine.alias``).

    Thread ``t``'s view ``views[t]`` has ``top + 1`` entries: ids ``0 .. h0 - 1`` are the cold
    coordinates, the same memory in every view (``h0`` is ``n_features`` rounded up to whole
    memory pages; the ids between stay 0), ids ``h0 .. h0 + MAX_HOT - 1`` the thread's own copy
    of the hot coordinates (hot feature ``hot[h]`` is id ``h0 + h``), the intercept last (id
    ``top``). ``w`` is thread 0's view and the trainer's ``w`` for the whole fit; its entries at
    the hot features' original ids stay 0 (no relabeled chunk names them). ``pub[t]`` holds
    thread ``t``'s published moves and ``seen[t, u]`` what thread ``t`` has added of thread
    ``u``'s (slot ``MAX_HOT`` the intercept; rows of whole 64-byte lines, so threads never write
    one line). ``tag()`` opens a pass (every view's hot copy the hot values, thread 0's moves
    starting from them, the others' from 0), ``fold()`` closes it (each hot value the sum of the
    threads' moves, summed in thread order).
    """

    def __init__(self, n_features: int, n_threads: int, n_rows: int = 0):
        self.d = int(n_features)
        self.every = sync_every(n_rows)  # rows between first-tier syncs
        self.h0 = hot_base(self.d)  # the first hot id, where the private tails start
        self.n_threads = int(n_threads)
        self.n_slots = MAX_HOT + 1  # hot features, then the intercept
        self.top = self.h0 + MAX_HOT  # the intercept's id
        self.stride = (self.n_slots + 7) // 8 * 8
        self.views = aliased_views(self.h0, self.n_slots, self.n_threads)
        self.w = self.views[0]
        self.pub = np.zeros((self.n_threads, self.stride))
        self.seen = np.zeros((self.n_threads, self.n_threads, self.stride))
        self.hot = np.zeros(0, dtype=np.int64)  # original ids; hot[h] is id h0 + h
        self.ends = np.zeros(TIERS, dtype=np.int64)  # sync tiers (``cpu.cd_pass_views``)

    def choose(self, counts: np.ndarray, n_rows: int) -> np.ndarray:
        """Fix the hot set from the column counts of ``n_rows`` rows (once, before the first
        pass); ``w`` moves to the new order. Returns the relabeling code (``cpu.relabel``)."""
        return self.set_hot(*choose_hot(counts[: self.d], n_rows))

    def set_hot(self, hot: np.ndarray, ends: np.ndarray | None = None) -> np.ndarray:
        """Make ``hot`` (distinct feature ids, at most ``MAX_HOT``; ``hot[h]`` becomes id
        ``h0 + h``) the hot set, synced in tiers ending at ``ends`` (default: all in the
        first); see ``choose``."""
        hot = np.asarray(hot, dtype=np.int64)
        if len(hot) > MAX_HOT:
            raise ValueError(f"{len(hot)} hot features; at most {MAX_HOT}")
        ends = np.full(TIERS, len(hot)) if ends is None else np.asarray(ends)
        if len(ends) != TIERS or ends[-1] != len(hot) or np.any(np.diff(ends) < 0):
            raise ValueError(f"sync tiers {ends} do not cut {len(hot)} hot features")
        real = self.to_real(self.w)
        self.hot = hot
        self.ends = ends.astype(np.int64)
        self.w[:] = self.to_ext(real)
        return hot_code(hot, self.d)

    def to_ext(self, w: np.ndarray) -> np.ndarray:
        """A model in the data's order (``n_features + 1``, intercept last) in the fit's order."""
        w = np.asarray(w, dtype=np.float64)
        if len(w) != self.d + 1:
            raise ValueError(f"w has {len(w)} entries; expected n_features + 1 = {self.d + 1}")
        out = np.zeros(self.top + 1)
        out[: self.d] = w[: self.d]
        out[self.hot] = 0.0
        out[self.h0 : self.h0 + len(self.hot)] = w[self.hot]
        out[self.top] = w[self.d]
        return out

    def to_real(self, w: np.ndarray) -> np.ndarray:
        """A vector in the fit's order back in the data's (a new array, intercept last)."""
        out = np.empty(self.d + 1)
        out[: self.d] = w[: self.d]
        out[self.hot] = w[self.h0 : self.h0 + len(self.hot)]
        out[self.d] = w[self.top]
        return out

    def tag(self) -> None:
        hot = self.w[self.h0 :]
        for view in self.views[1:]:
            view[self.h0 :] = hot
        self.pub[:] = 0.0
        self.seen[:] = 0.0
        self.pub[0, : self.n_slots] = hot
        self.seen[1:, 0, : self.n_slots] = hot

    def fold(self) -> None:
        total = self.pub[0, : self.n_slots].copy()
        for u in range(1, self.n_threads):
            total += self.pub[u, : self.n_slots]
        self.w[self.h0 :] = total
        self.pub[:] = 0.0
        self.seen[:] = 0.0

    def run(self, me: int, chunk, p, sqnorm, alpha, rows, sigma: float):
        """Thread ``me``'s pass over ``rows`` of a relabeled ``chunk`` (between ``tag`` and
        ``fold``). Returns ``(gap, entropy)``."""
        return cpu.cd_pass_views(
            *cpu.chunk_args(chunk), p.c_pos, p.c_neg, p.bias, sqnorm, alpha, self.views[me],
            rows, sigma, self.h0, self.pub, self.seen, me, hot_damp(self.n_threads), self.ends,
            self.every, p.loss,
        )  # fmt: skip
