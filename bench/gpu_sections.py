"""The measuring sections of ``python -m bench gpu`` (``bench/gpu_check.py``), one per process.

    python -X faulthandler -m bench.gpu_sections SECTION --out FILE --cap SECONDS --rows N [--smoke]

Each section writes its results to ``FILE`` (JSON) after every step, so a section stopped by
its time limit still leaves what it measured; it watches its own clock and measures less
(fewer configurations, repetitions or epochs) when time runs short, saying so in
``degraded``. Nothing here imports Dask. Sections:

- ``env``: versions, driver, the device as snapfit describes it, ``snapfit info --device``;
- ``kernel``: ``cd_pass`` on one resident chunk: rows/s, nnz/s and modelled bandwidth for
  several teams and grid sizes;
- ``link``: host->device copies (pinned and pageable) and a fit streamed through the slots
  against the same fit with every chunk resident;
- ``convergence``: epochs to a relative gap of ``TOL`` at the default launch and at 4x its rows
  in flight, against ``snapfit.solvers.emulate`` at the same ``tau`` on the same rows;
- ``product``: time to ``TOL`` for the GPU alone, GPU + CPU residue and CPU threads alone, in
  memory and out of core from Parquet under a host budget below the data.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

#: The target of sections 4 and 5 (relative duality gap; the estimator's default tol).
TOL = 1e-4
#: The benches' C (bench/run.py), so the numbers compare with bench/results.
C = 0.1
BIAS = 1.0
HASH_BITS = 20
CFG = {"bits": HASH_BITS}  # --bits: fewer features on tiny data (the smoke run)
SEED = 7


class Out:
    """A section's results, written to ``path`` (atomically) on every ``save``."""

    def __init__(self, path: str, cap: float, smoke: bool):
        self.path = path
        self.t0 = time.perf_counter()
        self.deadline = self.t0 + 0.9 * cap - 2.0  # margin for writing and exiting
        self.data: dict = {"degraded": [], "smoke": smoke, "complete": False}

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def degrade(self, why: str) -> None:
        print("degraded:", why, flush=True)
        self.data["degraded"].append(why)

    def save(self) -> None:
        self.data["seconds"] = time.perf_counter() - self.t0
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f, indent=1, default=_plain)
        os.replace(tmp, self.path)


