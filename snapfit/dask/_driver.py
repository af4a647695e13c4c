"""The driver: placement, rounds, stopping, checkpoints and recovery from a lost worker.

Mental model (one fit)::

    driver (client)                          worker A                     worker B
    place chunk ids by nnz  -------------->  Part(ids_A): reads them      Part(ids_B)
    counts -> C+, C-                         start(problem, s_A) -> w_A   start -> w_B
    measure(w)  -------------------------->  loss, entropy, r_A           ... r_B
    gap = P(w) - D(alpha) exactly; g = r_A + r_B = grad P(w)
    round r: g, theta  ------------------->  passes from w + theta (s_A r_A - g) -> dw_A
             w' = w + dw_A + dw_B;  measure(w') -> gap', g'
             gap' <= gap: accept w' (theta doubles, to 1); else revert (theta / 4)
             every `checkpoint_every` rounds the measure also returns alpha: the driver's
             checkpoint (w is not stored: it is recomputed from alpha on recovery)

Why the correction: plain CoCoA+ (``theta = 0``) only moves dual mass between fixed shares
through its curvature bound, which on rows sharing dense directions (the intercept, Criteo's 13
integer fields) stalled a 2-worker fit near 1e-3 relative gap. With it each subproblem is the
dual of DANE's (Shamir, Srebro & Zhang 2014), the share's loss scaled by ``s_k = n / n_k``: same
curvature, same alpha (``w`` stays exactly ``w(alpha)``), a round that worsens the exact gap is
taken back. See docs/dask.md ("How a fit runs") for the rate and the measurements.

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
        nap = min(nap * 2, 0.005)
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
    # packed alpha of every row (chunk id order) at the final w, when the last checkpoint is
    # of the final round (always with checkpoint_every=1); else None
    alpha: np.ndarray | None = None


#: The correction weight theta (see ``Fit``): accepted rounds double it (up to 1), rejected
#: ones divide it by 4; below THETA_MIN the next try is plain CoCoA+ (theta = 0).
THETA_MIN = 1.0 / 64


class _Round:
    """Bookkeeping of one fit on the driver (one instance per fit; unique keys per fit)."""

    def __init__(self, client, inp, *, timeout: float, tree_above: int,
                 part_options: dict | None = None):  # fmt: skip
        self.client, self.inp, self.timeout = client, inp, float(timeout)
        self.tree_above = tree_above
        self.part_options = dict(part_options or {})
        self.fit_id = uuid.uuid4().hex[:12]
        self.gen = -1
        self.futs: dict[str, object] = {}  # address -> actor future (keeps the actor alive)
        self.actors: dict[str, object] = {}
        self.assign: dict[str, list[int]] = {}
        self.infos: dict[str, dict] = {}
        self.parts_log: list[dict] = []

    # -- parts -----------------------------------------------------------------------------
    def create(self, assign: dict[str, list[int]]) -> dict[str, dict]:
        """Start a new generation of ``Part`` actors (one per worker); return their info."""
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
                **self.part_options,
                actor=True,
                workers=[addr],
                allow_other_workers=False,  # the part's state lives there; never move it
                pure=False,
                key=f"snapfit-part-{self.fit_id}-g{self.gen}-{i}",
            )
        try:
            actors = wait_all(self.client, futs, timeout=self.timeout, what="loading the data")
            infos = self.call(actors, "info", what="reporting the shares")
        except BaseException:
            for f in futs.values():
                f.release()
            raise
        finally:
            self.release(old)
        self.futs, self.actors, self.assign, self.infos = futs, actors, dict(assign), infos
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
        """The CoCoA+ units a part runs: its GPUs and CPU threads, its CPU threads once when
        they share ``w`` (resolved on its worker)."""
        return int(self.infos[addr]["sigma_units"])

    def scales(self) -> dict[str, float]:
        """``s_k = n / n_k`` per part: sum_k 1/s_k = 1, the CoCoA+-safe split of sigma'."""
        rows = {a: sum(self.infos[a]["rows"]) for a in self.assign}
        n = sum(rows.values())
        return {a: n / max(1, m) for a, m in rows.items()}

    def problems(self, base: Problem) -> dict[str, tuple[Problem, float]]:
        """Each part's problem and scale: its own seed, sigma' = units * s_k (the units of all
        workers when the shares are equal)."""
        out = {}
        for i, (addr, s) in enumerate(sorted(self.scales().items())):
            seed = int(np.random.default_rng([base.seed, self.gen, i]).integers(2**31 - 1))
            out[addr] = (replace(base, sigma=self.units(addr) * s, seed=seed), s)
        return out

    def tree_sum(self, name: str, r: int) -> np.ndarray:
        """Sum the parts' kept vectors by a tree of tasks (arity 4) instead of at the driver."""
        c, made = self.client, []
        try:
            level = []
            for i, (addr, fut) in enumerate(sorted(self.futs.items())):
                level.append(c.submit(_worker.take, fut.key, name, workers=[addr],
                                      allow_other_workers=False, pure=False,
                                      key=f"snapfit-{name}-{self.fit_id}-{r}-{i}"))  # fmt: skip
            made += level
            depth = 0
            while len(level) > 1:
                depth += 1
                level = [
                    c.submit(
                        _worker.add,
                        *level[j : j + 4],
                        pure=False,
                        key=f"snapfit-sum-{name}-{self.fit_id}-{r}-{depth}-{j}",
                    )  # fmt: skip
                    for j in range(0, len(level), 4)
                ]
                made += level
            # the inner sums may run anywhere: watch every worker holding a part
            root = wait_all(c, {a: level[0] for a in self.futs}, timeout=self.timeout,
                            what=f"summing {name}")  # fmt: skip
            return next(iter(root.values()))
        finally:
            for f in made:
                f.release()

    # -- the two calls of a round ----------------------------------------------------------
    def start(self, base: Problem, *, epoch: int, alpha=None, warm_w=None):
        """Start every part (zeros, checkpointed alpha or warm w); return ``w`` and the
        alpha checkpoint by chunk id."""
        calls = {}
        for addr, (prob, s) in self.problems(base).items():
            a = None if alpha is None else np.concatenate([alpha[k] for k in self.assign[addr]])
            calls[addr] = self.actors[addr].start(prob, scale=s, epoch=epoch, alpha=a,
                                                  warm_w=warm_w)  # fmt: skip
        started = wait_all(self.client, calls, timeout=self.timeout, what="starting the parts")
        w = sum(_worker.unpack(x["w"]) for x in started.values())
        return w, self.split({a: x["alpha"] for a, x in started.items()})

    def split(self, alphas: dict[str, np.ndarray]) -> dict[int, np.ndarray]:
        """Packed alpha per part -> alpha per chunk id (the driver's checkpoint)."""
        out: dict[int, np.ndarray] = {}
        for addr, a in alphas.items():
            off = 0
            for k, n in zip(self.assign[addr], self.infos[addr]["rows"], strict=True):
                out[k] = a[off : off + n]
                off += n
        return out

    def measure(self, w: np.ndarray, *, r: int, checkpoint: bool) -> dict:
        """Exact primal, dual and gap at ``w`` and the gradient ``g = grad P(w)``."""
        tree = len(self.actors) > self.tree_above
        wp = _worker._pack(w)
        res = self.call(self.actors, "measure", wp, checkpoint=checkpoint, keep=tree,
                        what=f"measuring round {r}")  # fmt: skip
        if tree:
            g = self.tree_sum("r", r)
        else:
            g = sum(_worker.unpack(x["r"]) for x in res.values())
        wsq = float(w @ w)
        loss = sum(x["loss"] for x in res.values())
        ent = sum(x["ent"] for x in res.values())
        primal, dual = 0.5 * wsq + loss, -0.5 * wsq - ent
        out = {
            "primal": primal,
            "dual": dual,
            "gap": primal - dual,
            "rel_gap": (primal - dual) / max(abs(primal), 1e-300),
            "g": g,
            "seconds": max(x["seconds"] for x in res.values()),
            "bytes_sent": _worker.packed_nbytes(wp) * len(res),
            "bytes_received": sum(_worker.packed_nbytes(x["r"]) for x in res.values() if "r" in x),
        }
        if checkpoint:
            out["alpha"] = self.split({a: x["alpha"] for a, x in res.items()})
            out["bytes_received"] += sum(x["alpha"].nbytes for x in res.values())
        return out

    def step(self, g: np.ndarray, *, r: int, theta: float, gap: float, revert: bool,
             max_passes: int) -> dict:  # fmt: skip
        """Every part's passes on its subproblem; return the summed ``dw``."""
        tree = len(self.actors) > self.tree_above
        gp = _worker._pack(g)
        res = self.call(self.actors, "step", gp, theta=theta, gap=gap, revert=revert,
                        max_passes=max_passes, keep=tree, what=f"round {r}")  # fmt: skip
        if tree:
            dw = self.tree_sum("dw", r)
        else:
            dw = sum(_worker.unpack(x["dw"]) for x in res.values())
        return {
            "dw": dw,
            "passes": max(x["passes"] for x in res.values()),
            "seconds": max(x["seconds"] for x in res.values()),
            "bytes_sent": _worker.packed_nbytes(gp) * len(res),
            "bytes_received": sum(
                _worker.packed_nbytes(x["dw"]) for x in res.values() if "dw" in x
            ),  # fmt: skip
        }


