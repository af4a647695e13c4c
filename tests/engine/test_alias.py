"""Aliased views: one memory at the head of every view, each view's own tail."""

import ctypes

import pytest

from snapfit.engine import alias
from snapfit.engine.alias import aliased_views, page_entries
from snapfit.errors import ResourceError


def test_heads_are_one_memory_and_tails_each_views_own():
    n = 2 * page_entries()
    views = aliased_views(n, 5, 3)
    assert [len(v) for v in views] == [n + 5] * 3
    assert not any(v.any() for v in views)  # zeroed
    views[2][n - 1] = 4.0
    views[0][0] += 1.0
    for v in views:
        assert v[n - 1] == 4.0 and v[0] == 1.0
    views[1][n + 4] = 7.0
    assert views[0][n + 4] == 0.0 and views[2][n + 4] == 0.0
    assert views[0].ctypes.data != views[1].ctypes.data  # different addresses, same pages


def test_a_head_of_part_of_a_page_is_refused():
    with pytest.raises(ValueError, match="pages"):
        aliased_views(page_entries() + 1, 1, 2)


def test_no_posix_mappings_name_the_deterministic_scheme(monkeypatch):
    def missing(*args, **kwargs):
        raise OSError("no libc")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    with pytest.raises(ResourceError, match="deterministic=True"):
        alias.aliased_views(page_entries(), 1, 2)
