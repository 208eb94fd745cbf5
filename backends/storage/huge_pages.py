"""Arrays in transparent huge pages: a decode step reads every weight once, and in 4 KB pages that is a
TLB miss and a page walk per 4 KB (gpt2's int8 matrices: ~30,000 a token; after an idle moment the walks'
own entries are out of the caches too). In 2 MB pages it is ~70.

Linux backs a private anonymous mapping advised `MADV_HUGEPAGE` with 2 MB pages when transparent huge
pages are `always` or `madvise` (/sys/kernel/mm/transparent_hugepage/enabled), as far as it finds free
2 MB blocks when the pages are first written. Elsewhere (another OS, THP `never`) the arrays are the same
in 4 KB pages. `HugeRegion.huge_bytes` says how much the kernel really gave, for the engine's notes.
"""

from __future__ import annotations

import ctypes
import mmap
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from safetensors import safe_open

HUGE_PAGE = 2 << 20
PAGE = mmap.PAGESIZE
ALIGN = 64  # each array starts on a cache line, as numpy's own allocations do
CHUNK = 16 << 20  # a load copies at most this much of a tensor at a time
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_setting() -> str:
    """The kernel's THP mode ("always", "madvise", "never"), or "" where there is none to read."""
    try:
        chosen = re.search(r"\[(\w+)\]", THP_SETTING.read_text())
    except OSError:
        return ""
    return chosen.group(1) if chosen else ""


@dataclass
class HugeRegion:
    """One private anonymous mapping, advised for huge pages (or, not `wanted`, against them), that
    arrays are laid out in, between two guard pages."""

    size: int
    wanted: bool = True  # False: ordinary pages (the user's choice), the same layout
    advised: bool = field(init=False, default=False)  # the kernel took the advice, either way
    _map: mmap.mmap = field(init=False, repr=False)
    _bytes: np.ndarray = field(init=False, repr=False)
    _start: int = field(init=False, default=0)  # the first byte at a 2 MB boundary
    _used: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        private = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
        # MAP_SHARED anonymous memory is shmem, whose huge pages are a separate setting (often never)
        length = self.size + HUGE_PAGE + 2 * PAGE if private else self.size
        self._map = mmap.mmap(-1, length, flags=private) if private else mmap.mmap(-1, self.size)
        # With THP "always" an aligned mapping gets 2 MB pages unless advised against them.
        advice = "MADV_HUGEPAGE" if self.wanted else "MADV_NOHUGEPAGE"
        if private and hasattr(mmap, advice) and (not self.wanted or thp_setting() in ("always", "madvise")):
            try:
                self._map.madvise(getattr(mmap, advice))
                self.advised = True
            except OSError:  # a kernel built without THP
                pass
        self._bytes = np.frombuffer(self._map, np.uint8)
        base = self._bytes.ctypes.data
        self._start = PAGE + (-(base + PAGE)) % HUGE_PAGE if private else 0
        if private:  # Linux merges neighbouring anonymous mappings of the same flags: smaps would then
            # count another region's huge pages as this one's. A page without access at each end parts them.
            _guard(base)
            _guard(base + (len(self._map) - 1) // PAGE * PAGE)

    def array(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An uninitialised array carved from the region (which the array keeps alive)."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        offset = self._start + self._used
        if self._used + nbytes > self.size:
            raise MemoryError(f"the region's {self.size} bytes are used up")
        self._used += (nbytes + ALIGN - 1) // ALIGN * ALIGN
        return self._bytes[offset : offset + nbytes].view(dtype).reshape(shape)

    @property
    def used(self) -> int:
        """Bytes handed out, padding included."""
        return self._used

    @property
    def address(self) -> int:
        """The first byte the arrays may use."""
        return self._bytes.ctypes.data + self._start

    def huge_bytes(self) -> int | None:
        """Bytes of the region the kernel backs with huge pages now (Linux's smaps), or None unknown."""
        size = mapping_fields(self.address).get("AnonHugePages")
        return int(size.split()[0]) * 1024 if size else None


def _guard(address: int) -> None:
    """The page at `address` without access (its own mapping now); nothing where libc has no mprotect."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        libc.mprotect(address, PAGE, 0)  # PROT_NONE
    except (OSError, AttributeError):
        pass


def mapping_fields(address: int) -> dict[str, str]:
    """The fields of /proc/self/smaps for the mapping holding `address` (e.g. "AnonHugePages": "2048 kB",
    "VmFlags": "rd wr mr mw me ac hg"); empty off Linux or where the file cannot be read."""
    if not sys.platform.startswith("linux"):
        return {}
    try:
        smaps = Path("/proc/self/smaps").read_text(errors="replace")  # a mapped file's name need not be UTF-8
    except OSError:
        return {}
    fields: dict[str, str] = {}
    inside = False
    for line in smaps.splitlines():
        head = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
        if head:
            if inside:
                break
            inside = int(head.group(1), 16) <= address < int(head.group(2), 16)
        elif inside:
            name, _, value = line.partition(":")
            fields[name] = value.strip()
    return fields


def load_safetensors(path: Path, huge: bool = True) -> tuple[dict[str, np.ndarray], HugeRegion]:
    """Every tensor of a safetensors file copied into one region advised for huge pages (`huge`), in
    pieces of at most CHUNK bytes (the peak is the region and one piece, not a second copy of a tensor)."""
    with safe_open(str(path), framework="np") as f:
        names = list(f.keys())
        # the file's size bounds the tensors' bytes; each may add up to ALIGN of padding
        region = HugeRegion(path.stat().st_size + ALIGN * len(names), wanted=huge)
        arrays = {name: _copy_in(f, name, region) for name in names}
    return arrays, region


def _copy_in(f, name: str, region: HugeRegion) -> np.ndarray:
    """One tensor of an open safetensors file into the region, CHUNK bytes of rows at a time."""
    piece = f.get_slice(name)
    shape = tuple(piece.get_shape())
    if len(shape) == 0 or shape[0] < 2:  # nothing to split: a scalar, an empty tensor or one row
        tensor = f.get_tensor(name)
        out = region.array(tensor.shape, tensor.dtype)
        out[...] = tensor
        return out
    first = piece[0:1]
    out = region.array(shape, first.dtype)
    out[0:1] = first
    rows = max(1, CHUNK // max(1, first.nbytes))
    for start in range(1, shape[0], rows):
        stop = min(start + rows, shape[0])
        out[start:stop] = piece[start:stop]
    return out


def describe(region: HugeRegion, what: str = "weights") -> str:
    """For an engine's notes: how much of the region the kernel backs with huge pages."""
    used_mb = region.used / 1e6
    if not region.wanted:
        if region.advised or thp_setting() != "always":
            return f"{what} in 4 KB pages (as asked)"
        return f"{what} asked for 4 KB pages; the kernel refused the advice, and with THP always some may be 2 MB"
    if not region.advised:
        setting = thp_setting()
        why = f"transparent huge pages {setting}" if setting else "no transparent huge pages here"
        return f"{what} in 4 KB pages ({why})"
    huge = region.huge_bytes()  # read only for a region advised: smaps is the whole process's map
    if huge is None:
        return f"{what} advised for 2 MB pages (how many the kernel gave is not known here)"
    if huge >= region.used:  # the last 2 MB page also holds the region's unused tail
        return f"{what} in 2 MB pages (all {used_mb:.0f} MB)"
    return f"{what} in 2 MB pages: {huge / 1e6:.0f} of {used_mb:.0f} MB (the rest in 4 KB pages)"