def _plain(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def simulated() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def make_data(rows: int, seed: int = SEED):
    """Criteo-like rows (``make_criteo_like``'s, made by more threads): CSR arrays and labels."""
    import scipy.sparse as sp

    from snapfit.datasets.criteo_hash import rows_to_csr
    from snapfit.datasets.criteo_like import iter_blocks

    ips, idx, val, lab, total = [np.zeros(1, np.int64)], [], [], [], 0
    workers = max(2, min(8, os.cpu_count() or 2))
    for labels, ints, ip, tok, cp in iter_blocks(rows, seed, workers=workers):
        indptr, i, v = rows_to_csr(ints, ip, tok, cp, CFG["bits"])
        ips.append(indptr[1:] + total)
        total += int(indptr[-1])
        idx.append(i)
        val.append(v)
        lab.append(labels)
    X = sp.csr_matrix((np.concatenate(val), np.concatenate(idx), np.concatenate(ips)),
                      shape=(rows, 1 << CFG["bits"]))  # fmt: skip
    y01 = np.concatenate(lab)
    return X, y01


def host_args(X, y01):
    """``cpu.chunk_args``-style tuple of one chunk, and the rows' squared norms."""
    from snapfit.solvers import cpu

    y = np.where(y01 > 0, 1.0, -1.0).astype(np.float32)
    args = (X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data.astype(np.float32),
            True, y, cpu.EMPTY_F32, False)  # fmt: skip
    sq = np.zeros(X.shape[0], np.float32)
    cpu.row_sqnorms(args[0], args[1], args[2], True, sq)
    return args, sq


class DeviceChunk:
    """One chunk on the device with the arrays ``cd_pass`` reads and writes."""

    def __init__(self, args, sq, d):
        from numba import cuda

        self.n = len(args[4])
        self.d = d
        self.args = tuple(cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in args)
        self.sq = cuda.to_device(sq)
        self.alpha = cuda.to_device(np.zeros(self.n))
        self.w = cuda.to_device(np.zeros(d + 1))
        self.counts = cuda.to_device(np.zeros(d, np.int32))
        self.result = cuda.to_device(np.zeros(2))
        self.zero2 = np.zeros(2)

    def reset(self):
        self.alpha.copy_to_device(np.zeros(self.n))
        self.w.copy_to_device(np.zeros(self.d + 1))

    def upload_rows(self, rows):
        from numba import cuda

        self.rows = cuda.to_device(rows.astype(np.int32))

    def run_pass(self, lp):
        """One pass over ``self.rows`` with launch ``lp`` (as ``GpuUnit.run`` launches it)."""
        from numba.cuda.cudadrv.driver import device_memset

        from snapfit.solvers import gpu as K

        a = self.args
        self.result.copy_to_device(self.zero2)
        if lp.rows_in_flight > 1:
            device_memset(self.counts, 0, self.counts.nbytes)
            K.column_counts[lp.blocks, lp.block](a[0], a[1], self.rows, lp.team, self.counts)
        K.cd_pass[lp.blocks, lp.block](*a, C, C, BIAS, self.sq, self.counts, self.alpha, self.w,
                                       self.rows, 1.0, lp.team, self.result, 0)  # fmt: skip


def sync():
    from numba import cuda

    cuda.synchronize()


def launch_dict(lp) -> dict:
    return {"blocks": lp.blocks, "block": lp.block, "team": lp.team,
            "rows_in_flight": lp.rows_in_flight}  # fmt: skip


# -- env ----------------------------------------------------------------------------------------
def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "missing"


def _run(cmd, timeout) -> dict:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"rc": None, "output": f"{type(e).__name__}: {e}"}
    return {"rc": p.returncode, "output": (p.stdout + p.stderr)[-4000:]}


def section_env(out: Out, rows: int) -> None:
    import platform

    env = out.data
    env["python"] = platform.python_version()
    env["platform"] = platform.platform()
    env["cores"] = os.cpu_count()
    env["versions"] = {k: _version(k) for k in ("numpy", "scipy", "numba", "numba-cuda",
                                                "cupy-cuda13x", "cupy-cuda12x", "cupy",
                                                "pyarrow", "scikit-learn", "pytest",
                                                "pytest-timeout")}  # fmt: skip
    try:
        import cupy

        env["cupy"] = {"version": cupy.__version__,
                       "runtime": cupy.cuda.runtime.runtimeGetVersion(),
                       "driver": cupy.cuda.runtime.driverGetVersion()}  # fmt: skip
    except Exception as e:  # absent, or no device (the simulator)
        env["cupy"] = {"version": None, "error": f"{type(e).__name__}: {e}"}
    smi = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                "--format=csv,noheader"], 20)  # fmt: skip
    env["nvidia_smi"] = smi["output"].strip()
    first = smi["output"].splitlines()[0].split(",") if smi["rc"] == 0 else []
    env["device_name"] = first[0].strip() if first else None
    env["driver"] = first[1].strip() if len(first) > 1 else None
    out.save()
    try:
        from numba.cuda.cudadrv.driver import driver

        env["cuda_driver_api"] = ".".join(map(str, driver.get_version()))
    except Exception as e:
        env["cuda_driver_api"] = f"unavailable ({type(e).__name__})"
    from snapfit.gpu.launch import describe_devices

    env["describe_devices"] = describe_devices()
    gpus = env["describe_devices"]["gpus"]
    if gpus:
        env["device_name"] = env["device_name"] or gpus[0]["name"]
        env["backend"] = gpus[0]["backend"]
    else:
        env["backend"] = None
    env["driver"] = env["driver"] or env["cuda_driver_api"]
    out.save()
    cli = [sys.executable, "-X", "faulthandler", "-c", "from snapfit.cli import main; main()",
           "info", "--device"]  # fmt: skip
    text = _run(cli, max(5.0, out.left() / 2))
    env["info_device"] = {"rc": text["rc"], "text": text["output"]}
    js = _run([*cli, "--json"], max(5.0, out.left()))
    try:
        env["info_device"]["json"] = json.loads(js["output"])
    except ValueError:
        env["info_device"]["json"] = None
        env["info_device"]["json_output"] = js["output"]
    env["ok"] = text["rc"] == 0 and js["rc"] == 0


