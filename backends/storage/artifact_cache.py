"""Cached build artefacts (GGUF files, converted models): build once per weights hash, validate on load.

A folder is built under a temporary name and renamed into place, with a manifest of sizes and
sha256 written last, so a crash mid-build never leaves a folder that validates. On load, sizes
are always checked; a file is re-hashed only when its mtime differs from the manifest's (full
hashing on every load would cost ~1 s per 500 MB, more than some engines take to load).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from .paths import cache_dir

MANIFEST = "manifest.json"
FORMAT = 1

ProgressFn = Callable[[str, float | None], None]
BuildFn = Callable[[Path], None]  # fills an empty folder


class ArtifactError(RuntimeError):
    """A cached artefact is missing, corrupt, or could not be built."""


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_manifest(folder: Path, meta: dict | None = None) -> None:
    """Record every file in `folder` (recursively); call it last."""
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST):
        stat = path.stat()
        files[path.relative_to(folder).as_posix()] = {
            "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": _sha256(path)}
    data = {"format": FORMAT, "files": files, "meta": meta or {}}
    tmp = folder / f".{MANIFEST}.tmp"
    with tmp.open("w") as f:
        json.dump(data, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / MANIFEST)


def check(folder: Path, meta: dict | None = None) -> str:
    """Why `folder` is not whole or not current (one line), or "" when it is."""
    try:
        data = json.loads((folder / MANIFEST).read_text())
        files = data["files"]
    except FileNotFoundError:
        return "no manifest (never finished building)"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"unreadable manifest: {exc}"
    if data.get("format") != FORMAT or not files:
        return "manifest of another format"
    stale = [k for k, v in (meta or {}).items() if data.get("meta", {}).get(k) != v]
    if stale:
        return f"built with other settings ({', '.join(stale)})"
    for name, entry in files.items():
        path = folder / name
        try:
            stat = path.stat()
        except OSError:
            return f"{name} is missing"
        if stat.st_size != entry["size"]:
            return f"{name} has {stat.st_size} bytes, the manifest says {entry['size']}"
        if stat.st_mtime_ns != entry.get("mtime_ns") and _sha256(path) != entry["sha256"]:
            return f"{name} does not match its sha256"
    return ""


def manifest_meta(folder: Path) -> dict:
    return json.loads((folder / MANIFEST).read_text()).get("meta", {})


def ensure(kind: str, key: str, variant: str, build: BuildFn, progress: ProgressFn | None = None,
           meta: dict | None = None) -> Path:
    """The folder cache_dir(kind, key, variant), built by `build(tmp)` unless it is already whole."""
    progress = progress or (lambda message, fraction=None: None)
    parent = cache_dir(kind, key)
    folder = parent / variant
    problem = check(folder, meta) if folder.exists() else "not built yet"
    if not problem:
        return folder
    if folder.exists():
        progress(f"rebuilding cached {kind}/{variant}: {problem}", None)
    _remove_abandoned(parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".{variant}.building-{os.getpid()}-", dir=parent))
    try:
        build(tmp)
        write_manifest(tmp, meta)
        _install(tmp, folder, meta)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    problem = check(folder, meta)
    if problem:  # e.g. the disk filled up under us
        raise ArtifactError(f"cached {kind}/{variant} is still not whole after building: {problem}")
    return folder


def _install(tmp: Path, folder: Path, meta: dict | None) -> None:
    """Rename `tmp` to `folder`, moving a corrupt old folder aside; a concurrent builder may win."""
    for _ in range(3):
        try:
            os.rename(tmp, folder)
            return
        except OSError:
            if folder.exists() and not check(folder, meta):  # someone else finished first: use theirs
                shutil.rmtree(tmp, ignore_errors=True)
                return
            if folder.exists():
                trash = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old-{os.getpid()}-", dir=folder.parent))
                try:
                    os.rename(folder, trash / "old")
                except FileNotFoundError:
                    pass
                shutil.rmtree(trash, ignore_errors=True)
    raise ArtifactError(f"could not move the built artefact into {folder}")


def _remove_abandoned(parent: Path) -> None:
    """Hidden build or trash folders whose process is gone (killed mid-build)."""
    import psutil

    for entry in parent.glob(".*-*"):
        for marker in (".building-", ".old-"):
            if marker in entry.name:
                try:
                    pid = int(entry.name.split(marker, 1)[1].split("-", 1)[0])
                except ValueError:
                    break
                if pid != os.getpid() and not psutil.pid_exists(pid):
                    shutil.rmtree(entry, ignore_errors=True)
                break
