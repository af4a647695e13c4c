"""``python -m bench gpu --out DIR``: every GPU test and measurement in one command.

Run from the repository root on a machine with a GPU, no install needed::

    PYTHONPATH=. python -m bench gpu --out DIR [--budget-s 420]
    PYTHONPATH=. python -m bench gpu --smoke --out DIR   # the same end to end, CUDA simulator

Sections, each in its own process (a sticky CUDA error cannot poison the next) under
``timeout -s ABRT`` and ``python -X faulthandler`` (a hang prints every thread's stack), each
with a share of ``--budget-s``; the data sizes scale with the budget and a section that runs
short of time measures less and says so (``degraded``):

1. ``tests-cupy``, ``tests-numba``: ``pytest -m gpu tests/gpu`` once per backend
   (``SNAPFIT_GPU_BACKEND``), pass/fail counts from its JUnit XML;
2. ``kernel``: ``cd_pass`` on a resident chunk of Criteo-like rows (2M at the full budget):
   rows/s, nnz/s, modelled bandwidth for team 8-64 and 1x/2x/4x the default blocks;
3. ``link``: host->device GB/s from pinned memory; a fit streamed through the unit's slots
   against the same fit all resident: epoch time vs max(copy, kernel);
4. ``convergence``: epochs to relative gap 1e-4 at the default launch and 4x its rows in
   flight, against ``snapfit.solvers.emulate`` at the same tau on the same rows; and the
   hybrid (hot columns as a primal block, ``cd_pass_hot``) at 4x on the GPU against
   ``snapfit.solvers.hybrid``: its epochs and seconds beside the safe step's;
5. ``product``: time to 1e-4 for GPU alone, GPU alone with the hot block (``hot_columns=True``,
   its launch filling the device), GPU + CPU residue, CPU threads alone (all cores), in
   memory and out of core from Parquet under a host budget below the data; and ``env``:
   versions, driver, ``snapfit info --device``.

Writes ``DIR/gpu_check.json``, ``DIR/gpu_check.md`` (a table per section, with the device,
driver, CuPy/numba versions and commit) and ``DIR/logs/``; exits 1 if a test failed or did
not finish, a section crashed or one of its checks failed (``w != w(alpha)`` after the kernel
sweep, a non-finite dual), 0 otherwise; a measuring section cut off at its limit keeps what it
measured, marked degraded. Nothing here imports Dask.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The budget the sizes below are for (seconds of the whole check).
FULL_BUDGET_S = 420.0
#: Rows of each measuring section at the full budget; scaled down with the budget.
FULL_ROWS = {"kernel": 2_000_000, "link": 1_000_000, "convergence": 100_000, "product": 500_000}
#: Rows in the smoke run (the simulator runs each CUDA thread as a Python thread).
SMOKE_ROWS = {"kernel": 96, "link": 96, "convergence": 48, "product": 128}
SMOKE_BITS = 12
#: Share of the budget per section (renormalized over the sections still to run, so time one
#: leaves unused goes to the rest).
#: The test sections, run at the same time (each with both shares) when both are asked for.
TESTS = ("tests-cupy", "tests-numba")
SHARES = {"env": 0.05, "tests-cupy": 0.17, "tests-numba": 0.17, "kernel": 0.13, "link": 0.10,
          "convergence": 0.15, "product": 0.23}  # fmt: skip
ORDER = list(SHARES)
#: Fields every section's JSON carries (the smoke test checks them all).
FIELDS = {
    "env": ["device_name", "driver", "versions", "cupy", "describe_devices", "info_device"],
    "tests-cupy": ["backend", "command", "rc", "passed", "failed", "errors", "skipped", "total"],
    "tests-numba": ["backend", "command", "rc", "passed", "failed", "errors", "skipped", "total"],
    "kernel": ["data", "default_launch", "peak_gbps", "bytes_per_pass", "sweep",
               "w_minus_w_alpha"],
    "link": ["h2d_pinned_gbps", "h2d_pageable_gbps", "d2h_pinned_gbps", "data", "resident",
             "streamed", "overlap"],
    "convergence": ["data", "max_epochs", "runs"],
    "product": ["data", "warmup_s", "fits"],
}  # fmt: skip
SWEEP_FIELDS = ["vary", "value", "blocks", "block", "team", "rows_in_flight", "pass_s",
                "rows_per_s", "nnz_per_s", "gbps_data", "gbps_with_w"]  # fmt: skip
OVERLAP_FIELDS = ["bytes_per_epoch", "copy_s", "kernel_s", "streamed_epoch_s", "bound_s",
                  "efficiency", "hidden_fraction"]  # fmt: skip
RUN_FIELDS = ["launch", "who", "tau", "epochs", "reached", "rel_gap", "dual_drops", "seconds"]
FIT_FIELDS = ["where", "units", "n_jobs", "seconds", "epochs", "reached", "rel_gap",
              "s_per_epoch", "host_budget", "streamed"]  # fmt: skip


def missing_fields(report: dict) -> list[str]:
    """Every field the report should carry and does not, as ``section.field`` paths."""
    miss = []
    for name, fields in FIELDS.items():
        sec = report.get("sections", {}).get(name)
        if sec is None:
            miss.append(name)
            continue
        miss += [f"{name}.{f}" for f in fields if f not in sec]
    nested = [("kernel", "sweep", SWEEP_FIELDS), ("convergence", "runs", RUN_FIELDS),
              ("product", "fits", FIT_FIELDS)]  # fmt: skip
    for name, key, fields in nested:
        rows = report.get("sections", {}).get(name, {}).get(key) or []
        if not rows:
            miss.append(f"{name}.{key}[]")
        miss += [f"{name}.{key}[{i}].{f}" for i, r in enumerate(rows) for f in fields
                 if f not in r]  # fmt: skip
    ov = report.get("sections", {}).get("link", {}).get("overlap") or {}
    miss += [f"link.overlap.{f}" for f in OVERLAP_FIELDS if f not in ov]
    return miss


def commit() -> str:
    """``$SNAPFIT_COMMIT`` when set (a copy of the tree made with ``git archive`` has no git of
    its own, or the wrong one), else ``git rev-parse HEAD``."""
    if os.environ.get("SNAPFIT_COMMIT"):
        return os.environ["SNAPFIT_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, text=True,
                             capture_output=True, timeout=10)  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, text=True, capture_output=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return os.environ.get("SNAPFIT_COMMIT", "unknown")
    if out.returncode != 0:
        return os.environ.get("SNAPFIT_COMMIT", "unknown (no git)")
    return out.stdout.strip() + (" (modified)" if dirty.stdout.strip() else "")


def child_env(smoke: bool, backend: str | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env["NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS"] = "0"
    env.pop("SNAPFIT_GPU_BACKEND", None)
    if smoke:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    else:
        env.pop("NUMBA_ENABLE_CUDASIM", None)
    if backend:
        env["SNAPFIT_GPU_BACKEND"] = backend
    return env


def run_limited(cmd: list[str], cap: float, log_path: str, env: dict) -> tuple[int | None, bool]:
    """``cmd`` under ``timeout -s ABRT -k 5 cap`` (where coreutils has it) with a backstop:
    the whole process group is killed 10 s after ``cap``. Returns ``(rc, timed_out)``."""
    cap = max(1, int(cap))
    tool = shutil.which("timeout")
    full = [tool, "-s", "ABRT", "-k", "5", str(cap), *cmd] if tool else cmd
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(cmd) + f"\n# time limit {cap} s\n")
        log.flush()
        proc = subprocess.Popen(full, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        try:
            rc = proc.wait(timeout=cap + 10)
        except subprocess.TimeoutExpired:
            for sig in (signal.SIGABRT, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=5)
                    break
                except subprocess.TimeoutExpired:
                    continue
            return proc.poll(), True
    # timeout(1) exits 124 when its signal ended the command, 137 when -k had to kill it
    return rc, tool is not None and rc in (124, 137)


def tail(path: str, n: int = 30) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


# -- section 1: the GPU tests ------------------------------------------------------------------
def pytest_command(smoke: bool, cap: float, junit: str) -> list[str]:
    """``pytest -m gpu`` over the GPU tests (the hardware tests only: ``-m gpu`` keeps the
    simulator suite from starting). The smoke run takes one file of them."""
    target = ["tests/gpu/test_cupy_gpu.py"] if smoke else ["tests/gpu"]
    cmd = [sys.executable, "-X", "faulthandler", "-m", "pytest", "-m", "gpu", *target,
           "-p", "no:cacheprovider", "-v", "-rfE", "--tb=short", f"--junitxml={junit}"]  # fmt: skip
    import importlib.util

    if importlib.util.find_spec("pytest_timeout") is not None:
        per_test = int(max(30, min(180, cap - 15)))
        cmd += [f"--timeout={per_test}", "--timeout-method=thread"]
    return cmd


def junit_counts(path: str) -> dict | None:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    c = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors",
                                                            "skipped")}  # fmt: skip
    failed_names = [f"{tc.get('classname')}::{tc.get('name')}" for s in suites
                    for tc in s.iter("testcase")
                    if tc.find("failure") is not None or tc.find("error") is not None]  # fmt: skip
    return {"total": c["tests"], "failed": c["failures"], "errors": c["errors"],
            "skipped": c["skipped"], "passed": c["tests"] - c["failures"] - c["errors"]
            - c["skipped"], "failed_tests": failed_names}  # fmt: skip


def log_counts(text: str) -> dict:
    """Counts from ``pytest -v`` lines (``tests/x.py::test_a PASSED [ 50%]``): what ran before
    a run was cut off (its JUnit XML is written only at the end)."""
    out = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "failed_tests": []}
    words = {"PASSED": "passed", "FAILED": "failed", "ERROR": "errors", "SKIPPED": "skipped",
             "XFAIL": "skipped", "XPASS": "passed"}  # fmt: skip
    for m in re.finditer(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b", text,
                         re.M):  # fmt: skip
        out[words[m.group(2)]] += 1
        if m.group(2) in ("FAILED", "ERROR"):
            out["failed_tests"].append(m.group(1))
    out["total"] = sum(out[k] for k in ("passed", "failed", "errors", "skipped"))
    return out


def run_tests(backend: str, a, cap: float, logs: str) -> dict:
    junit = os.path.join(logs, f"tests-{backend}.xml")
    if os.path.exists(junit):
        os.remove(junit)
    cmd = pytest_command(a.smoke, cap, junit)
    log = os.path.join(logs, f"tests-{backend}.log")
    t = time.perf_counter()
    rc, timed_out = run_limited(cmd, cap, log, child_env(a.smoke, backend))
    counts = junit_counts(junit)
    if counts is None:
        with open(log, errors="replace") as f:
            counts = log_counts(f.read())
        counts["from"] = "log (no JUnit XML: the run was cut off)"
    shown = ["python", *cmd[1:]]
    shown = [f"--junitxml=logs/tests-{backend}.xml" if c.startswith("--junitxml") else c
             for c in shown]  # fmt: skip
    res = {"backend": backend, "command": f"SNAPFIT_GPU_BACKEND={backend} " + " ".join(shown),
        "rc": rc, "timed_out": timed_out, "seconds": time.perf_counter() - t, "cap_s": cap,
        **counts, "log_tail": tail(log, 25)}  # fmt: skip
    if a.smoke:
        res["degraded"] = ["smoke: only tests/gpu/test_cupy_gpu.py (-m gpu), under the simulator"]
    # rc 5: nothing selected (no test is marked gpu): a failure on a GPU, expected nowhere
    res["ok"] = not timed_out and (rc == 0 or (rc == 5 and a.smoke))
    return res


# -- the measuring sections ---------------------------------------------------------------------
def run_section(name: str, a, cap: float, rows: int, logs: str) -> dict:
    path = os.path.join(logs, f"{name}.json")
    if os.path.exists(path):
        os.remove(path)
    cmd = [sys.executable, "-X", "faulthandler", "-m", "bench.gpu_sections", name, "--out", path,
           "--cap", f"{cap:.0f}", "--rows", str(rows)]  # fmt: skip
    if a.smoke:
        cmd += ["--smoke", "--bits", str(SMOKE_BITS)]
    log = os.path.join(logs, f"{name}.log")
    t = time.perf_counter()
    rc, timed_out = run_limited(cmd, cap, log, child_env(a.smoke))
    try:
        with open(path) as f:
            res = json.load(f)
    except (OSError, ValueError):
        res = {"degraded": []}
    res.update({"rc": rc, "timed_out": timed_out, "seconds": time.perf_counter() - t,
                "cap_s": cap, "rows_asked": rows})  # fmt: skip
    if timed_out:
        res.setdefault("degraded", []).append(f"cut off at its limit of {cap:.0f} s")
    if rc != 0:
        res["log_tail"] = tail(log, 40)
    # cut off at its limit: what it measured stands (marked degraded); a crash fails it, and
    # so does a failed check of its own (w != w(alpha), a non-finite dual, ...)
    measured = set(res) - {"degraded", "smoke", "complete", "seconds", "rc", "timed_out",
                           "cap_s", "rows_asked", "log_tail"}  # fmt: skip
    finished = (rc == 0 and res.get("complete", False)) or (timed_out and bool(measured))
    res["ok"] = bool(finished and res.get("ok", True))
    return res


#: Passes of the default launch each section plans for, over its whole time limit, when sizing
#: its rows from the kernel's measured rate (link: two fits of six epochs and their first
#: epochs; convergence: four runs of up to ~150 epochs, two of them on the GPU, with exact
#: objectives on the host; product: six fits, the GPU alone needing the most epochs).
PASSES = {"link": 24, "convergence": 600, "product": 400}
MIN_ROWS = 20_000


def rows_for(name: str, a, cap: float, rate: float | None) -> tuple[int, str | None]:
    """Rows for section ``name``: its full size scaled by the budget, and no more than the
    kernel's measured rate (rows/s at the default launch) lets it pass over in ``cap``."""
    if name not in FULL_ROWS:
        return 0, None
    if a.smoke:
        return SMOKE_ROWS[name], None
    rows = max(MIN_ROWS, int(FULL_ROWS[name] * min(1.0, a.budget_s / FULL_BUDGET_S)))
    if rate and name in PASSES and rate * cap / PASSES[name] < rows:
        fit = max(MIN_ROWS, int(rate * cap / PASSES[name]))
        if fit < rows:
            why = (f"{fit} rows instead of {rows}: the kernel's {rate:.3g} rows/s at the "
                   f"default launch, {PASSES[name]} passes planned in {cap:.0f} s")  # fmt: skip
            return fit, why
    return rows, None


