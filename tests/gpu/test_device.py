"""Device choice without a GPU: ``device="gpu"`` is a clear error, ``"auto"`` means the CPU."""

import logging
import os

import pytest

from snapfit.errors import ResourceError
from snapfit.gpu import available, device_count, resolve_device

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
pytestmark = pytest.mark.skipif(SIMULATED, reason="the simulator counts as a GPU")


def test_gpu_without_a_gpu_is_a_resource_error():
    if available():  # pragma: no cover - only on machines with a GPU
        pytest.skip("a GPU is present")
    with pytest.raises(ResourceError, match="device='gpu' was requested") as e:
        resolve_device("gpu")
    assert "device='cpu'" in str(e.value) and e.value.exit_code == 4
    assert device_count() == 0  # so device_ids=[0] is refused too, before any unit is built


def test_auto_falls_back_to_the_cpu_with_one_log_line(caplog):
    if available():  # pragma: no cover - only on machines with a GPU
        pytest.skip("a GPU is present")
    with caplog.at_level(logging.INFO, logger="snapfit"):
        assert resolve_device("auto") == "cpu"
    records = [r for r in caplog.records if r.name == "snapfit"]
    assert len(records) == 1 and "training on the CPU" in records[0].getMessage()


def test_cpu_and_bad_names():
    assert resolve_device("cpu") == "cpu"
    with pytest.raises(ValueError, match="'auto', 'cpu' or 'gpu'"):
        resolve_device("tpu")


def test_info_device_without_a_gpu_says_why_and_exits_0():
    import json

    from click.testing import CliRunner

    from snapfit.cli import cli
    from snapfit.gpu.launch import describe_devices

    if available():  # pragma: no cover - only on machines with a GPU
        pytest.skip("a GPU is present")
    assert describe_devices() == {"gpus": [], "reason": "no CUDA driver or device was found"}
    run = CliRunner().invoke(cli, ["info", "--device"])
    assert run.exit_code == 0 and run.output == "No GPU: no CUDA driver or device was found.\n"
    run = CliRunner().invoke(cli, ["info", "--device", "--json"])
    assert run.exit_code == 0 and json.loads(run.output)["gpus"] == []
    for args in (["info"], ["info", "data.parquet", "--device"]):
        run = CliRunner().invoke(cli, args)
        assert run.exit_code == 2 and "Give a dataset PATH, or --device" in run.output
