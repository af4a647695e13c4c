"""Run ``tests/gpu/sim`` under the CUDA simulator in a fresh process (see ``conftest.py``)."""

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
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(SIM_DIR)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).parents[2],
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
