"""Residency measured with mincore on real files, and the warm's bounds: memory, time, errors."""
import pytest

from ansible_collections.inferops.sglang.plugins.module_utils._host import pagecache as _pagecache
from ..conftest import MIB, evict, write


@pytest.fixture
def cold(tmp_path, kept):
    """Files of 24 MiB and 40 MiB + 3 bytes, not in the page cache; what the test or a warm reads of them stays
    (kept)."""
    paths = [write(tmp_path / "a.safetensors", 24 * MIB), write(tmp_path / "b.safetensors", 40 * MIB + 3)]
    for p in paths:
        evict(p)
    return paths


def test_a_file_evicted_is_not_resident_and_one_read_is(cold, kept):
    size, held = _pagecache.resident(cold[1])
    assert size == 40 * MIB + 3 and held < size // 10
    kept.map(cold[1])
    assert _pagecache.resident(cold[1]) == (size, size)
    kept.map(cold[0])
    assert _pagecache.residency(cold) == {"bytes": 64 * MIB + 3, "resident": 64 * MIB + 3, "errors": []}


def test_the_mappings_are_chunked_and_add_up(cold, kept, monkeypatch):
    kept.map(cold[1])
    evict(cold[0])
    monkeypatch.setattr(_pagecache, "MAP_SPAN", 3 * _pagecache.PAGE)  # many mappings, the last one short
    size, vec = _pagecache.pages(cold[1])
    assert len(vec) == (size + _pagecache.PAGE - 1) // _pagecache.PAGE and set(vec) == {1}
    assert _pagecache.resident(cold[0])[1] < 24 * MIB // 10


def test_the_warm_reads_what_is_missing_until_all_is_resident(cold, kept):
    kept.map(cold[0])  # resident already: counted, not read again
    out = _pagecache.warm(cold, margin=0, budget=60, readers=2)
    assert out["errors"] == [] and out["stopped"] is None
    assert out["resident_before"] >= 24 * MIB and out["resident_before"] < 24 * MIB + 4 * MIB
    assert 40 * MIB <= out["read"] <= 40 * MIB + _pagecache.WINDOW
    assert out["resident_after"] == out["bytes"] == 64 * MIB + 3
    assert out["allowance"] == out["available"] - out["resident_before"]


def test_a_margin_that_leaves_nothing_reads_nothing(cold):
    out = _pagecache.warm(cold, margin=_pagecache.mem_available() + (1 << 30), budget=60)
    assert out["allowance"] == 0 and out["read"] == 0 and out["stopped"] == "memory"
    assert out["resident_after"] < 64 * MIB // 10


def test_a_budget_spent_stops_before_reading(cold):
    out = _pagecache.warm(cold, margin=0, budget=0)
    assert out["read"] == 0 and out["stopped"] == "budget" and out["errors"] == []
    assert out["resident_after"] < 64 * MIB // 10


def test_errors_are_reported_not_raised_and_the_rest_is_warmed(cold, tmp_path):
    missing, folder = str(tmp_path / "gone.bin"), str(tmp_path)
    out = _pagecache.warm([missing, folder] + cold, margin=0, budget=60)
    assert len(out["errors"]) == 2 and out["errors"][0].startswith(missing + ": ")
    assert out["resident_after"] == out["bytes"] == 64 * MIB + 3
    assert _pagecache.residency([missing])["errors"] and _pagecache.residency([missing])["bytes"] == 0


def test_mem_available_from_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       32000000 kB\nMemFree:         1000 kB\nMemAvailable:   2048 kB\n")
    assert _pagecache.mem_available(str(meminfo)) == 2048 * 1024
    assert _pagecache.mem_available(str(tmp_path / "none")) is None
    assert _pagecache.mem_available() > 0
