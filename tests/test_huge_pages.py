"""Arrays in one region advised for transparent huge pages (storage/huge_pages): the same values as
safetensors' own reader, laid out aligned in one mapping, and the advice really given where Linux takes it."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from whistle_stop.backends.storage import huge_pages
from whistle_stop.backends.storage.huge_pages import HugeRegion, describe, load_safetensors


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "a": rng.standard_normal((300, 77)).astype(np.float32),
        "b": rng.integers(0, 255, (3, 5000), dtype=np.uint8),
        "c": rng.integers(0, 65535, 9, dtype=np.uint16),
        "d": rng.standard_normal(1).astype(np.float32),
        "scalar": np.array(3.5, np.float32),
        "empty": np.zeros((0, 4), np.float32),
        "one row": rng.integers(-128, 127, (1, 33), dtype=np.int8),
    }


@pytest.mark.parametrize("chunk", [huge_pages.CHUNK, 1000])  # 1000: every tensor in pieces of rows
def test_the_arrays_are_the_files_aligned_in_one_region(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(huge_pages, "CHUNK", chunk)
    path = tmp_path / "m.safetensors"
    save_file(_tensors(), str(path))
    arrays, region = load_safetensors(path)
    expected = load_file(str(path))
    assert arrays.keys() == expected.keys()
    for name, array in arrays.items():
        np.testing.assert_array_equal(array, expected[name])
        assert array.dtype == expected[name].dtype and array.flags.c_contiguous
        assert array.ctypes.data % huge_pages.ALIGN == 0
        if array.size:  # an empty array's pointer is numpy's to choose
            assert (
                region.address <= array.ctypes.data and array.ctypes.data + array.nbytes <= region.address + region.size
            )
    assert region.used >= sum(a.nbytes for a in arrays.values())
    arrays["a"][0, 0] = 7.0  # the process's own memory: writable, never the file
    assert load_file(str(path))["a"][0, 0] != 7.0


def test_a_region_refuses_more_than_it_holds():
    region = HugeRegion(1024)
    region.array((200,), np.dtype(np.float32))
    with pytest.raises(MemoryError):
        region.array((200,), np.dtype(np.float32))


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or huge_pages.thp_setting() not in ("always", "madvise"),
    reason="needs Linux with transparent huge pages on (always or madvise)",
)
def test_linux_is_asked_for_huge_pages_and_the_note_says_what_it_gave():
    region = HugeRegion(8 * huge_pages.HUGE_PAGE)
    region.array((4 * huge_pages.HUGE_PAGE,), np.dtype(np.uint8))[...] = 1  # pages exist once written
    flags = huge_pages.mapping_fields(region.address)["VmFlags"].split()
    assert region.advised and "hg" in flags  # MADV_HUGEPAGE applied to the mapping
    huge = region.huge_bytes()
    assert huge is not None and huge % huge_pages.HUGE_PAGE == 0
    note = describe(region)
    expected = (
        "weights in 2 MB pages (all 8 MB)" if huge >= region.used else f"weights in 2 MB pages: {huge / 1e6:.0f} of"
    )
    assert note.startswith(expected)  # what smaps says the kernel gave, not the advice


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's smaps")
def test_each_region_is_a_mapping_of_its_own_so_its_pages_are_its_own():
    """Linux merges neighbouring anonymous mappings of the same flags, and smaps then counts both as
    one: a second region's note would take the first's huge pages as its own."""
    first, second = HugeRegion(8 * huge_pages.HUGE_PAGE), HugeRegion(4 * huge_pages.HUGE_PAGE)
    first.array((8 * huge_pages.HUGE_PAGE,), np.dtype(np.uint8))[...] = 1
    second.array((4096,), np.dtype(np.uint8))[...] = 1
    for region in (first, second):
        size_kb = int(huge_pages.mapping_fields(region.address)["Size"].split()[0])
        assert region.size <= size_kb * 1024 <= region.size + huge_pages.HUGE_PAGE
    huge = second.huge_bytes()
    assert huge is None or huge <= huge_pages.HUGE_PAGE  # at most the one page its 4 KB were written in


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's smaps")
def test_smaps_is_read_whatever_the_names_of_the_files_mapped(tmp_path):
    """A model folder's name need not be UTF-8; smaps lists every mapped file's path."""
    import mmap
    import os

    path = os.path.join(os.fsencode(tmp_path), b"mod\xe8le.safetensors")
    with open(path, "wb") as f:
        f.write(b"x" * 4096)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ):
        region = HugeRegion(1 << 20)
        assert "VmFlags" in huge_pages.mapping_fields(region.address)


def test_4_kb_pages_when_asked_are_advised_against_huge_ones():
    """With THP "always" an aligned mapping gets 2 MB pages unless advised MADV_NOHUGEPAGE."""
    region = HugeRegion(1 << 20, wanted=False)
    if sys.platform.startswith("linux"):
        assert region.advised and "nh" in huge_pages.mapping_fields(region.address)["VmFlags"].split()
    assert describe(region) == "weights in 4 KB pages (as asked)"


def test_without_the_advice_the_note_says_4_kb_pages(monkeypatch):
    monkeypatch.setattr(huge_pages, "thp_setting", lambda: "never")
    region = HugeRegion(1 << 20)
    assert not region.advised
    assert describe(region) == "weights in 4 KB pages (transparent huge pages never)"