# -- kernel -------------------------------------------------------------------------------------
def pass_bytes(n: int, nnz: int) -> tuple[int, int]:
    """Modelled device bytes of one pass: the chunk's arrays read once and ``alpha`` written
    (``data``), and ``w``'s traffic: a gather per stored value and the intercept, an atomic
    add of the same, the column counts (``w``)."""
    data = 8 * (n + 1) + nnz * (4 + 4) + n * (4 + 4 + 4 + 16)
    w = (nnz + n) * (8 + 8) + nnz * (4 + 4)
    return data, w


def peak_bandwidth() -> float | None:
    """The device's nominal memory bandwidth (GB/s) from its clock and bus width, when the
    driver reports them."""
    try:
        from numba import cuda

        dev = cuda.get_current_device()
        khz = int(dev.MEMORY_CLOCK_RATE)
        bits = int(dev.GLOBAL_MEMORY_BUS_WIDTH)
    except Exception:
        return None
    return 2 * khz * 1e3 * bits / 8 / 1e9


def section_kernel(out: Out, rows: int) -> None:
    from snapfit.gpu.launch import choose_launch, device_props
    from snapfit.solvers import cpu

    res = out.data
    t = time.perf_counter()
    X, y01 = make_data(rows)
    args, sq = host_args(X, y01)
    d = X.shape[1]
    n, nnz = X.shape[0], X.nnz
    res["data"] = {"rows": n, "nnz": nnz, "n_features": d, "make_s": time.perf_counter() - t}
    dc = DeviceChunk(args, sq, d)
    rng = np.random.default_rng(0)
    order = rng.permutation(n)
    props = device_props(0)
    res["peak_gbps"] = peak_bandwidth()
    mean = nnz / n
    base = choose_launch(props, n, mean)
    res["default_launch"] = launch_dict(base)
    teams = (2, 4, 8) if props.simulated else (8, 16, 32, 64)
    if props.simulated:
        out.degrade(f"simulator: teams {teams} instead of (8, 16, 32, 64)")
    reps_wanted = 1 if props.simulated else 5
    n_configs = len(teams) + 3
    # compile on a few rows, then one pass over all rows at the default launch: the rate
    # decides how many rows each timed pass can visit in the time there is
    t = time.perf_counter()
    dc.upload_rows(order[: min(n, 4096)])
    dc.run_pass(choose_launch(props, min(n, 4096), mean))
    sync()
    res["compile_s"] = time.perf_counter() - t
    dc.upload_rows(order)
    t = time.perf_counter()
    dc.run_pass(base)
    sync()
    probe = time.perf_counter() - t
    res["probe"] = {"rows": n, "pass_s": probe, "rows_per_s": n / probe}
    per_pass = 0.8 * out.left() / (n_configs * (1 + reps_wanted))
    m = int(min(n, max(min(n, 20_000), n / probe * per_pass)))
    if m < n:
        out.degrade(
            f"time: each pass visits {m} of the {n} resident rows (all rows: "
            f"{probe:.2f} s a pass, {n_configs * (1 + reps_wanted)} passes to run)"
        )
        dc.upload_rows(order[:m])
    lengths = np.diff(X.indptr)
    nnz_m = int(lengths[order[:m]].sum())
    res["rows_per_pass"] = m
    res["nnz_per_pass"] = nnz_m
    base_m = choose_launch(props, m, mean)
    plan = [("team", t, choose_launch(props, m, mean, team=t)) for t in teams]
    plan += [("blocks", f"{f}x", choose_launch(props, m, mean, max_blocks=f * base_m.blocks))
             for f in (1, 2, 4)]  # fmt: skip
    data_b, w_b = pass_bytes(m, nnz_m)
    res["bytes_per_pass"] = {"data": data_b, "w": w_b}
    res["sweep"] = []
    out.save()
    for i, (kind, value, lp) in enumerate(plan):
        left_configs = len(plan) - i
        if out.left() <= 0:
            out.degrade(f"time: {kind}={value} and {left_configs - 1} more not measured")
            break
        dc.reset()
        t = time.perf_counter()
        dc.run_pass(lp)  # a warm pass, from alpha = 0
        sync()
        first = time.perf_counter() - t
        per_config = out.left() / left_configs
        reps = max(1, min(reps_wanted, int(per_config / max(first, 1e-4)) - 1))
        if reps < reps_wanted:
            out.degrade(f"time: {kind}={value} timed over {reps} pass(es), not {reps_wanted}")
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            dc.run_pass(lp)
            sync()
            times.append(time.perf_counter() - t)
        s = statistics.median(times)
        res["sweep"].append({
            "vary": kind, "value": value, **launch_dict(lp), "passes": reps, "first_pass_s": first,
            "pass_s": s, "rows_per_s": m / s, "nnz_per_s": nnz_m / s,
            "gbps_data": data_b / s / 1e9, "gbps_with_w": (data_b + w_b) / s / 1e9,
        })  # fmt: skip
        out.save()
    # the atomics kept w == w(alpha) through all those passes at many rows in flight
    w = dc.w.copy_to_host()
    wa = np.zeros(d + 1)
    cpu.accumulate_w(*args, C, C, BIAS, dc.alpha.copy_to_host(), wa)
    err = float(np.abs(w - wa).max())
    res["w_minus_w_alpha"] = err
    res["ok"] = bool(np.isfinite(w).all()) and err <= 1e-8 * max(1.0, float(np.abs(wa).max()))


