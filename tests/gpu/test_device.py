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


def test_no_driver_library_means_no_numba_cuda_import():
    """A fit and predictions on host data (``device="auto"``) on a host without a CUDA driver
    never import numba.cuda (~40 MB) or the device kernels (~30 MB more)."""
    import subprocess
    import sys

    code = (
        "import sys; import numpy as np; from snapfit import LogisticRegression; "
        "X = np.random.default_rng(0).random((60, 3)); "
        "m = LogisticRegression(max_iter=3).fit(X, np.arange(60) % 2); "
        "m.predict_proba(X); m.predict(X); m.predict_log_proba(X); "
        "print('numba.cuda' in sys.modules)"
    )
    from snapfit.gpu import device

    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CUDA_DRIVER"}
    if "NUMBA_CUDA_DRIVER" not in os.environ and device._driver_loadable():  # pragma: no cover
        pytest.skip("a CUDA driver library loads here")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == "False", out.stderr


def test_a_driver_override_that_does_not_load_is_named(monkeypatch):
    from snapfit.gpu import device

    monkeypatch.setenv("NUMBA_CUDA_DRIVER", "/nonexistent/libcuda.so")
    ok, reason = device._probe()
    assert not ok and "/nonexistent/libcuda.so does not load" in reason


def test_a_driver_library_without_a_device(monkeypatch):
    """Past the library check, numba.cuda itself decides (here: no driver, so no device)."""
    from snapfit.gpu import device

    monkeypatch.setattr(device, "_driver_loadable", lambda: True)
    if device.available():  # pragma: no cover - only on machines with a GPU
        pytest.skip("a GPU is present")
    assert device._probe() == (False, "no CUDA driver or device was found")


def test_info_device_without_a_gpu_says_why_and_exits_0():
    import json

    from click.testing import CliRunner

    from snapfit.cli import cli
    from snapfit.gpu.launch import describe_devices

    if available():  # pragma: no cover - only on machines with a GPU
        pytest.skip("a GPU is present")
    from snapfit.gpu.device import _probe

    reason = _probe()[1]  # here: the driver library does not load
    assert "no CUDA driver" in reason
    assert describe_devices() == {"gpus": [], "reason": reason}
    run = CliRunner().invoke(cli, ["info", "--device"])
    assert run.exit_code == 0 and run.output == f"No GPU: {reason}.\n"
    run = CliRunner().invoke(cli, ["info", "--device", "--json"])
    assert run.exit_code == 0 and json.loads(run.output)["gpus"] == []
    for args in (["info"], ["info", "data.parquet", "--device"]):
        run = CliRunner().invoke(cli, args)
        assert run.exit_code == 2 and "Give a dataset or model PATH, or --device" in run.output
