"""Atomic file writes: a temporary file in the same folder, then a rename."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


@contextmanager
def atomic_write(path: Path, mode: str = "w", **kwargs) -> Iterator[IO]:
    """Write to `path` so that readers see the old file or the whole new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, **kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes files private; exports are ordinary files
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _read_umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it: done once, at import, before threads
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def check_writable_dir(path: Path) -> None:
    """Raise OSError now, before any work, if `path` cannot hold our files."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".write-test.", dir=path)
    os.close(fd)
    os.unlink(tmp)
