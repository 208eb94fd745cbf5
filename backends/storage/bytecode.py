"""Whether the app's own modules have current bytecode (a part of every cold start that says so).

A spawned worker imports ~30 of the app's modules before it is Ready. A wheel install ships their
bytecode and a normal interpreter writes it on first import, but a source checkout run with
PYTHONDONTWRITEBYTECODE=1 (common in containers) has none, so every worker compiles those modules
from source again, in each engine's cold start (docs/methodology.md). `make install`
compiles them, as pip does for a
wheel; `check` says whether that happened, and the bench records it and warns when it did not.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

_HEADER = 16  # magic, flags, source mtime, source size (PEP 552)


@dataclass(frozen=True)
class BytecodeState:
    writes_bytecode: bool  # False under PYTHONDONTWRITEBYTECODE / -B
    uncompiled: int  # the engine room's modules without current bytecode for this interpreter
    modules: int

    def as_dict(self) -> dict:
        return {"writes_bytecode": self.writes_bytecode, "uncompiled_modules": self.uncompiled, "modules": self.modules}

    @property
    def compiles_in_every_worker(self) -> bool:
        return not self.writes_bytecode and self.uncompiled > 0


def engine_room() -> Path:
    """The folder of the engine room's package (backends/): what every worker imports from."""
    return Path(__file__).resolve().parents[1]


def is_current(source: Path) -> bool:
    """True if the import system would load `source` from its cached bytecode, as it checks it: this
    interpreter's magic number, and the source's mtime and size in the header (a hash-based .pyc
    counts as current: the import system checks it itself)."""
    cached = Path(importlib.util.cache_from_source(str(source)))
    try:
        with open(cached, "rb") as file:
            header = file.read(_HEADER)
        stat = source.stat()
    except OSError:
        return False
    if len(header) < _HEADER or header[:4] != importlib.util.MAGIC_NUMBER:
        return False
    if int.from_bytes(header[4:8], "little") & 1:
        return True
    return (
        int.from_bytes(header[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF
        and int.from_bytes(header[12:16], "little") == stat.st_size & 0xFFFFFFFF
    )


def check(root: Path | None = None) -> BytecodeState:
    """Count the modules under `root` (the engine room) whose bytecode is missing or stale."""
    sources = [
        Path(folder) / name
        for folder, _, names in os.walk(root or engine_room())
        if "__pycache__" not in folder
        for name in names
        if name.endswith(".py")
    ]
    stale = sum(not is_current(source) for source in sources)
    return BytecodeState(not sys.dont_write_bytecode, stale, len(sources))


def warning(state: BytecodeState) -> str | None:
    """One line for the bench's output where every worker compiles the app's modules, else None."""
    if not state.compiles_in_every_worker:
        return None
    verb = "has" if state.uncompiled == 1 else "have"
    return (
        f"{state.uncompiled} of the engine room's {state.modules} modules {verb} no current bytecode and "
        f"PYTHONDONTWRITEBYTECODE is set, so every worker compiles them from source (part of each cold "
        f"start): `make install`, or `python -m compileall -q {engine_room()}`, compiles them once"
    )
