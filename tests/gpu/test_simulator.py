"""Run ``tests/gpu/sim`` under the CUDA simulator in a fresh process (see ``conftest.py``).

With ``SNAPFIT_GPU_COVERAGE`` set to a coverage ``--include`` pattern (CI does), that process
runs under ``coverage run -p``, so the simulator suite runs once and also measures the GPU
modules' coverage."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")

SIM_DIR = Path(__file__).parent / "sim"


@pytest.mark.skipif(SIMULATED, reason="this process already runs the sim tests directly")
def test_gpu_code_under_the_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    run = [sys.executable, "-m"]
    include = os.environ.get("SNAPFIT_GPU_COVERAGE")
    if include:
        run += ["coverage", "run", "-p", f"--include={include}", "-m"]
    proc = subprocess.run(
        [*run, "pytest", "-q", "-p", "no:cacheprovider", str(SIM_DIR)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=Path(__file__).parents[2],
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