class Fit:
    """The rounds of one fit: corrected CoCoA+ steps, exact measurement, accept or revert.

    Round: every part runs passes on its subproblem from the view ``w + theta (s_k r_k - g)``
    (``_worker.Part.step``) and ``w`` moves by the sum of their ``A_k dalpha`` (so ``w =
    w(alpha)`` holds exactly); then every part measures the new point (``Part.measure``): the
    exact duality gap and the gradient for the next round. A round whose exact gap is not below
    the last accepted one is rejected: the next round starts again from the accepted point
    (the parts saved it) with ``theta`` divided by 4; accepted rounds double ``theta`` up to 1.
    ``theta = 0`` (plain CoCoA+, reached when ``theta`` falls below ``THETA_MIN``) is always
    accepted, since its steps alone converge, and so are the rounds of a single part.
    """

    def __init__(self, rd: _Round, base: Problem, *, checkpoint_every: int, max_passes: int,
                 warm_w: np.ndarray | None = None, correction: bool = True):  # fmt: skip
        self.rd, self.base, self.warm_w = rd, base, warm_w
        self.checkpoint_every = max(1, int(checkpoint_every))
        self.max_passes = int(max_passes)
        self.correction = bool(correction)
        self.theta = 1.0 if correction else 0.0
        self.revert = False
        self.w = self.acc = None
        self.ckpt: dict[int, np.ndarray] = {}
        self.ckpt_round = 0
        self.rounds = 0

    def begin(self) -> None:
        """Start the parts (from the checkpoint if there is one, else from ``warm_w`` or
        zeros) and measure the starting point."""
        alpha = self.ckpt or None
        w, ckpt = self.rd.start(self.base, epoch=self.rounds, alpha=alpha,
                                warm_w=None if alpha else self.warm_w)  # fmt: skip
        if alpha is None:
            self.ckpt, self.ckpt_round = ckpt, self.rounds
        self.w = w
        self.acc = self.rd.measure(w, r=self.rounds, checkpoint=False)
        self.revert = False

    @property
    def converged(self) -> bool:
        return self.acc["rel_gap"] <= self.base.tol

    def round(self) -> dict:
        t0 = time.perf_counter()
        r = self.rounds + 1
        theta = self.theta
        st = self.rd.step(self.acc["g"], r=r, theta=theta, gap=self.acc["gap"],
                          revert=self.revert, max_passes=self.max_passes)  # fmt: skip
        w = self.w + st["dw"]
        due = r - self.ckpt_round >= self.checkpoint_every
        m = self.rd.measure(w, r=r, checkpoint=due)
        self.rounds = r
        # One part has no correction (s = 1, r = g): its rounds are the engine's, never undone.
        alone = len(self.rd.actors) == 1
        accepted = bool(theta == 0.0 or alone or m["gap"] <= self.acc["gap"])
        if accepted:
            self.w, self.acc, self.revert = w, m, False
            if "alpha" in m:
                self.ckpt, self.ckpt_round = m.pop("alpha"), r
            if self.correction:
                self.theta = min(1.0, 2.0 * theta) if theta else THETA_MIN
        else:
            self.revert = True
            self.theta = theta / 4.0 if theta / 4.0 >= THETA_MIN else 0.0
        return {  # plain Python types: the history goes into model files as JSON
            "epoch": int(r),
            "primal": float(m["primal"]),
            "dual": float(m["dual"]),
            "gap": float(m["gap"]),
            "rel_gap": float(m["rel_gap"]),
            "exact": True,
            "accepted": bool(accepted),
            "theta": float(theta),
            "passes": int(st["passes"]),
            "seconds": time.perf_counter() - t0,
            "worker_seconds": float(st["seconds"] + m["seconds"]),
            "n_workers": len(self.rd.actors),
            "bytes_sent": int(st["bytes_sent"] + m["bytes_sent"]),
            "bytes_received": int(st["bytes_received"] + m["bytes_received"]),
        }

    def recover(self, lost: WorkerLost) -> str:
        """Re-place the lost shares on the survivors and roll every part back to the
        checkpoint; return the event's description."""
        rd = self.rd
        gone = set(lost.addresses)
        for _ in range(len(rd.assign) + 1):
            alive = alive_workers(rd.client, rd.timeout)
            survivors = [a for a in rd.assign if a in alive and a not in gone]
            if not survivors:
                raise RuntimeError(
                    f"every worker holding this fit was lost ({lost}); nothing left to resume "
                    "on. Check the workers' memory limits and logs, then fit again."
                )
            assign = balance(rd.inp.sizes, survivors,
                             start={a: rd.assign[a] for a in survivors})  # fmt: skip
            try:
                rd.create(assign)
                self.begin()
                return (f"lost {', '.join(lost.addresses)}; resumed from round "
                        f"{self.ckpt_round}")  # fmt: skip
            except WorkerLost as again:
                gone |= set(again.addresses)
        raise RuntimeError(f"workers kept failing while recovering from {lost}")


