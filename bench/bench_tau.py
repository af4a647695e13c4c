"""Epochs to target vs rows in flight (tau), safe step vs plain vs hybrid, on the emulator.

    python bench/bench_tau.py [--rows 2048] [--c 0.01,0.1] [--taus 1,8,64,512,1024,16384]
                              [--rules eso,cocoa,plain,hybrid] [--sparse-only] [--out FILE.json]
                              [--hot-steps 128] [--p P] [--line on|keep] [--dual on|keep]

Each cell runs ``snapfit.solvers.emulate.run``: epochs of waves of ``tau`` rows that read one
``w`` (the kernel with one block of ``tau`` teams) from ``alpha = 0`` until the relative duality
gap is at most ``--tol``, on Criteo-like rows (13 dense integer fields, 26 hashed categoricals,
an intercept). ``--sparse-only`` drops the integer fields and the intercept, to show what the
dense columns cost. ``tau`` above the rows is capped at the rows, as the kernel caps it.
``hybrid`` is ``snapfit.solvers.hybrid.run``: hot columns out of the rows' steps, the ``alag``
hot step between segments (``--hot-steps`` per epoch, ``--p``: the hot share, default
``hybrid.hot_share(tau)``), ``--line``/``--dual``: ``hybrid_certify`` at the exact checks.
Reported per cell: epochs, whether the target was met, the epochs to a relative gap of 1e-4
and until the primal is within 1e-4 / 1e-6 of the optimum (the plain step, one row at a time,
run to a gap of 1e-11; its own row is "sequential"), the final primal's distance from it, the
epochs whose dual fell below the previous one's, the largest gap over its running minimum after
epoch 3, and seconds. Then the modeled GPU epoch at Criteo-day scale
(``gpu_epoch_model``; docs/gpu-performance-model.md).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from snapfit.datasets.criteo_like import make_criteo_like
from snapfit.solvers import cpu, emulate, hybrid

# Nominal device figures for the model (vendor data sheets; links as achieved in Snap ML's
# V100 runs where measured: 11.8 GB/s PCIe Gen3, 68.1 GB/s NVLink 2).
DEVICES = {
    "V100": {"hbm": 0.9e12, "clock": 1.53e9, "links": {"PCIe Gen3": 11.8e9, "NVLink 2": 68.1e9}},
    "H100": {
        "hbm": 3.35e12,
        "clock": 1.98e9,
        "links": {"PCIe Gen5": 0.8 * 64e9, "NVLink-C2C (GH200)": 0.8 * 450e9},
    },
}


def criteo_args(rows: int, hash_bits: int, sparse_only: bool, intercept: bool = True):
    """Kernel arguments, row norms and the intercept's feature value of a Criteo-like set
    (``bench.sets``' ``criteo-like`` rows at ``hash_bits=20``)."""
    X, y = make_criteo_like(rows, seed=0, hash_bits=hash_bits)
    bias = 1.0 if intercept else 0.0
    if sparse_only:
        X = X.tocsr()
        X = X[:, 13:]  # the 13 integer fields are columns 0..12; the intercept goes too
        bias = 0.0
    indptr, indices = X.indptr.astype(np.int64), X.indices.astype(np.int32)
    values = X.data.astype(np.float32)
    labels = np.where(y > 0, 1.0, -1.0).astype(np.float32)
    sq = np.zeros(rows, np.float32)
    cpu.row_sqnorms(indptr, indices, values, True, sq)
    args = (indptr, indices, values, True, labels, cpu.EMPTY_F32, False)
    return args, sq, X.shape[1], bias


def sweep(
    rows, hash_bits, cs, taus, rules, tol, max_epochs, sparse_only, hybrid_kw=None, eso_epochs=None,
    intercept=True,
):  # fmt: skip
    args, sq, d, bias = criteo_args(rows, hash_bits, sparse_only, intercept)
    cells = []
    for c in cs:
        t0 = time.perf_counter()
        opt = emulate.run(args, sq, d, c, c, bias, 1, "plain", tol=1e-11, max_epochs=100_000)
        cells.append(_cell(c, "sequential", 1, rows, opt, opt.primal, tol, t0))
        print(_row(cells[-1]), flush=True)
        for rule in rules:
            for tau in taus:
                if rule != "hybrid" and tau == 1:
                    continue  # every other rule is the sequential step with one row in flight
                t0 = time.perf_counter()
                cap = max_epochs if rule != "plain" else min(max_epochs, 200)
                if rule in ("eso", "cocoa", "bound") and tau > 1 and eso_epochs:
                    cap = min(cap, eso_epochs)
                if rule == "hybrid":
                    r = hybrid.run(
                        args, sq, d, c, c, bias, tau, tol=tol, max_epochs=cap, **(hybrid_kw or {})
                    )
                else:
                    r = emulate.run(args, sq, d, c, c, bias, tau, rule, tol=tol, max_epochs=cap)
                cells.append(_cell(c, rule, tau, rows, r, opt.primal, tol, t0))
                print(_row(cells[-1]), flush=True)
    return cells


def _cell(c, rule, tau, rows, r, optimum, tol, t0):
    cell = {
        "C": c,
        "rule": rule,
        "tau": tau,
        "tau_eff": min(tau, rows),
        "epochs": r.epochs_to(tol) if r.converged else r.epochs,
        "converged": r.converged,
        "epochs_gap_1e-4": r.epochs_to(1e-4),
        "epochs_primal_1e-4": r.epochs_to(1e-4, optimum),
        "epochs_primal_1e-6": r.epochs_to(1e-6, optimum),
        "rel_primal": (r.primal - optimum) / abs(optimum),
        "dual_drops": r.dual_drops(),
        "seconds": time.perf_counter() - t0,
    }
    if isinstance(r, hybrid.Trace):
        cell.update(
            n_hot=r.n_hot,
            segments=r.segments,
            rebound=r.worst_rebound(),
            identity=max(r.identity),
            hot_share=r.hot[-1] / max(r.gaps[-1], 1e-300),
        )
    return cell


def _row(c) -> str:
    def e(k):
        return "-" if c[k] is None else str(c[k])

    extra = f" {c['n_hot']} / {c['segments']} / {c['rebound']:.2g}" if "n_hot" in c else " -"
    return (
        f"| {c['C']:g} | {c['rule']} | {c['tau']} ({c['tau_eff']}) | {e('epochs_gap_1e-4')} | "
        f"{c['epochs']} | {'yes' if c['converged'] else 'no'} | {e('epochs_primal_1e-4')} / "
        f"{e('epochs_primal_1e-6')} | {c['rel_primal']:.1e} | {c['dual_drops']} |{extra} |"
    )


def gpu_epoch_model(rows=200e6, nnz=40, tau=None, device="H100"):
    """Seconds of one epoch at Criteo-day scale: the link (a streamed epoch moves every row up
    and its alpha down) vs the kernel's device-memory traffic and its same-address atomics
    (every row adds into the 13 integer columns and the intercept, and counts them: those
    adds serialize, about one per clock per address)."""
    dev = DEVICES[device]
    up = 8 * nnz + 8 + 4 + 4 + 8 + 4  # indices+values, indptr, y, sqnorm, alpha, order
    link = {name: rows * (up + 8) / rate for name, rate in dev["links"].items()}
    device_bytes = rows * (up + 8 * nnz + 4 * nnz + 4 * nnz)  # row, w gathers, counts x2
    hbm = device_bytes / dev["hbm"]
    atomics = 2 * rows / dev["clock"]  # a float add and a count per row on each hot column
    return {"link": link, "hbm": hbm, "hot_atomics": atomics, "kernel": max(hbm, atomics)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--hash-bits", type=int, default=14)
    ap.add_argument("--c", default="0.01,0.1")
    ap.add_argument("--taus", default="1,8,64,512,1024,16384")
    ap.add_argument("--rules", default="eso,cocoa,plain")
    ap.add_argument("--hot-steps", type=int, default=hybrid.HOT_STEPS)
    ap.add_argument("--p", type=float, default=None, help="hot share (default 10/tau)")
    ap.add_argument("--line", choices=["off", "on", "keep"], default="off")
    ap.add_argument("--dual", choices=["off", "on", "keep"], default="on")
    ap.add_argument("--tol", type=float, default=5e-7)
    ap.add_argument("--max-epochs", type=int, default=50_000)
    ap.add_argument("--sparse-only", action="store_true")
    ap.add_argument("--eso-epochs", type=int, help="cap on the safe rules' epochs at tau > 1")
    ap.add_argument("--cap", type=int, default=hybrid.HOT_CAP, help="hot columns at most")
    ap.add_argument("--m-rows", type=int, help="hybrid: M from this many rows (default all)")
    ap.add_argument("--no-intercept", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    print(
        "| C | rule | tau (capped) | epochs to gap 1e-4 | epochs to tol | met tol | "
        "epochs to P* +1e-4 / +1e-6 | (P - P*)/P* | dual drops | hybrid: H / segments / "
        "gap over its running min |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    flag = {"off": False, "on": True, "keep": "keep"}
    hybrid_kw = {"hot_steps": a.hot_steps, "p": a.p, "line": flag[a.line], "dual": flag[a.dual],
                 "cap": a.cap, "m_rows": a.m_rows}  # fmt: skip
    cells = sweep(
        a.rows,
        a.hash_bits,
        [float(c) for c in a.c.split(",")],
        [int(t) for t in a.taus.split(",")],
        a.rules.split(","),
        a.tol,
        a.max_epochs,
        a.sparse_only,
        hybrid_kw,
        a.eso_epochs,
        not a.no_intercept,
    )
    model = {dev: gpu_epoch_model(device=dev) for dev in DEVICES}
    for dev, m in model.items():
        links = ", ".join(f"{k} {v:.2f} s" for k, v in m["link"].items())
        print(
            f"{dev}: link {links}; kernel {m['kernel'] * 1e3:.0f} ms "
            f"(HBM {m['hbm'] * 1e3:.0f} ms, hot atomics {m['hot_atomics'] * 1e3:.0f} ms)"
        )
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"args": vars(a), "cells": cells, "model": model}, f, indent=1)


if __name__ == "__main__":
    main()
