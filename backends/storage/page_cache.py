"""Whether a file's pages are in the OS page cache, and dropping them (a cold start that says so).

A "cold" load that finds the weights in the page cache reads RAM, not the disk; one that does
not pays for the disk. `resident_fraction` says which (Linux: mmap + mincore), `evict` drops a
file's clean pages (posix_fadvise DONTNEED). Neither needs privileges. Pages that another
process has mapped (a running numpy or transformers worker mmaps the same safetensors) stay
resident: the kernel drops only unmapped pages, so the share measured after an eviction is
what the next engine really starts with.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

_PROT_READ = 0x1
_MAP_SHARED = 0x01
_MAP_FAILED = ctypes.c_void_p(-1).value


@lru_cache(maxsize=1)
def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    return libc


def measurable() -> bool:
    """True where resident_fraction can answer (Linux)."""
    return _libc() is not None


def evictable() -> bool:
    """True where evict can drop pages (posix_fadvise: Linux and some other Unixes)."""
    return hasattr(os, "posix_fadvise") and hasattr(os, "POSIX_FADV_DONTNEED")


def resident_pages(path: Path) -> tuple[int, int] | None:
    """(pages in the page cache, pages of the file), or None where it cannot be measured."""
    libc = _libc()
    if libc is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        page = mmap.PAGESIZE
        pages = (size + page - 1) // page
        if pages == 0:
            return 0, 0
        address = libc.mmap(None, size, _PROT_READ, _MAP_SHARED, fd, 0)
        if address in (None, _MAP_FAILED):
            return None
        try:
            vector = (ctypes.c_ubyte * pages)()
            if libc.mincore(address, size, vector) != 0:
                return None
            return sum(byte & 1 for byte in bytes(vector)), pages
        finally:
            libc.munmap(address, size)
    finally:
        os.close(fd)


def resident_fraction(paths: Path | Iterable[Path]) -> float | None:
    """Share (0..1) of the pages of a file (or of several, by size) in the page cache; None where
    unsupported or unreadable. Mapping the file to ask does not read it (mincore faults nothing in)."""
    if isinstance(paths, (str, Path)):
        paths = [Path(paths)]
    resident = total = 0
    for path in paths:
        counts = resident_pages(Path(path))
        if counts is None:
            return None
        resident, total = resident + counts[0], total + counts[1]
    return resident / total if total else None


def evict(path: Path) -> bool:
    """Ask the kernel to drop the file's cached pages (clean ones: the files here are read only).
    False where unsupported or the file cannot be opened. Pages mapped by a running process stay."""
    if not evictable():
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


@dataclass(frozen=True)
class StartState:
    """The page-cache state one engine's worker started with."""

    weights_page_cached: float | None  # share of the weights file resident just before the spawn
    notes: str = ""  # what --cold did, or could not do


def before_start(weights: Path, artefacts: list[Path], cold: bool) -> StartState:
    """With `cold`, evict the weights and the engine's artefact files first; then measure the
    share of the weights file in the page cache (what the worker's load is about to read)."""
    notes = []
    if cold:
        files = [Path(weights), *artefacts]
        if not evictable():
            notes.append(f"--cold: page-cache eviction is not supported on {sys.platform}")
        elif not all([evict(f) for f in files]):
            notes.append("--cold: some files could not be evicted from the page cache")
        else:
            what = "weights" + (f" and {len(artefacts)} artefact files" if artefacts else "")
            notes.append(f"--cold: {what} evicted from the page cache")
        if artefacts:
            left = resident_fraction(artefacts)
            if left:
                notes.append(f"{left:.0%} of the artefact files still cached (mapped by a running process)")
    share = resident_fraction(weights)
    if share is None:
        notes.append(f"page-cache state not measurable on {sys.platform}")
    elif cold and share > 0.01:
        notes.append(f"{share:.0%} of the weights still cached after eviction (mapped by a running worker)")
    return StartState(share, "; ".join(notes))


def engine_start_state(spec, model, cold: bool) -> StartState:
    """before_start for one engine (an EngineSpec) and model (ModelFiles): its artefact files are
    found without importing the engine (storage/artifact_cache.engine_folders). Never raises: a
    measurement that fails leaves the share unknown and says why."""
    from . import artifact_cache

    try:
        artefacts = artifact_cache.files_of(artifact_cache.engine_folders(spec, model)) if cold else []
        return before_start(model.safetensors, artefacts, cold)
    except Exception as exc:  # noqa: BLE001 - a measurement must never cost a run
        return StartState(None, f"page-cache state unknown: {exc}")


def annotate(record, state: StartState | None) -> None:
    """Put a worker's start state into one of its records (weights_page_cached, notes)."""
    if state is None:
        return
    record.weights_page_cached = state.weights_page_cached
    if state.notes and state.notes not in record.notes:
        record.notes = "; ".join(n for n in (record.notes, state.notes) if n)
