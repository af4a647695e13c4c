"""``gpu_check.md`` from ``gpu_check.json`` (``bench/gpu_check.py``): a table per section.

The markdown is written to drop into docs/gpu-performance-model.md's "Measured" section.
"""

from __future__ import annotations


def _f(x, fmt=".3g") -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return format(x, fmt)
    return str(x)


def _table(head: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(_f(v) for v in r) + " |" for r in rows]
    return out + [""]


def _status(sec: dict) -> list[str]:
    lines = []
    if not sec.get("ok", False):
        why = "cut off at its time limit" if sec.get("timed_out") else f"rc {sec.get('rc')}"
        lines.append(f"**FAILED** ({why}); see `logs/`.")
    for d in sec.get("degraded", []):
        lines.append(f"- degraded: {d}")
    t = sec.get("seconds")
    if t is not None:
        lines.append(f"({t:.0f} s of a {sec.get('cap_s', 0):.0f} s limit)")
    return lines + [""]


def _env(r: dict) -> list[str]:
    env = r["sections"].get("env", {})
    v = env.get("versions", {})
    cupy = env.get("cupy", {}) or {}
    gpus = (env.get("describe_devices") or {}).get("gpus") or []
    g = gpus[0] if gpus else {}
    launch = g.get("launch", {})
    out = ["| | |", "|---|---|"]
    out += [f"| {k} | {_f(val)} |" for k, val in [
        ("device", env.get("device_name")), ("driver", env.get("driver")),
        ("CUDA (driver API)", env.get("cuda_driver_api")),
        ("CuPy", cupy.get("version")), ("numba", v.get("numba")),
        ("numba-cuda", v.get("numba-cuda")), ("numpy", v.get("numpy")),
        ("Python", env.get("python")), ("CPU cores", env.get("cores")),
        ("backend (default)", env.get("backend")),
        ("SMs", g.get("sm_count")),
        ("default launch, 64k-row chunk", f"{launch.get('blocks')} blocks x "
         f"{launch.get('block')}, team {launch.get('team')}" if launch else None),
        ("commit", r.get("commit")), ("date", r.get("date")), ("command", r.get("command")),
    ]]  # fmt: skip
    info = env.get("info_device", {})
    out += ["", "`snapfit info --device`:", "", "```", (info.get("text") or "").strip(), "```", ""]
    return out + _status(env)


def _tests(r: dict) -> list[str]:
    rows, notes = [], []
    for name in ("tests-cupy", "tests-numba"):
        t = r["sections"].get(name)
        if t is None:
            continue
        rows.append([t.get("backend"), t.get("passed"), t.get("failed"), t.get("errors"),
                     t.get("skipped"), t.get("total"), t.get("rc"),
                     f"{t.get('seconds', 0):.0f}"])  # fmt: skip
        notes += [f"- {t['backend']}: failed `{n}`" for n in t.get("failed_tests", [])]
        notes += [f"- {t['backend']}: {d}" for d in t.get("degraded", [])]
        if t.get("timed_out"):
            notes.append(f"- {t['backend']}: cut off at {t.get('cap_s', 0):.0f} s")
    head = ["backend", "passed", "failed", "errors", "skipped", "total", "rc", "s"]
    cmd = next((r["sections"][n].get("command") for n in ("tests-cupy", "tests-numba")
                if n in r["sections"]), "")  # fmt: skip
    return _table(head, rows) + ([f"`{cmd}`", ""] if cmd else []) + notes + [""]


def _kernel(r: dict) -> list[str]:
    k = r["sections"].get("kernel", {})
    d = k.get("data", {})
    out = [f"{_f(d.get('rows'))} rows, {_f(d.get('nnz'))} stored values, "
           f"{_f(d.get('n_features'))} features, one resident chunk; default launch "
           f"{k.get('default_launch')}; nominal device bandwidth {_f(k.get('peak_gbps'))} GB/s. "
           "Bandwidth is modelled: `data` = the chunk's arrays read once and alpha written; "
           "`+w` adds a gather and an atomic add of w per stored value and the column counts.",
           ""]  # fmt: skip
    rows = [[s["vary"], s["value"], s["blocks"], s["block"], s["team"], s["rows_in_flight"],
             1e3 * s["pass_s"], s["rows_per_s"] / 1e6, s["nnz_per_s"] / 1e9, s["gbps_data"],
             s["gbps_with_w"]] for s in k.get("sweep", [])]  # fmt: skip
    head = ["vary", "value", "blocks", "block", "team", "rows in flight", "ms/pass", "M rows/s",
            "G nnz/s", "GB/s data", "GB/s +w"]  # fmt: skip
    out += _table(head, rows)
    out.append(f"max |w - w(alpha)| after the sweep: {_f(k.get('w_minus_w_alpha'))}")
    return out + [""] + _status(k)


