"""CPU threads sharing one ``w``: hot coordinates in per-thread copies, the rest Hogwild-style.

Why. CoCoA+ threads (``snapfit.engine.units.CpuUnit``) each solve their rows on a private view
with curvature ``sigma' ||x_i||^2``, ``sigma' = K``: every row's step is damped K-fold, so two
threads need ~1.7-2x the epochs of one on Criteo-like rows, and buy nothing. The damping is
there for the coordinates many rows share; on Criteo-like data those are few (13 integer
fields, the intercept, a few very frequent categorical values) but hold ~85 % of ``||x_i||^2``,
while the hashed categoricals almost never meet. So the threads of this scheme share one
``w`` and treat the two kinds apart:

* **cold** coordinates (every feature but the ``MAX_HOT`` most frequent) are read and written
  in ``w`` itself by every thread, Hogwild-style (Niu et al. 2011; PASSCoDe-Wild, Hsieh, Yu &
  Dhillon 2015). Two threads rarely touch one at once, but when their read-add-write races an
  update is lost and ``w`` drifts from ``w(alpha)``;
* **hot** coordinates (the ``MAX_HOT`` most frequent features of those in two rows or more, by
  column counts over ~1M of the rows, ``count_step``; the intercept always) live, during a
  pass, in a per-thread *copy*: thread ``t`` adds its moves to its own copy only and now and
  then *syncs* it: it publishes its own moves so far to a row the other threads read and adds
  the moves they have published since its last sync. Each published row has one writer, so no
  hot update is lost; 8-byte aligned loads and stores are atomic on x86-64 and AArch64, so a
  reader sees each published value either before or after a sync, never torn. After the pass
  the published moves are summed into ``w``. Syncs are tiered by frequency: the features in
  more than ``HOT_FRACTION`` (1 %) of the rows and the intercept every ``sync_every`` rows
  (64, doubled up to 512 while that stays within 2e-4 of the rows: 512 from 2.56M rows on),
  those in more than 1/4 of that 4x less often, and so on (``TIERS``): between two syncs a hot
  coordinate gets 0.6-2.6 moves of a thread on average at 64 rows (8x that at 512), whatever
  its frequency, while syncs touch ~12 hot coordinates (1.5 cache lines) per row on 4M
  Criteo-like rows at 64 rows, an eighth of that at 512.

Aliased views. Each thread's ``w`` is an array whose head (the cold ids) is the same physical
memory in every thread and whose tail (the hot ids and the intercept) is its own
(``snapfit.engine.alias``: one memory file mapped at the head of each view). The pass is then
``cpu.cd_pass``'s loop, one load per entry and no test of hot or cold (``cpu.cd_pass_views``
adds only the syncs), and any row can go to any thread. The previous kernel read every entry
as ``buf[a] + buf[b]`` (its own slot or ``w[j]``, plus the other thread's published slot or a
zero cell, chosen by comparing the id with ``n_features``): one thread of it took 1.32x
``cd_pass``'s time per pass (2.06 s against 1.56 s on 4M Criteo-40 rows), and two threads
1.41-1.61x one thread of ``cd_pass``, where two threads of ``cd_pass`` on private views
(CoCoA+) made 2.0-2.1x. On aliased views (24 interleaved passes of 4M Criteo-40 rows each way,
one process, medians): 1.92x one thread syncing every 64 rows, 2.12x every 128 rows, CoCoA+
2.13x, the old kernel 1.54x. What the syncs cost is the published lines crossing between the
cores (syncing against rows nobody else wrote cost 4 %; prefetching them ahead did not help).

Why so many hot coordinates. Lost updates are not noise the fit forgets: the rows' later steps
adapt ``alpha`` to the ``w`` they see, so ``w(alpha)`` walks away from ``w`` and the model the
fit returns (``w(alpha)``, see Exactness) is not the one the gap estimates judged. With only
the features in more than 1 % of the rows hot (306 on 4M Criteo-40 rows, 2^20 features), one
epoch of two threads left 1400-1570 coordinates of ``w`` off ``w(alpha)`` by more than 1e-6
(``||w - w(alpha)||`` 0.18-0.74, against ``||w||`` ~ 100); after 25 epochs the returned model's
test log loss was 0.3204 where the threads' ``w`` had 0.32004 (the target is the optimum 0.32004
+ 1e-4), and runs took 14-17 epochs to the target against 12-15 for one thread. With the 4096
most frequent hot, 500-600 coordinates per epoch; with 16384, 25-29 (0.02-0.05), no visible
gap between the two models, and 12-16 epochs (median 14 of 6 runs) against one thread's 12-15
(median 14.5 of 4 seeds). The hot copies of 16384 features (128 KB per thread, with the
published and seen rows 384 KB) stay in L2; an epoch took as long as with 306 (within this
machine's noise, 0.9-1.3 s either way); with 65536 it was ~10 % slower. (Measured with the
previous kernel, below; the hot set is the same.)

Relabeled ids. Once the hot set is known the fit runs in its own feature order: hot feature
``hot[h]`` becomes id ``h0 + h`` (``cpu.relabel``, entry order inside a row kept; ``h0`` is
``n_features`` rounded up to whole memory pages, where the views' private tails start), the
intercept is id ``h0 + MAX_HOT``, and ``w`` is laid out the same way (``HotSlots.w``;
``to_ext`` and ``to_real`` map a model in the data's order to and from it). The source
delivers relabeled chunks (``ChunkSource.relabel``: in-memory sources keep relabeled copies of
the indices, 4 bytes per stored value while the fit runs, the caller's arrays untouched; a
streaming source chooses the hot set itself from a sample of its row groups before its first
pass, whose cache then stores the fit's ids (``StreamSource(hot=True)``, ``hot_set``), and
relabels each chunk in its buffer only when it decodes Parquet every epoch). Designs
that needed no relabeling were slower: hot entries marked inside ``w`` (a tagged NaN naming the
slot: every entry's slot load waited on the load of ``w[j]``, 1.21 s per pass of two threads
against 0.84-0.86 s for the ``buf[a] + buf[b]`` kernel), or told apart by a bitmap over the
data's own ids (1.31x, the address waits on the bitmap's load); private views whose hot
features are synced during the pass and whose cold ones are merged after it (no relabeling,
no lost updates) matched the shared ``w`` on 4M rows but fell far behind at 200M (gap
estimate 0.062 after 10 epochs against 0.018), where the cold features' unseen moves grow
with the rows (``docs/threads.md``). Aliased views keep the cold coordinates fresh as the
shared ``w`` does.

Why published copies. When the threads read each other's live slots, the lines of the dense
coordinates moved between the two cores at nearly every row: a pass over 1M Criteo-like rows
(39 entries each) took 0.335 s on two threads against 0.488 s on one thread of that kernel and
0.34-0.37 s for ``cpu.cd_pass``. Published every 64 rows, the lines cross once per 64 rows.
The price is staleness: a row misses the other thread's hot moves since its last
publication, and, as a thread pulls them at its own syncs, up to two periods of them (64 to
128 rows on the first tier, half that on average). Emulated on 300k such rows (both threads'
rows interleaved one by one, cold coordinates fresh, no damping), the exact gap reached 1e-4
after 22 epochs at 1, 8 and 64 rows of staleness, as one thread did, 24 at 256 and 26 at 1024,
the gap less steady from epoch to epoch as it grows: staleness up to ~2e-4 of the rows was
free. Hence ``sync_every``: 64 rows, doubled up to 512 while it stays within 2e-4 of the rows.
On 4M Criteo-40 rows (2e-4 is 800 rows) the epochs to the bench's target did not move with
the period: seeds 0-7 took 15, 16, 17, 14, 14, 15, 14, 16 epochs at 64 rows, 15, 14, 17, 17,
12, 13, 16, 15 at 128 and 13, 15, 14, 16, 17, 17, 15, 15 at 512 (seeds 0, 2, 4 at 4 rows: 17,
13, 15; at 32 rows: 15, 15, 15 for seeds 0-2), while a pass of two threads got faster: 128
rows against 64 1.10x (24 interleaved passes) and 1.16x and 1.10x (20), 512 against 128
1.06x (20; one thread's pass 2.02x as long as two threads' at 512, 1.92x at 128). What the
syncs cost is the published lines crossing between the cores. What two threads lose in epochs
against one (13, 15, 13, 13, 12, 13, 14, 15 for the same seeds) is not staleness: with the
two threads' passes run one after the other (a lock around the kernel) the fit is one
thread's bit for bit, and with syncs every 4 rows the dual after the first epoch is still
~1.5 % below one thread's (61.8k against 62.8k on those rows; 59.7k-62.0k at 64 rows). It is
the rows the threads update at the same moment, which share the dense coordinates (~85 % of
``||x_i||^2``): a Jacobi step over them gains less than two sequential steps. Damping the hot
part to make up for it (``hot_damp`` 0.25 or 1 for two threads) lost more: the dual after 6
epochs 113.2k and 104.6k against 115.6k-115.8k undamped.

Step rule (bounded staleness). A row's margin misses the moves of the rows other threads have
in flight. With live slots, a set ``S`` of at most ``T`` rows (one per thread) is computed
from the same ``w``, i.e. a Jacobi step over ``S``. For a quadratic, a Jacobi step with
curvatures ``q_i`` decreases the objective iff ``2 diag(q) - Q_S`` is positive semidefinite;
with the entropy of the logistic dual (convex and separable, solved exactly by each row's Newton
step) the same bound gives ``D(alpha + delta) >= D(alpha)``: each row gains at least
``q_i delta_i^2`` in its own model, the interaction costs at most
``1/2 ||sum_{i in S} delta_i x_i||^2 <= 1/2 sum_i delta_i^2 sum_j |S_j| x_ij^2`` (Cauchy-Schwarz
per coordinate, ``S_j`` the rows of ``S`` holding ``j``). So ``q_i = sum_j max(1, |S_j|/2)
x_ij^2`` is safe: with ``|S_j| <= T`` on hot coordinates and ``<= 2`` on cold ones (three
threads at once on one cold coordinate is what the hot set rules out), this is ``||x_i||^2 +
(T/2 - 1)^+ ||x_i,hot||^2``: **no damping at all for two threads**, ``hot_damp = T/2 - 1``
for more. It is the GPU review's rows-in-flight reasoning at ``tau = T``. The bound covers a
row overlapping one row per other thread; syncs (up to two sync periods of rows of
each other thread unseen on hot coordinates), a fully asynchronous schedule and lost cold
updates are outside it. The bound for a sync period of rows in flight would damp hot
coordinates about as much as CoCoA+ does, so the rows are not damped for it: the emulation
above is the evidence that the steps still converge, and the certificate never trusts the
bound: see below.

Exactness. Lost cold updates make ``w != w(alpha)``, which would stall the fit at a perturbed
point and falsify the dual. The trainer therefore rebuilds ``w = w(alpha)`` exactly
(``cpu.accumulate_w`` over every chunk, threads in parallel, ``Trainer.settle``) before every
exact gap check and at the end of a fit, so a reported gap and the returned model are exact.
It costs one in-order pass over every chunk per exact check (0.10 s of CPU on 1M
Criteo-like rows, against 0.35 s for one thread's epoch); a fit makes one or two.

Results depend on the threads' timing, so they are not reproducible bit for bit, which is
why the estimators default to CoCoA+ threads (``deterministic=True``); this scheme is
``deterministic=False``. What it costs and gains is measured in ``docs/threads.md``.
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
