"""numpy's BLAS: its name, and its thread count set at run time (the numpy engine, the bandwidth probe)."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import numpy as np


def blas_name() -> str:
    """numpy's BLAS as built (e.g. 'scipy-openblas 0.3.31'); cheap, it reads numpy's build record."""
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:  # the build record's layout is numpy's business, not worth failing a load
        return "unknown"


class OpenBLAS:
    """numpy's own OpenBLAS, reached through ctypes (the library is already loaded, so this is cheap).

    Needed because OPENBLAS_NUM_THREADS is read once, when numpy is imported, and a worker child
    imports numpy before it sets the thread variables. None of this is public numpy API, so every
    step may fail and leave BLAS as it is."""

    _PREFIXES = ("scipy_openblas_", "openblas_")  # numpy's wheels rename the symbols; other builds do not
    _SUFFIXES = ("64_", "")

    def __init__(self) -> None:
        self.lib = None
        for path in self._candidates():
            try:
                lib = ctypes.CDLL(str(path))
            except OSError:
                continue
            if self._symbol(lib, "get_num_threads") is not None:
                self.lib = lib
                return

    @staticmethod
    def _candidates() -> list[Path]:
        if sys.platform.startswith("linux"):  # what is really mapped: right whatever the packaging
            try:
                maps = Path("/proc/self/maps").read_text().splitlines()
                found = {line.split()[-1] for line in maps if "openblas" in line and ".so" in line}
                return [Path(p) for p in sorted(found)]
            except OSError:
                pass
        root = Path(np.__file__).parent
        return [
            p
            for folder in (root.parent / "numpy.libs", root / ".dylibs")
            if folder.is_dir()
            for p in sorted(folder.iterdir())
            if "openblas" in p.name.lower()
        ]

    def _symbol(self, lib, stem: str):
        for prefix in self._PREFIXES:
            for suffix in self._SUFFIXES:
                function = getattr(lib, f"{prefix}{stem}{suffix}", None)
                if function is not None:
                    return function
        return None

    def threads(self) -> int | None:
        get = self._symbol(self.lib, "get_num_threads") if self.lib else None
        return int(get()) if get is not None else None

    def set_threads(self, count: int) -> None:
        setter = self._symbol(self.lib, "set_num_threads") if self.lib else None
        if setter is not None:
            setter(ctypes.c_int(count))

    def core(self) -> str:
        get = self._symbol(self.lib, "get_corename") if self.lib else None
        if get is None:
            return ""
        get.restype = ctypes.c_char_p
        return (get() or b"").decode(errors="replace")
