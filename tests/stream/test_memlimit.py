"""The default budget follows the container's memory limit, not only the host's free memory."""

import pytest

from snapfit.stream import budget, memlimit

GB = 10**9


def _fake(tmp_path, *, version, limit, usage, cache=0, parent_limit=None):
    """A fake /proc/self/cgroup, /proc/meminfo (20 GB available) and cgroup tree."""
    root = tmp_path / "cgroup"
    if version == 2:
        (tmp_path / "proc_cgroup").write_text("0::/kubepods/pod1\n")
        leaf, parent = root / "kubepods" / "pod1", root / "kubepods"
        leaf.mkdir(parents=True)
        (root / "cgroup.controllers").write_text("cpu memory\n")
        (leaf / "memory.max").write_text(f"{limit}\n")
        (leaf / "memory.current").write_text(f"{usage}\n")
        (leaf / "memory.stat").write_text(f"anon {usage}\ninactive_file {cache}\n")
        (parent / "memory.max").write_text(f"{parent_limit or 'max'}\n")
        (parent / "memory.current").write_text(f"{usage}\n")
    else:
        (tmp_path / "proc_cgroup").write_text("5:devices:/\n4:memory:/docker/abc\n0::/\n")
        leaf, parent = root / "memory" / "docker" / "abc", root / "memory" / "docker"
        leaf.mkdir(parents=True)
        (leaf / "memory.limit_in_bytes").write_text(f"{limit}\n")
        (leaf / "memory.usage_in_bytes").write_text(f"{usage}\n")
        (leaf / "memory.stat").write_text(f"cache {cache}\ntotal_inactive_file {cache}\n")
        (parent / "memory.limit_in_bytes").write_text(f"{parent_limit or 9223372036854771712}\n")
        (parent / "memory.usage_in_bytes").write_text(f"{usage}\n")
    (tmp_path / "meminfo").write_text(
        "MemTotal:       32000000 kB\nMemAvailable:   19531250 kB\n"  # 20 GB
    )
    return dict(meminfo=str(tmp_path / "meminfo"), proc_cgroup=str(tmp_path / "proc_cgroup"),
                root=str(root))  # fmt: skip


@pytest.mark.parametrize("version", [1, 2])
def test_cgroup_limit_minus_usage_counts_not_the_page_cache(tmp_path, version):
    paths = _fake(tmp_path, version=version, limit=4 * GB, usage=GB, cache=GB // 2)
    assert memlimit.cgroup_available(paths["proc_cgroup"], paths["root"]) == 3 * GB + GB // 2
    assert memlimit.available_memory(**paths) == 3 * GB + GB // 2


@pytest.mark.parametrize("version", [1, 2])
def test_a_tighter_parent_cgroup_wins(tmp_path, version):
    paths = _fake(tmp_path, version=version, limit=8 * GB, usage=GB, parent_limit=3 * GB)
    assert memlimit.available_memory(**paths) == 2 * GB


@pytest.mark.parametrize("version", [1, 2])
def test_no_limit_leaves_the_host_figure(tmp_path, version):
    paths = _fake(tmp_path, version=version, limit="max" if version == 2 else 2**63 - 4096,
                  usage=GB)  # fmt: skip
    assert memlimit.cgroup_available(paths["proc_cgroup"], paths["root"]) is None
    assert memlimit.available_memory(**paths) == 20 * GB


def test_unreadable_everything_is_unknown(tmp_path):
    missing = str(tmp_path / "missing")
    assert memlimit.available_memory(missing, missing, missing) is None


def test_default_budget_is_half_of_the_container_limit(tmp_path, monkeypatch):
    from snapfit.train import resolve_budget

    paths = _fake(tmp_path, version=2, limit=4 * GB, usage=GB)
    real = memlimit.available_memory
    monkeypatch.setattr(memlimit, "available_memory", lambda: real(**paths))
    assert budget.default_memory_budget() == 3 * GB // 2
    assert resolve_budget(None) == 3 * GB // 2
    assert resolve_budget(None, limit=2 * GB) == GB  # a Dask worker's own limit is tighter
    assert resolve_budget("800MB") == 800 * 10**6
    monkeypatch.setattr(memlimit, "available_memory", lambda: None)
    assert budget.default_memory_budget() == 2 * GB
