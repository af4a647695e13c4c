"""``python -m bench gpu``: the smoke run (CUDA simulator, tiny data) covers every section and
field, on a Python where Dask cannot be imported; the report's parsers."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).parents[1]

# Put first on PYTHONPATH, this makes ``import dask`` (and distributed) fail in every process
# the check starts: the GPU machine has no Dask.
NO_DASK = """
import sys
for name in ("dask", "distributed", "dask_cuda"):
    sys.modules[name] = None
"""


def _no_dask_path(tmp_path) -> str:
    d = tmp_path / "nodask"
    d.mkdir()
    (d / "sitecustomize.py").write_text(NO_DASK)
    return os.pathsep.join([str(d), str(ROOT)])


def test_the_check_imports_without_dask(tmp_path):
    code = textwrap.dedent("""
        import importlib, sys
        for m in ("bench.gpu_check", "bench.gpu_sections", "bench.gpu_report", "snapfit",
                  "snapfit.train", "snapfit.gpu.launch", "snapfit.solvers.emulate"):
            importlib.import_module(m)
        try:
            import dask
        except ImportError:
            print("no dask")
    """)
    env = dict(os.environ, PYTHONPATH=_no_dask_path(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, text=True,
                         capture_output=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "no dask" in out.stdout


def test_smoke_run_covers_every_section_without_dask(tmp_path):
    from bench.gpu_check import FIELDS, missing_fields

    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=_no_dask_path(tmp_path))
    env.pop("NUMBA_ENABLE_CUDASIM", None)  # the check sets it for its sections
    p = subprocess.run([sys.executable, "-m", "bench", "gpu", "--smoke", "--out", str(out)],
                       cwd=ROOT, env=env, text=True, capture_output=True, timeout=400)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    report = json.loads((out / "gpu_check.json").read_text())
    assert set(report["sections"]) == set(FIELDS)
    assert report["missing_fields"] == [] == missing_fields(report)
    assert report["ok"] and report["smoke"]
    for name, sec in report["sections"].items():
        assert sec["ok"], (name, sec.get("log_tail"))
    assert report["sections"]["tests-cupy"]["total"] >= 1
    md = (out / "gpu_check.md").read_text()
    for title in ("GPU tests", "Kernel throughput", "Link and overlap", "Convergence",
                  "Time to target", "snapfit info --device"):  # fmt: skip
        assert title in md
    assert str(tmp_path) not in md  # no machine paths in what goes into the docs


def test_missing_fields_names_what_is_absent():
    from bench.gpu_check import missing_fields

    miss = missing_fields({"sections": {"kernel": {"sweep": [{"vary": "team"}]}}})
    assert "env" in miss and "kernel.data" in miss and "kernel.sweep[0].pass_s" in miss
    assert "product" in miss and "link.overlap.efficiency" in miss


def test_test_counts_from_a_log_cut_off_mid_run():
    from bench.gpu_check import log_counts

    log = textwrap.dedent("""
        tests/gpu/test_a.py::test_one PASSED                                   [ 25%]
        tests/gpu/test_a.py::test_two[cupy] FAILED                             [ 50%]
        tests/gpu/test_b.py::test_three SKIPPED (needs CuPy)                   [ 75%]
        tests/gpu/test_b.py::test_four ERROR                                   [100%]
        Timeout +++++
    """)
    c = log_counts(log)
    assert (c["passed"], c["failed"], c["skipped"], c["errors"], c["total"]) == (1, 1, 1, 1, 4)
    assert c["failed_tests"] == ["tests/gpu/test_a.py::test_two[cupy]",
                                 "tests/gpu/test_b.py::test_four"]  # fmt: skip


def test_test_counts_from_junit_xml(tmp_path):
    from bench.gpu_check import junit_counts

    xml = tmp_path / "j.xml"
    xml.write_text(
        '<testsuites><testsuite tests="4" failures="1" errors="0" skipped="2">'
        '<testcase classname="tests.gpu.t" name="a"/>'
        '<testcase classname="tests.gpu.t" name="b"><failure message="x"/></testcase>'
        "</testsuite></testsuites>"
    )
    c = junit_counts(str(xml))
    assert (c["passed"], c["failed"], c["skipped"], c["total"]) == (1, 1, 2, 4)
    assert c["failed_tests"] == ["tests.gpu.t::b"]
    assert junit_counts(str(tmp_path / "absent.xml")) is None


def test_sizes_follow_the_budget_and_the_measured_kernel_rate():
    from types import SimpleNamespace

    from bench.gpu_check import FULL_ROWS, MIN_ROWS, PASSES, rows_for

    full = SimpleNamespace(smoke=False, budget_s=420.0)
    assert rows_for("product", full, 100.0, None) == (FULL_ROWS["product"], None)
    half = SimpleNamespace(smoke=False, budget_s=210.0)
    assert rows_for("kernel", half, 30.0, None)[0] == FULL_ROWS["kernel"] // 2
    # a kernel 100x slower than modelled: fewer rows, and the report says why
    rows, why = rows_for("convergence", full, 60.0, 2_000.0)
    assert rows == MIN_ROWS and "rows/s" in why
    rows, why = rows_for("product", full, 100.0, 1e6)
    assert rows == int(1e6 * 100.0 / PASSES["product"]) and why
    assert rows_for("env", full, 20.0, 1e6) == (0, None)


def test_a_command_past_its_limit_is_stopped_and_reported(tmp_path):
    import time

    from bench.gpu_check import run_limited

    t = time.perf_counter()
    rc, timed_out = run_limited([sys.executable, "-c", "import time; time.sleep(60)"], 1,
                                str(tmp_path / "log"), dict(os.environ))  # fmt: skip
    assert timed_out and time.perf_counter() - t < 30
    assert "time limit 1 s" in (tmp_path / "log").read_text()