def _link(r: dict) -> list[str]:
    lk = r["sections"].get("link", {})
    out = _table(
        ["copy", "GB/s"],
        [
            ["host->device, pinned", lk.get("h2d_pinned_gbps")],
            ["host->device, pageable", lk.get("h2d_pageable_gbps")],
            ["device->host, pinned", lk.get("d2h_pinned_gbps")],
        ],
    )
    d = lk.get("data", {})
    ov = lk.get("overlap", {})
    out.append(
        f"Streamed fit: {_f(d.get('rows'))} rows in {_f(d.get('chunks'))} chunks, device "
        f"budget {_f(d.get('device_budget'))} B for {_f(d.get('data_device_bytes'))} B "
        "of data (no chunk stays resident), against the same fit all resident."
    )
    out.append("")
    rows = [
        [
            name,
            (lk.get(name) or {}).get("epoch_s_median"),
            len((lk.get(name) or {}).get("resident_chunks", [])),
            (lk.get(name) or {}).get("host_stats"),
        ]
        for name in ("resident", "streamed")
    ]
    out += _table(["fit", "s/epoch (median)", "chunks resident", "host work"], rows)
    out += _table(
        ["copy s", "kernel s", "streamed s", "max(copy, kernel)", "efficiency", "copy hidden"],
        [
            [
                ov.get("copy_s"),
                ov.get("kernel_s"),
                ov.get("streamed_epoch_s"),
                ov.get("bound_s"),
                ov.get("efficiency"),
                ov.get("hidden_fraction"),
            ]
        ],
    )
    return out + _status(lk)  # fmt: skip


def _convergence(r: dict) -> list[str]:
    c = r["sections"].get("convergence", {})
    d = c.get("data", {})
    out = [
        f"{_f(d.get('rows'))} rows, C = {_f(d.get('C'))}, target relative gap "
        f"{_f(d.get('tol'))}, at most {_f(c.get('max_epochs'))} epochs.",
        "",
    ]
    rows = [[x["launch"], x["who"], x["tau"], x["epochs"], x["reached"], x["rel_gap"],
             x["dual_drops"], x["seconds"]] for x in c.get("runs", [])]  # fmt: skip
    out += _table(["launch", "run", "tau", "epochs", "reached", "rel gap", "dual drops", "s"],
                  rows)  # fmt: skip
    return out + _status(c)


def _product(r: dict) -> list[str]:
    p = r["sections"].get("product", {})
    d = p.get("data", {})
    out = [f"{_f(d.get('rows'))} rows ({_f(d.get('decoded_bytes'))} B decoded, "
           f"{_f(d.get('parquet_bytes'))} B Parquet), C = {_f(d.get('C'))}, target relative gap "
           f"{_f(d.get('tol'))}, {_f(d.get('cores'))} cores; out of core: the estimator on the "
           "Parquet file with memory_budget = the threads' w views + half the decoded data. "
           "JIT compile excluded (a warm-up fit first).", ""]  # fmt: skip
    rows = [[x["where"], x["units"], x["n_jobs"], x["seconds"], x["epochs"], x["reached"],
             x["rel_gap"], x["s_per_epoch"], x.get("exact_checks"), x.get("plain_epoch_s"),
             x.get("check_epoch_s"), x["host_budget"], x["streamed"]]
            for x in p.get("fits", [])]  # fmt: skip
    out += _table(["data", "units", "n_jobs", "s to target", "epochs", "reached", "rel gap",
                   "s/epoch", "exact checks", "epoch s", "epoch s with check", "host budget B",
                   "streamed"], rows)  # fmt: skip
    return out + _status(p)


def markdown(r: dict) -> str:
    env = r["sections"].get("env", {})
    title = f"### GPU check: {env.get('device_name') or 'device unknown'}, {r.get('date')}, "
    title += f"commit {r.get('commit')}"
    lines = [title + (" (SMOKE: CUDA simulator, tiny data; no timing means anything)"
                      if r.get("smoke") else ""), ""]  # fmt: skip
    verdict = (
        "all sections ok"
        if r.get("ok")
        else ("FAILED: " + ", ".join(r.get("failed_sections", [])) if "ok" in r else "running")
    )
    lines += [f"{verdict}; {r.get('total_s', 0):.0f} s of a {r.get('budget_s', 0):.0f} s budget.",
              ""]  # fmt: skip
    parts = [("Device and versions", _env), ("1. GPU tests (`pytest -m gpu`)", _tests),
             ("2. Kernel throughput", _kernel), ("3. Link and overlap", _link),
             ("4. Convergence at real concurrency", _convergence),
             ("5. Time to target", _product)]  # fmt: skip
    for title, fn in parts:
        lines += [f"#### {title}", ""]
        try:
            lines += fn(r)
        except (KeyError, TypeError, ValueError) as e:
            lines += [f"(not rendered: {type(e).__name__}: {e})", ""]
    if r.get("missing_fields"):
        lines += ["Missing fields: " + ", ".join(r["missing_fields"]), ""]
    return "\n".join(lines)
