"""The default launch: a pure function of the device's properties and the chunk's shape, checked
for H100-, A100- and V100-like devices and for the simulator's fake device."""

from types import SimpleNamespace

import numpy as np
import pytest

from snapfit.engine import Devices, InMemorySource
from snapfit.gpu import SIMULATOR_LAUNCH
from snapfit.gpu.launch import (
    DeviceProps,
    Launch,
    choose_launch,
    describe,
    device_props,
    props_of,
)
from snapfit.train import make_trainer, resolve_devices
from tests.gpu.sim.conftest import split_chunks


def gpu(name, sms, *, max_block=1024, warp=32, per_sm=2048):
    return DeviceProps(name, (9, 0), sms, max_block, warp, per_sm, 80 << 30)


H100, A100, V100 = gpu("H100", 132), gpu("A100", 108), gpu("V100", 80)


@pytest.mark.parametrize("props", [H100, A100, V100], ids=lambda p: p.name)
def test_criteo_like_rows_fill_each_sm_with_one_block_of_four_warps(props):
    # 39 values per row: a team of 64 lanes, 2 rows per 128-thread block, one block per SM
    got = choose_launch(props, 65536, 39.0)
    assert got == Launch(blocks=props.sm_count, block=128, team=64,
                         rows_in_flight=2 * props.sm_count)  # fmt: skip
    assert got.rows_in_flight < 1584  # the old default's ~1,600 on an H100


def test_row_length_and_chunk_shape():
    assert choose_launch(H100, 65536, 5.0) == Launch(132, 128, 8, 132 * 16)  # short rows
    assert choose_launch(H100, 65536, 1000.0) == Launch(132, 256, 256, 132)  # a block per row
    assert choose_launch(V100, 100, 39.0) == Launch(50, 128, 64, 100)  # few rows: fewer blocks
    assert choose_launch(V100, 1, 39.0).rows_in_flight == 1
    assert choose_launch(V100, 0, 39.0) == Launch(1, 128, 64, 0)


def test_device_limits_bound_the_block():
    small = gpu("small", 4, max_block=64, warp=32, per_sm=1024)
    assert choose_launch(small, 1000, 39.0) == Launch(4, 64, 64, 4)
    wide_warp = gpu("wide", 10, warp=64)
    assert choose_launch(wide_warp, 1000, 39.0) == Launch(10, 256, 64, 40)


def test_the_hot_block_fills_every_sm():
    """Under the hot block rows in flight share only sparse columns: every SM holds as many
    blocks as it can (16 of 128 threads), 4,224 Criteo-like rows in flight on an H100."""
    got = choose_launch(H100, 65536, 39.0, fill=True)
    assert got == Launch(16 * 132, 128, 64, 2 * 16 * 132)
    assert choose_launch(H100, 100, 39.0, fill=True) == Launch(50, 128, 64, 100)  # few rows
    assert choose_launch(H100, 65536, 39.0, fill=True, max_blocks=8).blocks == 8


def test_options_override_the_rule():
    assert choose_launch(H100, 65536, 39.0, max_blocks=1024) == Launch(1024, 128, 64, 2048)
    assert choose_launch(H100, 65536, 39.0, block=64, team=32) == Launch(132, 64, 32, 264)
    assert choose_launch(H100, 65536, 39.0, team=4) == Launch(132, 128, 4, 132 * 32)


def test_the_simulator_gets_its_small_launch():
    props = device_props(0)
    assert props.simulated and props.name == "CUDA simulator" and props.memory is None
    assert device_props(0) is props  # read once
    want = SIMULATOR_LAUNCH
    got = choose_launch(props, 64, 39.0)
    assert (got.block, got.team, got.blocks) == (want["block"], want["team"], want["max_blocks"])
    assert got.rows_in_flight == 4
    assert choose_launch(props, 64, 39.0, block=16) == Launch(1, 16, 16, 1)  # team from rows
    assert choose_launch(props, 64, 3.0, team=16) == Launch(1, 16, 16, 1)  # block >= team
    assert choose_launch(props, 64, 3.0, max_blocks=2) == Launch(2, 8, 2, 8)


def test_props_from_a_numba_device_object():
    dev = SimpleNamespace(name=b"NVIDIA H100 80GB HBM3", compute_capability=(9, 0),
                          MULTIPROCESSOR_COUNT=132, MAX_THREADS_PER_BLOCK=1024, WARP_SIZE=32,
                          MAX_THREADS_PER_MULTIPROCESSOR=1536)  # fmt: skip
    props = props_of(dev, 85e9, simulated=False)
    assert props == DeviceProps("NVIDIA H100 80GB HBM3", (9, 0), 132, 1024, 32, 1536, 85 * 10**9)
    bare = props_of(SimpleNamespace(compute_capability=(5, 2)), float("inf"), simulated=True)
    assert (bare.sm_count, bare.memory, bare.name) == (1, None, "CUDA simulator")
    # A real device's failed query is an error, never the simulator's stand-in value.
    del dev.MULTIPROCESSOR_COUNT
    with pytest.raises(AttributeError, match="MULTIPROCESSOR_COUNT"):
        props_of(dev, 85e9, simulated=False)


def test_describe_reports_the_launch_and_backend():
    info = describe(0, "numba/simulator")
    assert info["compute_capability"] == "5.2" and info["backend"] == "numba/simulator"
    assert info["launch"] == {"blocks": 1, "block": 8, "team": 2, "rows_in_flight": 4}
    assert info["chunk"] == {"rows": 65536, "nnz_per_row": 39.0}
    assert info["occupancy"] == 8 / 2048 and info["sm_count"] == 1


def test_the_unit_takes_the_rule_by_default(small):
    X, y, w, problem, _ = small
    devices = resolve_devices("gpu", 1)
    assert devices.gpu_options is None  # nothing passed: the unit applies the rule
    tr = make_trainer(InMemorySource(split_chunks(X, y, w, 64), 12), problem, devices)
    try:
        tr.run_epoch()
        gpu_unit = tr.units[0]
        dc = gpu_unit.resident[0]
        assert gpu_unit._launch(64, dc) == Launch(1, 8, 2, 4)
    finally:
        tr.close()
    tr = make_trainer(InMemorySource(split_chunks(X, y, w, 64), 12), problem,
                      Devices(0, (0,), {"block": 16, "team": 4}))  # fmt: skip
    try:
        tr.run_epoch()
        assert tr.units[0]._launch(64, tr.units[0].resident[0]) == Launch(1, 16, 4, 4)
        assert np.isfinite(tr.w).all()
    finally:
        tr.close()
