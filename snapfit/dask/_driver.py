"""The driver: placement, CoCoA+ rounds, stopping, checkpoints and recovery from a lost worker.

Mental model (one fit)::

    driver (client)                         worker A                    worker B
    place chunk ids by nnz  ------------->  Part(ids_A): reads them     Part(ids_B)
    counts -> C+, C-; sigma' = sum n_jobs   start(problem) -> w_A       start -> w_B
    round r: w  ------------------------->  step(w) -> dw_A, ent, gap   step(w) -> dw_B, ...
             w += dw_A + dw_B; gap = sum    (alpha, data, threads stay on the worker)
             every `checkpoint_every` rounds the parts also return alpha: the driver's
             checkpoint (w is not stored: it is recomputed from alpha on recovery)

A lost worker (gone from the scheduler, or its actor unreachable) rolls ALL parts back to the
last checkpointed round: survivors keep their ids and adopt the lost ones (balanced by nnz), a
new generation of parts starts from the checkpointed alpha and the driver sums their exact
``w(alpha)``. Restoring only the lost share from an older round would break ``w = w(alpha)``.
Every wait polls the scheduler for the workers it waits on and has a deadline: no hang.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from snapfit.dask import _worker
from snapfit.engine import Problem
from snapfit.errors import ResourceError


class WorkerLost(RuntimeError):
    """Workers holding parts of the fit died or became unreachable (handled by recovery)."""

    def __init__(self, addresses, cause=None):
        self.addresses = sorted(addresses)
        super().__init__(f"lost worker(s) {', '.join(self.addresses)}: {cause or 'gone'}")


class FitTimeoutError(ResourceError, TimeoutError):
    """A step of the fit did not finish within ``timeout`` seconds (CLI: the resource exit)."""


def alive_workers(client, timeout: float) -> dict[str, int]:
    """Worker address -> threads, asked of the scheduler (fresh, not the client's cache)."""
    info = client.sync(client.scheduler.identity, n_workers=-1, callback_timeout=timeout)
    return {a: int(w.get("nthreads", 1)) for a, w in info["workers"].items()}


def wait_all(client, calls: dict[str, object], *, timeout: float, what: str) -> dict:
    """Results of futures (``Future`` or ``ActorFuture``) keyed by the worker they run on.

    Polls: a done future is collected; every half second the scheduler is asked whether the
    workers still pending are alive (a dead worker's actor call can otherwise wait forever);
    past ``timeout`` seconds a ``FitTimeoutError`` names what and who did not answer.
    """
    deadline = time.monotonic() + timeout
    pending, out = dict(calls), {}
    nap, next_check = 2e-4, time.monotonic() + 0.5
    while pending:
        for addr, fut in list(pending.items()):
            if fut.done():
                del pending[addr]
                try:
                    out[addr] = fut.result(timeout=timeout)
                except OSError as e:  # "Unable to contact Actor's worker", closed comms
                    raise WorkerLost([addr], e) from e
                except Exception as e:
                    if type(e).__name__ in ("CancelledError", "FutureCancelledError"):
                        raise WorkerLost([addr], e) from e
                    raise
        if not pending:
            break
        now = time.monotonic()
        if now >= next_check:
            alive = alive_workers(client, timeout)
            lost = [a for a in pending if a not in alive]
            if lost:
                raise WorkerLost(lost)
            next_check = now + 0.5
        if now >= deadline:
            raise FitTimeoutError(
                f"{what} did not finish within {timeout:g} s on worker(s) "
                f"{', '.join(sorted(pending))}; the workers may be overloaded or stuck. Pass a "
                "larger timeout= or check the workers' logs (dashboard: client.dashboard_link)."
            )
        time.sleep(nap)
        nap = min(nap * 2, 0.02)
    return out


def balance(
    sizes: dict[int, int], workers: list[str], start: dict[str, list[int]] | None = None
) -> dict[str, list[int]]:
    """Deal chunk ids to workers, largest first, each to the least-loaded worker (by nnz).

    ``start``: ids some workers already hold (they keep them); only the other ids are dealt.
    """
    out = {a: list((start or {}).get(a, [])) for a in workers}
    load = {a: sum(sizes[k] for k in out[a]) for a in workers}
    held = {k for ids in out.values() for k in ids}
    for k in sorted(set(sizes) - held, key=lambda k: (-sizes[k], k)):
        a = min(workers, key=lambda a: (load[a], a))
        out[a].append(k)
        load[a] += sizes[k]
    return {a: sorted(ids) for a, ids in out.items() if ids}


@dataclass
class DaskFit:
    """What ``train`` returns: the model vector, the rounds and where the data went."""

    w: np.ndarray
    n_iter: int
    converged: bool
    history: list[dict] = field(default_factory=list)
    parts: list[dict] = field(default_factory=list)  # per generation and worker: ids, read
    classes_counts: tuple[int, int] = (0, 0)


class _Round:
    """Bookkeeping of one fit on the driver (one instance per fit; unique keys per fit)."""

    def __init__(self, client, inp, *, timeout: float, n_jobs: int | None, tree_above: int):
        self.client, self.inp, self.timeout = client, inp, float(timeout)
        self.n_jobs, self.tree_above = n_jobs, tree_above
        self.fit_id = uuid.uuid4().hex[:12]
        self.gen = -1
        self.futs: dict[str, object] = {}  # address -> actor future (keeps the actor alive)
        self.actors: dict[str, object] = {}
        self.assign: dict[str, list[int]] = {}
        self.threads: dict[str, int] = {}
        self.parts_log: list[dict] = []

    # -- parts -----------------------------------------------------------------------------
    def create(self, assign: dict[str, list[int]], threads: dict[str, int]) -> dict[str, dict]:
        """Start a new generation of ``Part`` actors (one per worker); return their info."""
        from distributed import Actor  # noqa: F401 - the actor=True machinery

        old = dict(self.futs)
        self.gen += 1
        futs = {}
        for i, (addr, ids) in enumerate(sorted(assign.items())):
            inherit = old[addr].key if addr in old else None
            futs[addr] = self.client.submit(
                _worker.Part,
                self.inp.kind,
                self.inp.payload(ids),
                ids,
                inherit,
                actor=True,
                workers=[addr],
                allow_other_workers=False,  # the part's state lives there; never move it
                pure=False,
                key=f"snapfit-part-{self.fit_id}-g{self.gen}-{i}",
            )
        try:
            actors = wait_all(self.client, futs, timeout=self.timeout, what="loading the data")
            infos = self.call(actors, "info", what="reporting the shares")
        finally:
            self.release(old)
        self.futs, self.actors, self.assign = futs, actors, dict(assign)
        self.threads = {a: threads[a] for a in assign}
        for _, info in sorted(infos.items()):
            self.parts_log.append(dict(info, generation=self.gen))
        return infos

    def release(self, futs: dict[str, object]) -> None:
        """Stop old parts' threads (best effort, bounded) and drop their actors."""
        for addr, fut in futs.items():
            actor = self.actors.get(addr)
            if actor is not None and fut is self.futs.get(addr):
                try:
                    actor.close().result(timeout=min(self.timeout, 10.0))
                except Exception:  # noqa: BLE001 - the worker may be gone; nothing to stop
                    pass
            fut.release()

    def close(self) -> None:
        self.release(self.futs)
        self.futs, self.actors = {}, {}

    def call(self, actors, method: str, *args, what: str, **kwargs) -> dict:
        calls = {a: getattr(act, method)(*args, **kwargs) for a, act in actors.items()}
        return wait_all(self.client, calls, timeout=self.timeout, what=what)

    def units(self, addr: str) -> int:
        return max(1, int(self.n_jobs or self.threads[addr]))

    def problems(self, base: Problem) -> dict[str, Problem]:
        """Each part's problem: its own threads, sigma' = all units of all parts, own seed."""
        sigma = float(sum(self.units(a) for a in self.assign))
        out = {}
        for i, addr in enumerate(sorted(self.assign)):
            seed = int(np.random.default_rng([base.seed, self.gen, i]).integers(2**31 - 1))
            out[addr] = replace(base, n_jobs=self.units(addr), sigma=sigma, seed=seed)
        return out

    def start(self, base: Problem, *, epoch: int, alpha=None, warm_w=None) -> dict[str, dict]:
        calls = {}
        for addr, prob in self.problems(base).items():
            a = None if alpha is None else np.concatenate([alpha[k] for k in self.assign[addr]])
            calls[addr] = self.actors[addr].start(prob, epoch=epoch, alpha=a, warm_w=warm_w)
        return wait_all(self.client, calls, timeout=self.timeout, what="starting the parts")

    def tree_sum(self, r: int) -> np.ndarray:
        """Sum the parts' kept ``dw`` by a tree of tasks (arity 4) instead of at the driver."""
        c, made = self.client, []
        try:
            level = []
            for i, (addr, fut) in enumerate(sorted(self.futs.items())):
                level.append(c.submit(_worker.take_dw, fut.key, workers=[addr],
                                      allow_other_workers=False, pure=False,
                                      key=f"snapfit-dw-{self.fit_id}-{r}-{i}"))  # fmt: skip
            made += level
            depth = 0
            while len(level) > 1:
                depth += 1
                level = [
                    c.submit(
                        _worker.add,
                        *level[j : j + 4],
                        pure=False,
                        key=f"snapfit-sum-{self.fit_id}-{r}-{depth}-{j}",
                    )  # fmt: skip
                    for j in range(0, len(level), 4)
                ]
                made += level
            # the inner sums may run anywhere: watch every worker holding a part
            root = wait_all(c, {a: level[0] for a in self.futs}, timeout=self.timeout,
                            what="summing dw")  # fmt: skip
            return next(iter(root.values()))
        finally:
            for f in made:
                f.release()


def train(
    client,
    inp,
    problem: Problem,
    *,
    class_weights: Callable[[int, int], tuple[float, float]],
    n_jobs: int | None = None,
    timeout: float = 600.0,
    checkpoint_every: int = 1,
    tree_above: int = 16,
    warm_w: np.ndarray | None = None,
    on_round: Callable[[dict], object] | None = None,
) -> DaskFit:
    """Run CoCoA+ rounds over the cluster until the exact relative gap is at most ``tol``.

    ``problem`` carries everything but the class bounds (``class_weights(n_neg, n_pos)`` gives
    ``(c_neg, c_pos)`` once the workers have counted their labels), the per-part threads and
    sigma'. ``n_jobs`` threads per worker (None: the worker's own thread count).
    """
    from snapfit.errors import DataError

    rd = _Round(client, inp, timeout=timeout, n_jobs=n_jobs, tree_above=tree_above)
    try:
        threads = alive_workers(client, timeout)
        if not threads:
            raise RuntimeError("the Dask cluster has no workers; start some or pass workers=N.")
        infos = rd.create(inp.place(threads), threads)
        n_neg = sum(i["label_counts"][0] for i in infos.values())
        n_pos = sum(i["label_counts"][1] for i in infos.values())
        if not (n_neg and n_pos):
            raise DataError(
                f"{inp.name}: every label is {'positive' if n_pos else 'negative'} "
                f"({n_neg + n_pos} rows); training needs both classes."
            )
        c_neg, c_pos = class_weights(n_neg, n_pos)
        base = replace(problem, c_pos=float(c_pos), c_neg=float(c_neg))
        w, alpha, ckpt_round = _begin(rd, base, epoch=0, warm_w=warm_w)
        history: list[dict] = []
        r, converged, event = 0, False, None
        while r < base.max_iter:
            try:
                rec = _one_round(rd, base, w, r, checkpoint=(r + 1) % checkpoint_every == 0)
            except WorkerLost as lost:
                w, r, event = _recover(rd, base, lost, alpha, ckpt_round, threads)
                continue
            w, r = rec.pop("w"), r + 1
            if "alpha" in rec:
                alpha, ckpt_round = rec.pop("alpha"), r
            rec["event"], event = event, None
            converged = rec["exact"] and rec["rel_gap"] <= base.tol
            history.append(rec)
            stop = bool(on_round(rec)) if on_round is not None else False
            if converged or stop:
                break
        return DaskFit(w, r, converged, history, rd.parts_log, (n_neg, n_pos))
    finally:
        rd.close()


def _split(rd: _Round, alphas: dict[str, np.ndarray], into: dict[int, np.ndarray]) -> None:
    """Packed alpha per part -> alpha per chunk id (the driver's checkpoint)."""
    for addr, a in alphas.items():
        info = next(p for p in reversed(rd.parts_log) if p["address"] == addr)
        off = 0
        for k, n in zip(rd.assign[addr], info["rows"], strict=True):
            into[k] = a[off : off + n]
            off += n


def _begin(rd: _Round, base: Problem, *, epoch: int, alpha=None, warm_w=None):
    started = rd.start(base, epoch=epoch, alpha=alpha, warm_w=warm_w)
    w = sum(s["w"] for s in started.values())
    ckpt: dict[int, np.ndarray] = {}
    _split(rd, {a: s["alpha"] for a, s in started.items()}, ckpt)
    return w, ckpt, epoch


def _recover(rd, base, lost: WorkerLost, alpha, ckpt_round, threads):
    """Re-place the lost shares on the survivors and roll every part back to the checkpoint."""
    gone = set(lost.addresses)
    for _ in range(len(rd.assign)):
        alive = alive_workers(rd.client, rd.timeout)
        survivors = [a for a in rd.assign if a in alive and a not in gone]
        if not survivors:
            raise RuntimeError(
                f"every worker holding this fit was lost ({lost}); nothing left to resume on. "
                "Check the workers' memory limits and logs, then fit again."
            )
        assign = balance(rd.inp.sizes, survivors, start={a: rd.assign[a] for a in survivors})
        try:
            rd.create(assign, threads)
            w, _, _ = _begin(rd, base, epoch=ckpt_round, alpha=alpha)
            return w, ckpt_round, f"lost {', '.join(lost.addresses)}; resumed at {ckpt_round}"
        except WorkerLost as again:
            gone |= set(again.addresses)
    raise RuntimeError(f"workers kept failing while recovering from {lost}")


def _one_round(rd: _Round, base: Problem, w: np.ndarray, r: int, *, checkpoint: bool) -> dict:
    t0 = time.perf_counter()
    tree = len(rd.actors) > rd.tree_above
    res = rd.call(rd.actors, "step", w, checkpoint=checkpoint, keep_dw=tree,
                  what=f"round {r + 1}")  # fmt: skip
    sent = w.nbytes * len(res)
    received = sum(_worker.packed_nbytes(x["dw"]) for x in res.values() if "dw" in x)
    dw = rd.tree_sum(r) if tree else sum(_worker.unpack(x["dw"]) for x in res.values())
    w = w + dw
    wsq = float(w @ w)
    ent = sum(x["ent"] for x in res.values())
    gap = sum(x["gap"] for x in res.values())
    dual = -0.5 * wsq - ent
    primal, exact = dual + gap, False
    if gap / max(abs(primal), 1e-300) <= base.tol or r + 1 >= base.max_iter:
        # confirm with an exact pass at the merged w, as the engine does
        obj = rd.call(rd.actors, "objective", w, what=f"exact objective of round {r + 1}")
        sent += w.nbytes * len(obj)
        loss = sum(o[0] for o in obj.values())
        dual = -0.5 * wsq - sum(o[1] for o in obj.values())
        primal, exact = 0.5 * wsq + loss, True
        gap = primal - dual
    rec = {
        "epoch": r + 1,
        "primal": primal,
        "dual": dual,
        "gap": gap,
        "rel_gap": gap / max(abs(primal), 1e-300),
        "exact": exact,
        "seconds": time.perf_counter() - t0,
        "worker_seconds": max(x["seconds"] for x in res.values()),
        "n_workers": len(res),
        "bytes_sent": int(sent),
        "w": w,
    }
    if checkpoint:
        alpha: dict[int, np.ndarray] = {}
        _split(rd, {a: x["alpha"] for a, x in res.items()}, alpha)
        rec["alpha"] = alpha
        received += sum(x["alpha"].nbytes for x in res.values())
    rec["bytes_received"] = int(received)
    return rec
