"""GPU tests. ``sim/`` needs Numba's CUDA simulator, which is chosen when ``numba.cuda`` is first
imported, so it runs in its own process unless this process already has
``NUMBA_ENABLE_CUDASIM=1``.

That process is the GPU lane (``tests/gpu/lane.py``): the simulator suite, then the GPU tests
outside ``sim/`` that are slow and need no simulator (``LANE_FILES``: the PTX builds, the no-GPU
doors, the GPU check's smoke run), handed over by this process. It starts as soon as collection
shows that ``test_simulator.py`` will run, and runs beside the rest of the suite on the other
core; ``test_the_gpu_lane``, moved to the end, waits for it and checks its result. In CI at
d38ed57 on an otherwise idle 2-core machine the lane took 11.3 + 3.4 min (143 simulator
tests, then 18 without it), the main process 15.0 min and the whole ``.ci/run`` 16.8 min
(install included); at cf96bad, under a load of 9-13, 11.3 + 4.5 and 20.9 min.
With ``SNAPFIT_GPU_COVERAGE`` set to a coverage ``--include`` pattern (CI does), the lane runs
under ``coverage run -p``, so its tests run once and also measure the GPU modules."""

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.alarm import alarm

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def _real_gpu() -> bool:
    if SIMULATED:
        return False
    from snapfit.gpu import available

    return available()


#: A CUDA device is here (not the simulator): the hardware-capable files of ``sim/`` run on
#: it, marked ``gpu`` (``pytest -m gpu``), and the simulator suite starts only when asked for
#: (``SNAPFIT_SIM_SUITE=1``).
REAL_GPU = _real_gpu()
#: The files of ``sim/`` whose tests run on a real GPU too: the kernels against the CPU, the
#: node trainer (units, residents, budgets, GPU + CPU, two units) and the composition matrix's
#: local cells. The rest assert what only the simulator has (its launch, the stand-in CuPy,
#: Dask workers); tests inside these files that do are marked ``sim_only``.
ON_HARDWARE = ("test_kernels.py", "test_node.py", "test_matrix.py")
#: Seconds a GPU test may run before it fails (``tests.alarm``): a hang is a failure.
GPU_TEST_SECONDS = 300

if SIMULATED:
    collect_ignore_glob = []
elif REAL_GPU:
    collect_ignore_glob = [
        f"sim/{f.name}" for f in (Path(__file__).parent / "sim").glob("*.py")
        if f.name.startswith("test_") and f.name not in ON_HARDWARE
    ]  # fmt: skip
else:
    collect_ignore_glob = ["sim/*"]


def sim_suite_wanted() -> bool:
    """Run the GPU lane (``sim/`` under the simulator) in a subprocess: always without a GPU
    (CI), on a GPU machine only with ``SNAPFIT_SIM_SUITE=1`` (some 6-11 minutes of one core)."""
    return not REAL_GPU or os.environ.get("SNAPFIT_SIM_SUITE", "0") not in ("", "0")


SIM_TEST = "test_simulator.py::test_the_gpu_lane"
ROOT = Path(__file__).parents[2]
#: Files whose selected tests the GPU lane runs (without the simulator) when it runs at all.
LANE_FILES = ("tests/gpu/test_ptx.py", "tests/gpu/test_device.py", "tests/test_gpu_check.py")


def start_sim_suite(node_ids=()):
    """Start the GPU lane (``tests.gpu.lane``) with ``node_ids`` for its second run; returns
    ``(process, output file)``. The lane is a process group, so a kill stops its runs too."""
    out = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen([sys.executable, "-m", "tests.gpu.lane", *node_ids], stdout=out,
                            stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            start_new_session=True)  # fmt: skip
    return proc, out


def stop(proc) -> None:
    """Kill the lane and the runs it started, if still running."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _lane_wanted(items) -> bool:
    return not SIMULATED and sim_suite_wanted() and any(i.nodeid.endswith(SIM_TEST) for i in items)


@pytest.hookimpl(tryfirst=True)  # marks added before `-m` deselects
def pytest_collection_modifyitems(config, items):
    """Wait for the GPU lane last: everything else runs meanwhile. On a real GPU, the
    tests of ``sim/`` collected here are marked ``gpu`` and those marked ``sim_only`` skip."""
    waits = [item for item in items if item.nodeid.endswith(SIM_TEST)]
    items[:] = [item for item in items if item not in waits] + waits
    if REAL_GPU:
        for item in items:
            if "/sim/" in item.nodeid.replace("\\", "/"):
                item.add_marker(pytest.mark.gpu)
                if item.get_closest_marker("sim_only"):
                    item.add_marker(pytest.mark.skip(reason="asserts what only the simulator has"))


@pytest.hookimpl(specname="pytest_collection_modifyitems", trylast=True)
def pytest_hand_over_to_the_lane(config, items):
    """After ``-k``, ``-m`` and ``--deselect`` have chosen the items: when the GPU lane will
    run (its test is still chosen), the chosen tests of ``LANE_FILES`` go to it and are
    reported here as deselected; otherwise they run here."""
    if not _lane_wanted(items):
        return
    handed = [i for i in items if i.nodeid.split("::")[0] in LANE_FILES]
    items[:] = [i for i in items if i not in handed]
    config.snapfit_handed = [i.nodeid for i in handed]
    if handed:
        config.hook.pytest_deselected(items=handed)


def pytest_collection_finish(session):
    """Start the GPU lane once the items are final (and only if its test is among them)."""
    if _lane_wanted(session.items) and not session.config.option.collectonly:
        handed = getattr(session.config, "snapfit_handed", [])
        session.config.snapfit_sim = start_sim_suite(handed)


def pytest_terminal_summary(terminalreporter, config):
    """The GPU lane's slowest tests (each of its runs), beside this process's
    (``--durations``): the two run side by side, and the longer decides the suite's time."""
    text = getattr(config, "snapfit_sim_report", "")
    runs = ("simulator", "no simulator")
    for run, part in zip(runs, text.split(" slowest ")[1:], strict=False):
        section = part.split("\n", 1)[-1].split("\n=", 1)[0].rstrip()
        terminalreporter.write_sep("=", f"the GPU lane's slowest tests ({run})")
        terminalreporter.write_line(section)


@pytest.fixture(autouse=True)
def _gpu_time_limit(request):
    """A test on a real GPU fails after ``GPU_TEST_SECONDS`` instead of hanging the run (host
    waits poll, so the alarm is seen even while a kernel runs)."""
    if REAL_GPU and request.node.get_closest_marker("gpu"):
        with alarm(GPU_TEST_SECONDS, f"GPU test {request.node.name}"):
            yield
    else:
        yield


def pytest_sessionfinish(session):
    """A run stopped early (``-x``, Ctrl-C) does not leave the simulator suite running."""
    started = getattr(session.config, "snapfit_sim", None)
    if started is not None:
        stop(started[0])
