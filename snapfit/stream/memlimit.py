"""How much memory this process may still use: the host's ``MemAvailable`` and cgroup limits.

In a container (Docker, Kubernetes, a batch scheduler's job) the host has memory free that the
process may not take: going past its cgroup's limit gets it OOM-killed, with no chance to raise
our own clear "budget" error. So the default budget is taken from the tightest of the host's
available memory and, for the process's memory cgroup and each of its ancestors, the limit minus
what the cgroup already uses (reclaimable page cache not counted, as the kubelet counts it).
Both cgroup versions are read: v2 (``memory.max``, ``memory.current``) and v1
(``memory.limit_in_bytes``, ``memory.usage_in_bytes``); "no limit" is ``max`` in v2 and a
number near 2^63 in v1.
"""

from __future__ import annotations

import os

#: v1 reports "no limit" as the largest page-aligned int64; anything this large is no limit.
_UNLIMITED = 1 << 60


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _stat(path: str, key: str) -> int:
    text = _read(path) or ""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return 0


def _cgroup_dirs(proc_cgroup: str, root: str) -> list[tuple[str, int]]:
    """(directory, version) of this process's memory cgroup and its ancestors, deepest first."""
    text = _read(proc_cgroup)
    if text is None:
        return []
    found = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "" and os.path.exists(os.path.join(root, "cgroup.controllers")):
            base, version = root, 2
        elif "memory" in controllers.split(","):
            base, version = os.path.join(root, "memory"), 1
        else:
            continue
        rel = path.strip("/")
        while True:
            found.append((os.path.join(base, rel) if rel else base, version))
            if not rel:
                break
            rel = os.path.dirname(rel)
    return found


def cgroup_available(
    proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup"
) -> int | None:
    """Bytes this process's memory cgroups still allow, or None when no limit applies."""
    best = None
    for directory, version in _cgroup_dirs(proc_cgroup, root):
        if version == 2:
            limit, usage = _read(f"{directory}/memory.max"), _read(f"{directory}/memory.current")
            cache = _stat(f"{directory}/memory.stat", "inactive_file")
        else:
            limit = _read(f"{directory}/memory.limit_in_bytes")
            usage = _read(f"{directory}/memory.usage_in_bytes")
            cache = _stat(f"{directory}/memory.stat", "total_inactive_file")
        if limit is None or not limit.isdigit() or int(limit) >= _UNLIMITED:
            continue
        used = max(0, int(usage) - cache) if usage and usage.isdigit() else 0
        free = max(0, int(limit) - used)
        best = free if best is None else min(best, free)
    return best


def host_available(meminfo: str = "/proc/meminfo") -> int | None:
    """``MemAvailable`` of the host in bytes, or None when it cannot be read."""
    for line in (_read(meminfo) or "").splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def available_memory(
    meminfo: str = "/proc/meminfo",
    proc_cgroup: str = "/proc/self/cgroup",
    root: str = "/sys/fs/cgroup",
) -> int | None:
    """The tightest of the host's available memory and the cgroup limits (None: unknown)."""
    known = [
        v for v in (host_available(meminfo), cgroup_available(proc_cgroup, root)) if v is not None
    ]
    return min(known) if known else None


def release_arrow_memory() -> None:
    """Hand the pages Arrow's allocator keeps after decoding back to the system.

    pyarrow's default pool (mimalloc or jemalloc) keeps freed pages mapped for reuse, so after
    the first pass decoded Parquet the process kept ~80 MB (300k rows, 40 MB budget) it no longer
    used and that no budget charges; at Criteo-day scale this was most of what took the peak RSS
    over the budget. Called when a phase that decodes Parquet ends.
    """
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
