"""Every kernel compiles to PTX for Ampere (cc 8.0) and Hopper (cc 9.0) with the real NVVM (no
GPU needed; the simulator has no compiler, so this runs only without it)."""

import os

import pytest

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


@pytest.mark.skipif(SIMULATED, reason="compile_ptx needs the real NVVM, not the simulator")
@pytest.mark.parametrize("cc", [(8, 0), (9, 0)])
def test_every_kernel_compiles_to_ptx(cc):
    cuda = pytest.importorskip("numba.cuda")
    from snapfit.solvers import gpu

    for name, sigs in gpu.ptx_signatures().items():
        for sig in sigs:
            ptx, _ = cuda.compile_ptx(gpu.KERNELS[name].py_func, sig, cc=cc)
            assert f".target sm_{cc[0]}{cc[1]}" in ptx, name
            if name == "cd_pass":
                assert "atom.global.add.f64" in ptx  # w is updated by float64 atomics
                assert "bar.sync" in ptx  # shared-memory reduction barriers


def test_numpy_aliases_numba_cuda_names_are_put_back(monkeypatch):
    """NumPy 2.5 dropped ``row_stack``, which numba-cuda 0.30.4 overloads at its first compile:
    the kernels module puts the alias back (as ``vstack``) only where it is missing."""
    import numpy as np

    from snapfit.solvers import gpu

    assert gpu.restore_numpy_aliases() == []  # NumPy here still has it, or it was put back
    monkeypatch.delattr(np, "row_stack", raising=False)
    assert gpu.restore_numpy_aliases() == ["row_stack"]
    assert np.row_stack is np.vstack


@pytest.mark.skipif(SIMULATED, reason="the simulator's device has no driver attributes")
def test_the_launch_reads_attributes_the_driver_has():
    """numba-cuda's ``Device.<NAME>`` asks for ``CU_DEVICE_ATTRIBUTE_<NAME>``: each attribute
    the launch rule reads exists in the CUDA bindings (a misspelt one fell back silently)."""
    driver = pytest.importorskip("cuda.bindings.driver")
    from snapfit.gpu.launch import ATTRIBUTES

    for name in ATTRIBUTES.values():
        assert hasattr(driver.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}"), name
