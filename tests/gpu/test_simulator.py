"""The GPU lane (``tests/gpu/lane.py``: the ``tests/gpu/sim`` suite under the CUDA simulator,
then the slow GPU tests that need none), in its own process: started by ``conftest.py`` when
collection ends, so it runs beside the rest of the suite; this test waits for it and fails with
its output when it fails."""

import os

import pytest

from tests.gpu.conftest import sim_suite_wanted, start_sim_suite, stop

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


@pytest.mark.skipif(SIMULATED, reason="this process already runs the sim tests directly")
@pytest.mark.skipif(not sim_suite_wanted(), reason="a GPU is here: SNAPFIT_SIM_SUITE=1 asks")
def test_the_gpu_lane(request):
    started = getattr(request.config, "snapfit_sim", None)
    proc, out = started if started is not None else start_sim_suite()
    try:
        code = proc.wait(timeout=1200)
    finally:
        stop(proc)
    out.seek(0)
    text = out.read()
    request.config.snapfit_sim_report = text  # its slowest tests join the run's summary
    assert code == 0, text[-9000:]