def _create_first(rd: _Round, inp, threads: dict[str, int]) -> dict[str, dict]:
    """The first generation of parts; a worker lost while loading is left out (bounded)."""
    gone: set[str] = set()
    for _ in range(len(threads)):
        alive = {a: t for a, t in threads.items() if a not in gone}
        try:
            return rd.create(inp.place(alive))
        except WorkerLost as lost:
            gone |= set(lost.addresses)
            alive_now = alive_workers(rd.client, rd.timeout)
            gone |= {a for a in threads if a not in alive_now}
    raise RuntimeError(f"workers {', '.join(sorted(gone))} were lost while loading the data")


def _check_gpus(client, workers: list[str], timeout: float) -> None:
    """``device="gpu"``: every worker must see a GPU; the error names those that do not."""
    futs = {a: client.submit(_worker.has_gpu, workers=[a], allow_other_workers=False, pure=False)
            for a in workers}  # fmt: skip
    try:
        has = wait_all(client, futs, timeout=timeout, what="looking for GPUs")
    finally:
        for f in futs.values():
            f.release()
    missing = [a for a in workers if not has[a]]
    if missing:
        raise ResourceError(
            f"device='gpu' but worker(s) {', '.join(missing)} have no usable GPU (numba.cuda "
            "finds none there); use device='cpu' or 'auto', or start the workers on GPU "
            "machines (e.g. dask_cuda.LocalCUDACluster)."
        )