# -- link ---------------------------------------------------------------------------------------
def _copy_rate(dst, src, reps: int, to_host: bool = False) -> float:
    """GB/s of ``reps`` synchronous copies between ``src`` and ``dst`` (after one warm copy)."""
    for r in range(reps + 1):
        if r == 1:
            sync()
            t = time.perf_counter()
        if to_host:
            src.copy_to_host(dst)
        else:
            dst.copy_to_device(src)
    sync()
    return reps * src.nbytes / (time.perf_counter() - t) / 1e9


def _fit(chunks, d, gpu_options: dict, epochs: int):
    from snapfit.engine import Devices, InMemorySource, Problem
    from snapfit.engine.loop import run_epochs
    from snapfit.train import make_trainer

    prob = Problem(n_features=d, c_pos=C, c_neg=C, bias=BIAS, tol=0.0, max_iter=epochs, seed=0)
    tr = make_trainer(InMemorySource(chunks, d), prob, Devices(0, (0,), gpu_options))
    try:
        t = time.perf_counter()
        r = run_epochs(tr, prob)
        wall = time.perf_counter() - t
        unit = tr.units[0]
        resident = sorted(unit.resident)
        stats = unit.stats.summary()
        backend = type(unit.backend).__name__
    finally:
        tr.close()
    secs = [h.seconds for h in r.history]
    return {"epochs": r.n_iter, "wall_s": wall, "epoch_s": secs,
            "epoch_s_median": statistics.median(secs[1:] if len(secs) > 1 else secs),
            "rel_gap": r.history[-1].rel_gap, "resident_chunks": resident, "host_stats": stats,
            "backend": backend}  # fmt: skip


