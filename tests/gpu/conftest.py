"""GPU tests. ``sim/`` needs Numba's CUDA simulator, which is chosen when ``numba.cuda`` is first
imported, so it runs in its own process unless this process already has
``NUMBA_ENABLE_CUDASIM=1`` (as in the coverage command).

That process is the longest part of the suite (19 min in CI on 2 cores at bb03bc1, nearly all
of it one core running simulated CUDA threads under the GIL), so it starts as soon as
collection shows that ``test_simulator.py`` will run, and runs beside the rest of the suite on
the other core; ``test_gpu_code_under_the_simulator``, moved to the end, waits for it and
checks its result. With ``SNAPFIT_GPU_COVERAGE`` set to a coverage ``--include`` pattern (CI
does), it runs under ``coverage run -p``, so the simulator suite runs once and also measures the
GPU modules."""

import os
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
    """Run ``sim/`` under the simulator in a subprocess: always without a GPU (CI), on a GPU
    machine only with ``SNAPFIT_SIM_SUITE=1`` (it takes some 19 minutes of one core)."""
    return not REAL_GPU or os.environ.get("SNAPFIT_SIM_SUITE", "0") not in ("", "0")


SIM_TEST = "test_simulator.py::test_gpu_code_under_the_simulator"
ROOT = Path(__file__).parents[2]


def start_sim_suite():
    """Start ``pytest tests/gpu/sim`` under the simulator; returns ``(process, output file)``."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    run = [sys.executable, "-m"]
    include = os.environ.get("SNAPFIT_GPU_COVERAGE")
    if include:
        run += ["coverage", "run", "-p", f"--include={include}", "-m"]
    out = tempfile.TemporaryFile(mode="w+")
    sim_dir = str(Path(__file__).parent / "sim")
    proc = subprocess.Popen([*run, "pytest", "-q", "-p", "no:cacheprovider", sim_dir], env=env,
                            stdout=out, stderr=subprocess.STDOUT, text=True, cwd=ROOT)  # fmt: skip
    return proc, out


@pytest.hookimpl(tryfirst=True)  # marks added before `-m` deselects
def pytest_collection_modifyitems(config, items):
    """Wait for the simulator suite last: everything else runs meanwhile. On a real GPU, the
    tests of ``sim/`` collected here are marked ``gpu`` and those marked ``sim_only`` skip."""
    waits = [item for item in items if item.nodeid.endswith(SIM_TEST)]
    items[:] = [item for item in items if item not in waits] + waits
    if REAL_GPU:
        for item in items:
            if "/sim/" in item.nodeid.replace("\\", "/"):
                item.add_marker(pytest.mark.gpu)
                if item.get_closest_marker("sim_only"):
                    item.add_marker(pytest.mark.skip(reason="asserts what only the simulator has"))


def pytest_collection_finish(session):
    """Start the simulator suite once the items are final (``-k``, ``-m`` or ``--deselect``
    may have dropped its test: then it does not run at all)."""
    wanted = not SIMULATED and sim_suite_wanted()
    if wanted and any(item.nodeid.endswith(SIM_TEST) for item in session.items):
        session.config.snapfit_sim = start_sim_suite()


def pytest_terminal_summary(terminalreporter, config):
    """The simulator suite's slowest tests, beside this process's (``--durations``): the two
    run side by side, and the longer decides the suite's time."""
    text = getattr(config, "snapfit_sim_report", "")
    at = text.find("slowest")
    if at >= 0:
        section = text[text.rfind("\n", 0, at) + 1 :].split("\n=", 1)[0]
        terminalreporter.write_sep("=", "the simulator suite's slowest tests")
        terminalreporter.write_line(section.split("\n", 1)[-1].rstrip())


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
    if started is not None and started[0].poll() is None:
        started[0].kill()
        started[0].wait()
