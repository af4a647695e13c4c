"""GPU tests. ``sim/`` needs Numba's CUDA simulator, which is chosen when ``numba.cuda`` is first
imported, so it runs in its own process unless this process already has
``NUMBA_ENABLE_CUDASIM=1`` (as in the coverage command).

That process is the longest part of the suite (~8 min, nearly all of it one core running
simulated CUDA threads under the GIL), so it starts as soon as collection shows that
``test_simulator.py`` will run, and runs beside the rest of the suite on the other core;
``test_gpu_code_under_the_simulator``, moved to the end, waits for it and checks its result. With
``SNAPFIT_GPU_COVERAGE`` set to a coverage ``--include`` pattern (CI does), it runs under
``coverage run -p``, so the simulator suite runs once and also measures the GPU modules."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")

collect_ignore_glob = [] if SIMULATED else ["sim/*"]

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


def pytest_collection_modifyitems(config, items):
    """Wait for the simulator suite last: everything else runs meanwhile."""
    waits = [item for item in items if item.nodeid.endswith(SIM_TEST)]
    items[:] = [item for item in items if item not in waits] + waits


def pytest_collection_finish(session):
    """Start the simulator suite once the items are final (``-k`` or ``--deselect`` may have
    dropped its test: then it does not run at all)."""
    if not SIMULATED and any(item.nodeid.endswith(SIM_TEST) for item in session.items):
        session.config.snapfit_sim = start_sim_suite()


def pytest_sessionfinish(session):
    """A run stopped early (``-x``, Ctrl-C) does not leave the simulator suite running."""
    started = getattr(session.config, "snapfit_sim", None)
    if started is not None and started[0].poll() is None:
        started[0].kill()
        started[0].wait()