def section_link(out: Out, rows: int) -> None:
    from numba import cuda

    from snapfit.gpu.data import chunk_device_bytes
    from snapfit.inputs import csr_chunks

    res = out.data
    sim = simulated()
    nbytes = (1 << 20) if sim else 256 << 20
    reps = 2 if sim else 10
    pinned = cuda.pinned_array(nbytes, np.uint8)
    pinned[:] = 1
    pageable = np.ones(nbytes, np.uint8)
    dev = cuda.device_array(nbytes, np.uint8)
    res["copy_bytes"] = nbytes
    res["h2d_pinned_gbps"] = _copy_rate(dev, pinned, reps)
    res["h2d_pageable_gbps"] = _copy_rate(dev, pageable, reps)
    res["d2h_pinned_gbps"] = _copy_rate(pinned, dev, reps, to_host=True)
    del dev
    out.save()
    t = time.perf_counter()
    X, y01 = make_data(rows)
    y = np.where(y01 > 0, 1.0, -1.0).astype(np.float32)
    n_chunks = 8
    chunks = csr_chunks(X, y, None, -(-rows // n_chunks))
    d = X.shape[1]
    sizes = [(c.n_rows, c.nnz) for c in chunks]
    per_chunk = [chunk_device_bytes(r, z, True, False) for r, z in sizes]
    slot = chunk_device_bytes(max(r for r, _ in sizes), max(z for _, z in sizes), True, False)
    fixed = 8 * (d + 1) + 4 * d
    budget = fixed + 2.5 * slot  # two slots and half a chunk: nothing stays resident
    res["data"] = {"rows": rows, "nnz": X.nnz, "chunks": len(chunks), "n_features": d,
                   "data_device_bytes": sum(per_chunk), "device_budget": budget,
                   "make_s": time.perf_counter() - t}  # fmt: skip
    out.save()
    epochs = 3 if sim else 6
    for name, opts in (("resident", {}), ("streamed", {"budget": budget})):
        if out.left() <= 0:
            out.degrade(f"time: the {name} fit did not run")
            break
        first = time.perf_counter()
        res[name] = _fit(chunks, d, opts, epochs)
        used = time.perf_counter() - first
        out.save()
        if name == "resident" and used > out.left() * 0.6 and epochs > 3:
            epochs = 3
            out.degrade("time: the streamed fit ran 3 epochs")
    if "streamed" not in res or "resident" not in res:
        res["ok"] = False
        return
    moved = sum(b for k, b in enumerate(per_chunk) if k not in res["streamed"]["resident_chunks"])
    copy_s = moved / (res["h2d_pinned_gbps"] * 1e9)
    kernel_s = res["resident"]["epoch_s_median"]
    streamed_s = res["streamed"]["epoch_s_median"]
    res["overlap"] = {
        "bytes_per_epoch": moved, "copy_s": copy_s, "kernel_s": kernel_s,
        "streamed_epoch_s": streamed_s, "bound_s": max(copy_s, kernel_s),
        # 1.0: the epoch takes only as long as the slower of copy and kernel (the copy hidden)
        "efficiency": max(copy_s, kernel_s) / streamed_s,
        # of the shorter of the two, the fraction that ran under the other
        "hidden_fraction": min(1.0, max(0.0, (copy_s + kernel_s - streamed_s)
                                        / max(min(copy_s, kernel_s), 1e-12))),
    }  # fmt: skip
    res["ok"] = True


# -- convergence --------------------------------------------------------------------------------
def _rel_gap(primal, dual):
    return (primal - dual) / abs(primal)


def _gpu_epochs(dc, args, lp, max_epochs, deadline, seed):
    from snapfit.solvers import cpu

    dc.reset()
    rng = np.random.default_rng(seed)
    duals, gaps, t0 = [], [], time.perf_counter()
    for _ in range(max_epochs):
        if time.perf_counter() > deadline:
            break
        dc.upload_rows(rng.permutation(dc.n))
        dc.run_pass(lp)
        sync()
        w = dc.w.copy_to_host()
        ent = dc.result.copy_to_host()[1]
        ww = float(w @ w)
        duals.append(-0.5 * ww - ent)
        if not np.isfinite(duals[-1]):
            break
        loss = cpu.chunk_objective(*args, C, C, BIAS, dc.alpha.copy_to_host(), w)[0]
        gaps.append(_rel_gap(0.5 * ww + loss, duals[-1]))
        if gaps[-1] <= TOL:
            break
    return _trajectory(duals, gaps, time.perf_counter() - t0)


def _emulated_epochs(args, sq, d, tau, max_epochs, deadline, seed):
    """``emulate.run`` (rule ``eso``), with a clock."""
    from snapfit.solvers import cpu, emulate

    n = len(args[4])
    rng = np.random.default_rng(seed)
    alpha, w = np.zeros(n), np.zeros(d + 1)
    curv = emulate.curvature("eso", *args[:4], sq, np.arange(n), BIAS, tau, d)
    duals, gaps, t0 = [], [], time.perf_counter()
    for epoch in range(max_epochs):
        if time.perf_counter() > deadline:
            break
        rows = rng.permutation(n)
        _, ent = emulate.wave_pass(*args, C, C, BIAS, curv, alpha, w, rows, 1.0, tau, epoch)
        ww = cpu.squared_norm(w)
        duals.append(-0.5 * ww - ent)
        if not np.isfinite(duals[-1]):
            break
        primal = 0.5 * ww + cpu.chunk_objective(*args, C, C, BIAS, alpha, w)[0]
        gaps.append(_rel_gap(primal, duals[-1]))
        if gaps[-1] <= TOL:
            break
    return _trajectory(duals, gaps, time.perf_counter() - t0)


def _hybrid_epochs(args, sq, d, lp, on_gpu, max_epochs, deadline):
    """``hybrid.run`` at ``lp``'s rows in flight: its passes on the GPU (``DevicePass``) or in
    the emulator; the certified gap each epoch. The default block: the columns held by more
    than 0.1 % of the rows, at most ``HOT_CAP`` (docs/gpu-performance-model.md)."""
    from functools import partial

    from snapfit.gpu.hybrid import DevicePass
    from snapfit.solvers import hybrid

    device = partial(DevicePass, launch=(lp.blocks, lp.block, lp.team)) if on_gpu else None
    t0 = time.perf_counter()
    run = hybrid.run(args, sq, d, C, C, BIAS, lp.rows_in_flight, tol=TOL,
                     max_epochs=max_epochs, seed=1, device=device, deadline=deadline)  # fmt: skip
    gaps = [g / abs(p) for g, p in zip(run.gaps, run.primals, strict=True)]
    r = _trajectory(run.duals, gaps, time.perf_counter() - t0)
    r.update({"n_hot": run.n_hot, "segments": run.segments})
    return r


def _trajectory(duals, gaps, seconds) -> dict:
    d = np.asarray(duals)
    drops = int(np.sum(d[1:] < d[:-1] - 1e-12 * np.abs(d[:-1]))) if len(d) > 1 else 0
    marks = sorted({i for i in (0, 4, 9, 19, 49, 99, len(gaps) - 1) if 0 <= i < len(gaps)})
    return {"epochs": len(gaps), "reached": bool(gaps) and gaps[-1] <= TOL,
            "rel_gap": gaps[-1] if gaps else None, "dual_drops": drops,
            "rel_gap_at": {str(i + 1): gaps[i] for i in marks}, "seconds": seconds,
            "finite": bool(np.isfinite(d).all())}  # fmt: skip


def section_convergence(out: Out, rows: int) -> None:
    from snapfit.gpu.launch import choose_launch, device_props

    res = out.data
    X, y01 = make_data(rows)
    args, sq = host_args(X, y01)
    d = X.shape[1]
    n = X.shape[0]
    dc = DeviceChunk(args, sq, d)
    props = device_props(0)
    base = choose_launch(props, n, X.nnz / n)
    big = choose_launch(props, n, X.nnz / n, max_blocks=4 * base.blocks)
    res["data"] = {"rows": n, "nnz": X.nnz, "n_features": d, "C": C, "tol": TOL}
    max_epochs = 60 if simulated() else 400
    res["max_epochs"] = max_epochs
    res["runs"] = []
    out.save()
    jobs = [(name, lp, who) for name, lp in (("default", base), ("4x rows in flight", big))
            for who in ("gpu", "emulator")]  # fmt: skip
    # Hot columns as a primal block (issue: rows in flight that share only sparse columns):
    # the hybrid on the GPU against its emulator at the larger launch's tau.
    jobs += [("4x rows in flight", big, who) for who in ("gpu hybrid", "emulator hybrid")]
    for i, (name, lp, who) in enumerate(jobs):
        deadline = time.perf_counter() + out.left() / (len(jobs) - i)
        if who == "gpu":
            r = _gpu_epochs(dc, args, lp, max_epochs, deadline, seed=i)
        elif who == "emulator":
            r = _emulated_epochs(args, sq, d, lp.rows_in_flight, max_epochs, deadline, seed=i)
        else:
            on_gpu = who.startswith("gpu")
            r = _hybrid_epochs(args, sq, d, lp, on_gpu, max_epochs, deadline)
        r.update({"launch": name, "who": who, "tau": lp.rows_in_flight, **launch_dict(lp)})
        if not r["reached"] and r["epochs"] < max_epochs and r["finite"]:
            out.degrade(f"time: {who} at {name} stopped after {r['epochs']} epochs")
        res["runs"].append(r)
        out.save()
    res["ok"] = all(r["finite"] for r in res["runs"])


# -- product ------------------------------------------------------------------------------------
def decoded_bytes(ds) -> int:
    """Host bytes of the data decoded (every row group as a CSR chunk)."""
    from snapfit.stream.budget import chunk_nbytes
    from snapfit.stream.stats import DataStats

    flags = DataStats.read(ds, sample=False).flags
    return sum(chunk_nbytes(r.n_rows, r.nnz, *flags) for r in ds.chunks)


def largest_chunk(ds) -> int:
    from snapfit.stream.budget import chunk_nbytes
    from snapfit.stream.stats import DataStats

    flags = DataStats.read(ds, sample=False).flags
    return max(chunk_nbytes(r.n_rows, r.nnz, *flags) for r in ds.chunks)


def section_product(out: Out, rows: int) -> None:
    import warnings

    from snapfit import LogisticRegression
    from snapfit.data import Dataset
    from snapfit.datasets.criteo_like import make_criteo_like_parquet
    from snapfit.stream.budget import views_nbytes
    from snapfit.stream.plan import resident_peak_nbytes
    from snapfit.stream.stats import DataStats

    res = out.data
    cores = os.cpu_count() or 1
    t = time.perf_counter()
    X, y01 = make_data(rows)
    tmp = tempfile.mkdtemp(prefix="gpu_check_")
    path = os.path.join(tmp, "train.parquet")
    chunk_rows = max(8, -(-rows // 16))
    make_criteo_like_parquet(path, rows, SEED, hash_bits=CFG["bits"], row_group_rows=chunk_rows)
    ds = Dataset(path)
    decoded = decoded_bytes(ds)
    res["data"] = {"rows": rows, "nnz": X.nnz, "n_features": X.shape[1], "C": C, "tol": TOL,
                   "parquet_bytes": os.path.getsize(path), "decoded_bytes": decoded,
                   "chunk_rows": chunk_rows, "cores": cores,
                   "make_s": time.perf_counter() - t}  # fmt: skip
    out.save()
    # "gpu hot": the hot block (``hot_columns=True``), whose launch fills the device
    configs = [("gpu", "gpu", 1, False), ("gpu hot", "gpu", 1, True),
               ("gpu+cpu", "gpu", cores, False), ("cpu", "cpu", cores, False)]  # fmt: skip
    max_iter = 12 if simulated() else 300
    # compile every path once on a few rows (kernels are JIT: not part of time to target)
    warm = X[: min(rows, 512)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _, device, jobs, hot in configs:
            LogisticRegression(C=C, device=device, n_jobs=jobs, max_iter=2,
                               hot_columns=hot).fit(warm, y01[:512])  # fmt: skip
    res["warmup_s"] = time.perf_counter() - t - res["data"]["make_s"]
    res["fits"] = []
    out.save()
    fits = [(where, name, device, jobs, hot) for where in ("in memory", "out of core")
            for name, device, jobs, hot in configs]  # fmt: skip
    for i, (where, name, device, jobs, hot) in enumerate(fits):
        cap = out.left() / (len(fits) - i)
        if cap <= 1.0:
            out.degrade(f"time: {name} {where} not run")
            continue
        stop_at = time.perf_counter() + cap
        ooc = where == "out of core"
        # w views of every thread, and half the data's decoded bytes: a streamed fit
        budget = views_nbytes(ds.n_features, jobs) + max(decoded // 2, 3 * largest_chunk(ds))
        peak = resident_peak_nbytes(DataStats.read(ds, sample=False), jobs)
        est = LogisticRegression(C=C, device=device, n_jobs=jobs, tol=TOL, max_iter=max_iter,
                                 random_state=0, memory_budget=budget if ooc else None,
                                 chunk_rows=chunk_rows if ooc else None,
                                 hot_columns=hot)  # fmt: skip
        cb = lambda rec, coef, b, end=stop_at: time.perf_counter() > end  # noqa: E731
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if where == "in memory":
                est.fit(X, y01, callbacks=[cb])
            else:
                est.fit(path, callbacks=[cb])
        secs = time.perf_counter() - t
        last = est.history_[-1]
        reached = last["rel_gap"] <= TOL
        epochs = int(np.max(est.n_iter_))
        if not reached and epochs < max_iter:
            out.degrade(f"time: {name} {where} stopped at {cap:.0f} s before the target")
        checks = [h["seconds"] for h in est.history_ if h["exact"]]
        plain = [h["seconds"] for h in est.history_ if not h["exact"]]
        res["fits"].append({
            "where": where, "units": name, "device": device, "n_jobs": jobs, "hot_columns": hot,
            "seconds": secs,
            # an exact check's epoch against a plain one (the check's passes: the objective,
            # and under the hot block the lag pass, on the device since it had a kernel)
            "exact_checks": len(checks),
            "check_epoch_s": float(np.median(checks)) if checks else None,
            "plain_epoch_s": float(np.median(plain)) if plain else None,
            "epochs": epochs, "reached": reached, "rel_gap": last["rel_gap"],
            "primal": last["primal"], "s_per_epoch": secs / max(epochs, 1),
            "io_wait_s": sum(h.get("io_wait", 0.0) for h in est.history_),
            "host_budget": budget if ooc else None, "resident_peak_bytes": peak,
            "streamed": ooc and peak > budget,
        })  # fmt: skip
        out.save()
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    res["ok"] = len(res["fits"]) == len(fits)


SECTIONS = {"env": section_env, "kernel": section_kernel, "link": section_link,
            "convergence": section_convergence, "product": section_product}  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu_sections")
    ap.add_argument("section", choices=sorted(SECTIONS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--cap", type=float, required=True, help="seconds this section may take")
    ap.add_argument("--rows", type=int, default=0)
    ap.add_argument("--bits", type=int, default=HASH_BITS, help="hash bits: 2**bits features")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args(argv)
    CFG["bits"] = a.bits
    out = Out(a.out, a.cap, a.smoke)
    out.save()
    SECTIONS[a.section](out, a.rows)
    out.data["complete"] = True
    out.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