def train(
    client,
    inp,
    problem: Problem,
    *,
    class_weights: Callable[[tuple], tuple[float, float]] | None,
    units: dict | None = None,
    timeout: float = 600.0,
    checkpoint_every: int = 1,
    tree_above: int = 16,
    warm_w: np.ndarray | None = None,
    on_round: Callable[[dict, np.ndarray], object] | None = None,
    memory_budget=None,
    chunk_rows: int | None = None,
    max_passes: int = 10,
    correction: bool = True,
) -> DaskFit:
    """Run rounds over the cluster until the exact relative gap is at most ``tol``.

    ``problem`` carries everything but the class bounds (``class_weights((n_neg, n_pos))``
    gives ``(c_neg, c_pos)`` once the workers have counted their labels; None for real targets,
    whose bounds ``problem`` carries) and sigma'. ``units``
    are the estimator's ``device``, ``n_jobs`` (None: each worker's own thread count) and
    ``device_ids``, resolved on each worker; ``memory_budget`` and ``chunk_rows`` apply to each
    worker's share; ``max_passes`` bounds the engine passes of one part in one round;
    ``correction=False`` runs plain CoCoA+ rounds (``theta = 0``, one engine pass each: for
    comparisons). ``on_round(record, w)`` follows every round (``w`` read-only); True stops.
    """
    from snapfit.errors import DataError

    units = dict(units or {"device": "cpu"})
    options = {"units": units, "memory_budget": memory_budget, "chunk_rows": chunk_rows,
               "width": problem.n_classes}  # fmt: skip
    rd = _Round(client, inp, timeout=timeout, tree_above=tree_above, part_options=options)
    try:
        threads = alive_workers(client, timeout)
        if not threads:
            raise RuntimeError("the Dask cluster has no workers; start some or pass workers=N.")
        if units.get("device") == "gpu":
            _check_gpus(client, sorted(threads), timeout)
        infos = _create_first(rd, inp, threads)
        n_neg = sum(i["label_counts"][0] for i in infos.values())
        n_pos = sum(i["label_counts"][1] for i in infos.values())
        base = problem
        if class_weights is not None:
            if not (n_neg and n_pos):
                raise DataError(
                    f"{inp.name}: every label is {'positive' if n_pos else 'negative'} "
                    f"({n_neg + n_pos} rows); training needs both classes."
                )
            c_neg, c_pos = class_weights((n_neg, n_pos))
            base = replace(problem, c_pos=float(c_pos), c_neg=float(c_neg))
        if not correction:
            max_passes = 1
        fit = Fit(rd, base, checkpoint_every=checkpoint_every, max_passes=max_passes,
                  warm_w=warm_w, correction=correction)  # fmt: skip
        history: list[dict] = []
        event = None
        while True:
            try:
                if fit.acc is None:
                    fit.begin()
                if fit.converged or fit.rounds >= base.max_iter:
                    break
                rec = fit.round()
            except WorkerLost as lost:
                event = fit.recover(lost)
                continue
            rec["event"], event = event, None
            history.append(rec)
            if on_round is not None and bool(on_round(rec, fit.w)):
                break
        alpha = None
        if fit.ckpt_round == fit.rounds and fit.ckpt:
            alpha = np.concatenate([fit.ckpt[k] for k in sorted(fit.ckpt)])
        return DaskFit(fit.w, fit.rounds, fit.converged, history, rd.parts_log, (n_neg, n_pos),
                       alpha)  # fmt: skip
    finally:
        rd.close()
