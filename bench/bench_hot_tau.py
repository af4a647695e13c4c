"""The trainer with a GPU unit of ``tau`` rows in flight, emulated on the CPU: today's safe step
against the hot block (``hot_columns=True``), epochs to an exact relative gap of 1e-4.

    python -m bench.bench_hot_tau [--kind criteo-like] [--rows 200000] [--C 0.1[,1,...]]
        [--taus 1,256,1024,4096] [--rules today,hot] [--max-epochs 150] [--no-intercept]
        [--tol 1e-4] [--trace] [--json OUT]

``--trace`` (issue 32's grid: ``--C 0.01,0.1,1 --taus 1,64,256,1024,4096 --tol 1e-6 --trace``)
computes the exact relative gap after every epoch (``Trainer.exact_objective``, whose pass also
rebuilds ``v_H`` exactly: the iterates move by rounding only; the dual the best so far, as the
trainer's checks take it, ``HotBlock.best_dual``) and reports the first epoch
below 1e-4 by that gap, the largest ratio of the gap to its running minimum after epoch 3 (over
all epochs, and over those whose hot step was not accelerated: the only ones the trainer
checks), and ``(P - P*) / P*`` at the end, ``P*`` from one CPU thread at a relative gap of 1e-10.

Why: the simulator runs 4 rows in flight and no GPU is at hand, so a GPU's epochs at its real
concurrency come from the emulator (``snapfit.solvers.emulate``: waves of ``tau`` rows that all
read ``w`` as it was at the wave's start, their updates added after it). Here the emulator is a
unit of the real trainer (``EmulatedGpu``, given to ``Trainer`` as its GPU unit), so the
epochs are the trainer's own: its plan, merge, hot step, estimated and exact gaps, stopping
rule. Today's rule is ``emulate.wave_pass`` with ``cd_pass``'s ESO curvature over all columns;
the hot block is ``hybrid.wave_pass`` (rows write cold columns, hot moves to the accumulator)
with ESO over the cold columns, ``gpu.cold_curvature``'s rule. Seconds are the emulator's, not
a GPU's: only the epochs mean something.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from bench.sets import fit_inputs, load_xy, make_set
from snapfit.engine.units import CpuUnit
from snapfit.solvers import cpu, emulate, hybrid

TARGET = 1e-4


class EmulatedGpu(CpuUnit):
    """A GPU unit of ``tau`` rows in flight on the CPU (one unit: ``sigma' = 1``)."""

    def __init__(self, device_id, source, problem, *, sigma=1.0, tau=1024):
        if sigma != 1.0:
            raise ValueError("the emulated GPU is the trainer's only unit")
        super().__init__(problem, sigma, np.zeros(problem.n_features + 1))
        self.tau = int(tau)
        self.prior_rate = 1.0
        self._curv: dict = {}
        self.hot_pos = None

    def set_hot(self, labels):  # the wave pass takes positions and a separate accumulator
        self.hot_pos = labels.hot_pos
        self.acc = np.zeros(max(labels.nh, 1))

    def hot_moves(self):
        return self.acc

    def begin(self, w, n_items, width=2):
        self.view[:] = w
        if self.hot_pos is not None:
            self.acc[:] = 0.0

    def run(self, item, chunk, alpha, sqnorm, rows, layout):
        p, d = self.p, self.p.n_features
        args = cpu.chunk_args(chunk)
        key = (item.k, len(rows))  # the pass's rows are the chunk's: the same set every epoch
        if key not in self._curv:
            if self.hot_pos is None:
                curv = emulate.curvature("eso", *args[:4], sqnorm, rows, p.bias, self.tau, d)
            else:
                cold, _ = hybrid.split(*args[:4], self.hot_pos, p.bias)
                cold_sq = np.zeros(chunk.n_rows, np.float32)
                cpu.row_sqnorms(*cold, args[3], cold_sq)
                bias = p.bias if self.hot_pos[d] < 0 else 0.0
                curv = emulate.curvature("eso", *cold, args[3], cold_sq, rows, bias, self.tau, d)
            self._curv[key] = curv
        curv = self._curv[key]
        if self.hot_pos is None:
            result = emulate.wave_pass(*args, p.c_pos, p.c_neg, p.bias, curv, alpha, self.view,
                                       rows, 1.0, self.tau, -1)  # fmt: skip
        else:
            result = hybrid.wave_pass(*args, p.c_pos, p.c_neg, p.bias, curv, alpha, self.view,
                                      self.hot_pos, self.acc, rows, self.tau, -1)  # fmt: skip
        return [(item, result)]


def one(X, y, C, bias, tau, hot, max_epochs, tol=TARGET, trace=False) -> dict:
    from snapfit.engine import Devices
    from snapfit.engine.loop import run_epochs
    from snapfit.engine.trainer import Trainer

    source, problem = fit_inputs(X, y, C, bias, tol=tol, max_iter=max_epochs, hot_columns=hot)

    def unit(i, src, prob, sigma=1.0):
        return EmulatedGpu(i, src, prob, sigma=sigma, tau=tau)

    t0 = time.perf_counter()
    tr = Trainer(source, problem, source.make_state(), Devices(n_cpu=0, gpu_ids=(0,)), unit)
    gaps: list[float] = []
    estimates: list[float] = []
    accelerated: list[bool] = []
    duals: list[float] = []

    def exact(rec, w):
        estimates.append(float(rec.rel_gap))  # the trainer's own (exact where it checked)
        accelerated.append(tr.hot is not None and tr.hot.accelerated)
        bound = tr.hot.dual_bound if tr.hot is not None else None
        primal, dual, _ = tr.exact_objective()
        if tr.hot is not None:  # the trace's checks are not the trainer's: keep them apart
            tr.hot.dual_bound = bound
        duals.append(dual)
        gaps.append((primal - max(duals)) / abs(primal))

    try:
        res = run_epochs(tr, problem, keep_alpha=False, callbacks=[exact] if trace else ())
    finally:
        tr.close()
    out = {"epochs": int(res.n_iter), "converged": bool(res.converged),
           "rel_gap": float(res.history[-1].rel_gap), "seconds": time.perf_counter() - t0,
           "hot_columns": int(tr.hot.nh) if tr.hot is not None else 0,
           "primal": float(res.history[-1].primal),
           "duals": [float(r.dual) for r in res.history if r.exact]}  # fmt: skip
    if trace:
        g = np.array(gaps)
        below = np.flatnonzero(g <= TARGET)
        out["exact_gaps"] = gaps
        out["estimates"] = estimates
        out["epochs_to_1e-4"] = int(below[0]) + 1 if len(below) else None
        over = g / np.minimum.accumulate(g)
        plain = ~np.array(accelerated)  # the epochs the trainer may check (a plain hot step)
        out["accelerated"] = accelerated
        out["worst_over_min"] = float(np.max(over[3:], initial=1.0))
        out["worst_over_min_plain"] = float(np.max(over[3:][plain[3:]], initial=1.0))
    return out


def optimum(X, y, C, bias) -> float:
    """``P*``: one CPU thread, today's rule, to a relative gap of 1e-10."""
    from snapfit.engine import Devices
    from snapfit.train import train

    source, problem = fit_inputs(X, y, C, bias, tol=1e-10, max_iter=5000)
    res = train(source, problem, devices=Devices(n_cpu=1), keep_alpha=False)
    return float(res.history[-1].primal)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", default="criteo-like")
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--C", default="0.1")
    ap.add_argument("--taus", default="1,256,1024,4096")
    ap.add_argument("--rules", default="today,hot")
    ap.add_argument("--max-epochs", type=int, default=150)
    ap.add_argument("--no-intercept", action="store_true")
    ap.add_argument("--tol", type=float, default=TARGET)
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    X, y = load_xy(f"{make_set(a.kind, a.rows)}/train.npz")
    bias = 0.0 if a.no_intercept else 1.0
    out = []
    extra = " epochs to exact 1e-4 | worst gap / running min (all; plain steps) | (P - P*) / P* |"
    print(f"| C | rule | tau | epochs to tol {a.tol:g} | reached | final relative gap | hot "
          f"columns |{extra if a.trace else ''}")  # fmt: skip
    print("|---|---|---|---|---|---|---|" + ("---|---|---|" if a.trace else ""))
    for C in [float(c) for c in a.C.split(",")]:
        p_star = optimum(X, y, C, bias) if a.trace else None
        for tau in [int(t) for t in a.taus.split(",")]:
            for hot in [r == "hot" for r in a.rules.split(",")]:
                r = one(X, y, C, bias, tau, hot, a.max_epochs, a.tol, a.trace)
                r.update(C=C, tau=tau, rule="hot block" if hot else "today (ESO)")
                line = (f"| {C:g} | {r['rule']} | {tau} | {r['epochs']} | "
                        f"{'yes' if r['converged'] else 'no'} | {r['rel_gap']:.1e} | "
                        f"{r['hot_columns']} |")  # fmt: skip
                if a.trace:
                    r["p_star"] = p_star
                    r["primal_excess"] = (r["primal"] - p_star) / p_star
                    line += (f" {r['epochs_to_1e-4']} | {r['worst_over_min']:.2f}; "
                             f"{r['worst_over_min_plain']:.2f} | "
                             f"{r['primal_excess']:.1e} |")  # fmt: skip
                out.append(r)
                print(line, flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