def kernel_rate(report: dict) -> float | None:
    """Rows/s of the default launch, as the kernel section measured it."""
    k = report["sections"].get("kernel") or {}
    for s in k.get("sweep", []):
        if s.get("vary") == "blocks" and s.get("value") == "1x":
            return s["rows_per_s"]
    return (k.get("probe") or {}).get("rows_per_s")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench gpu", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output folder (created)")
    ap.add_argument(
        "--budget-s",
        type=float,
        default=FULL_BUDGET_S,
        help="seconds for the whole check (sizes scale with it; default 420)",
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="tiny data under the CUDA simulator (CI): checks the script, not a GPU",
    )
    ap.add_argument("--only", nargs="*", choices=ORDER, default=None, help="these sections only")
    a = ap.parse_args(argv)
    out = os.path.abspath(a.out)
    logs = os.path.join(out, "logs")
    os.makedirs(logs, exist_ok=True)
    sections = [s for s in ORDER if a.only is None or s in a.only]
    start = time.perf_counter()
    report = {
        "command": "python -m bench gpu" + (" --smoke" if a.smoke else "")
        + f" --budget-s {a.budget_s:g}",
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(), "smoke": a.smoke, "budget_s": a.budget_s, "sections": {},
    }  # fmt: skip
    together = {}  # the second test section, already run beside the first
    for i, name in enumerate(sections):
        left = a.budget_s - (time.perf_counter() - start)
        both = TESTS if set(TESTS) <= set(sections[i:]) and name == TESTS[0] else (name,)
        share = sum(SHARES[s] for s in both) / sum(SHARES[s] for s in sections[i:])
        cap = max(30.0 if name == "env" else 20.0, share * left)
        if name in together:
            res = together.pop(name)
        elif name.startswith("tests-"):
            # The backends' test runs are two processes on the one GPU, at the same time: each
            # gets both shares (JIT compilation and the CPU reference fits are most of a run).
            print(f"== {' + '.join(both)} (limit {cap:.0f} s, at once)", flush=True)
            with ThreadPoolExecutor(len(both)) as pool:
                runs = [pool.submit(run_tests, t.split("-", 1)[1], a, cap, logs) for t in both]
                done = [r.result() for r in runs]
            res = done[0]
            together.update(zip(both[1:], done[1:], strict=True))
        else:
            print(f"== {name} (limit {cap:.0f} s)", flush=True)
            rows, why = rows_for(name, a, cap, kernel_rate(report))
            res = run_section(name, a, cap, rows, logs)
            if why:
                res.setdefault("degraded", []).insert(0, why)
        report["sections"][name] = res
        print(
            f"   {'ok' if res['ok'] else 'FAILED'} after {res['seconds']:.0f} s"
            + ("".join(f"\n   degraded: {d}" for d in res.get("degraded", []))),
            flush=True,
        )
        write(report, out, start)
    report["missing_fields"] = missing_fields(report) if a.only is None else []
    failed = [n for n, r in report["sections"].items() if not r["ok"]]
    report["failed_sections"] = failed
    report["ok"] = not failed
    write(report, out, start)
    print(
        f"done in {time.perf_counter() - start:.0f} s: {out}/gpu_check.md"
        + (f"; FAILED: {', '.join(failed)}" if failed else ""),
        flush=True,
    )
    return 0 if not failed else 1


def write(report: dict, out: str, start: float) -> None:
    from bench.gpu_report import markdown

    report["total_s"] = time.perf_counter() - start
    with open(os.path.join(out, "gpu_check.json"), "w") as f:
        json.dump(report, f, indent=1)
    with open(os.path.join(out, "gpu_check.md"), "w") as f:
        f.write(markdown(report))


if __name__ == "__main__":
    sys.exit(main())
