"""``snapfit info --device`` under the simulator: its one GPU, the launch, the backend."""

import json

from click.testing import CliRunner

from snapfit.cli import cli


def test_info_device_describes_the_simulated_gpu():
    run = CliRunner().invoke(cli, ["info", "--device"])
    assert run.exit_code == 0, run.output
    lines = run.output.splitlines()
    assert lines[0] == "GPU 0: CUDA simulator (compute capability 5.2), 1 SMs, memory unknown"
    assert lines[1] == "  backend: numba/simulator"
    assert "1 blocks x 8 threads, team 2, 4 rows in flight" in lines[2]
    run = CliRunner().invoke(cli, ["info", "--device", "--json"])
    (gpu,) = json.loads(run.output)["gpus"]
    assert gpu["launch"]["rows_in_flight"] == 4 and gpu["simulated"] is True
