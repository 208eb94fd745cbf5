"""Cached build artefacts (ONNX models, GGUF files, converted models): built once, validated on load.

    <cache>/<kind>/<key>/<variant>/...files...
                                  manifest.json   (written last: its presence means "whole")

One builder per artefact across processes: a lock file beside the folder holds the builder's
pid, and whoever waits for it finds the finished folder afterwards instead of building it again
(in a race, onnx and onnx-int8 both want the fp32 export). The build fills a hidden staging
folder, the manifest (sizes, mtimes, sha256 and the settings it was built with) is written
last, and the folder is renamed into place: a build killed at any point leaves no folder that
validates, only a hidden one that the next build removes. On load sizes are always checked; a
file is re-hashed only when its mtime differs from the manifest's (hashing on every load would
cost more than some engines take to load).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..progress import ProgressFn, silent
from .atomic import atomic_write
from .digest import sha256_of
from .paths import cache_dir

if TYPE_CHECKING:
    from ..registry import EngineSpec
    from ..sources.model_files import ModelFiles

MANIFEST = "manifest.json"
FORMAT = 1
BuildFn = Callable[[Path], dict | None]  # fills an empty folder; may return details for the manifest
# Which files of a built folder the manifest lists (default: all). A virtual environment of
# thousands of files lists a few that prove it whole instead of hashing gigabytes.
ListFn = Callable[[Path], list[Path]]
_STALE_LOCK_S = 3600.0  # no single build takes this long; an older lock's pid has been reused
# Hidden siblings of a variant folder that carry their creator's pid (".building-": older versions).
_PID_MARKERS = (".build-", ".building-", ".old-")


class ArtifactError(RuntimeError):
    """A cached artefact is missing, corrupt, or could not be built."""


@dataclass(frozen=True)
class Artifact:
    folder: Path
    manifest: dict
    built: bool  # True when this call built it, False on a cache hit
    # Seconds this call spent because the folder was not whole when asked for: building it (a
    # quantised variant's build includes its source's), or waiting for another process's build.
    # Exactly 0.0 on a hit.
    build_s: float = 0.0

    @property
    def details(self) -> dict:
        """What the build function returned (tool versions, quantisation settings)."""
        return self.manifest.get("build", {})

    @property
    def cache_state(self) -> str:
        """ "hit" (whole when asked for) or "miss" (built now, here or by another process)."""
        return "miss" if self.built or self.build_s > 0 else "hit"


def ensure(
    kind: str,
    key: str,
    variant: str,
    build: BuildFn,
    progress: ProgressFn = silent,
    meta: dict | None = None,
    listed: ListFn | None = None,
) -> Artifact:
    """The folder cache_dir(kind, key)/variant, built by `build(empty folder)` unless it is whole
    and was built with `meta` (a dict of settings that must match, e.g. a format version)."""
    folder = cache_dir(kind, key) / variant
    manifest, _ = _validate(folder, meta)
    if manifest is not None:
        return Artifact(folder, manifest, built=False)
    started = time.perf_counter()
    with _build_lock(folder, f"{kind}/{variant}", progress):
        manifest, problem = _validate(folder, meta)  # built by another process meanwhile?
        if manifest is not None:
            return Artifact(folder, manifest, built=False, build_s=_since(started))
        if folder.exists():
            progress(f"rebuilding cached {kind}/{variant}: {problem}", None)
        return _timed(_build(folder, f"{kind}/{variant}", build, progress, meta, listed), started)


def rebuild(
    kind: str, key: str, variant: str, build: BuildFn, progress: ProgressFn = silent, meta: dict | None = None
) -> Artifact:
    """Throw the cached folder away and build it again (e.g. it validates but will not open)."""
    folder = cache_dir(kind, key) / variant
    started = time.perf_counter()
    with _build_lock(folder, f"{kind}/{variant}", progress):
        discard(folder)
        return _timed(_build(folder, f"{kind}/{variant}", build, progress, meta), started)


def _since(started: float) -> float:
    return max(time.perf_counter() - started, 1e-9)  # a miss is never 0.0, which means "hit"


def _timed(artefact: Artifact, started: float) -> Artifact:
    return Artifact(artefact.folder, artefact.manifest, artefact.built, _since(started))


def engine_folders(spec: EngineSpec, model: ModelFiles) -> list[Path]:
    """The cached folders an engine loads its files from, for `model` (built or not yet), without
    importing the engine's packages: the registry names a light function per engine family
    (`EngineSpec.artifacts`, called with the model and the spec's own arguments). [] for an
    engine that builds nothing."""
    target = spec.artifacts
    if not target:
        return []
    import importlib

    module_name, function_name = target.split(":")
    folders = getattr(importlib.import_module(module_name), function_name)(model, **spec.engine_args)
    return [Path(f) for f in folders]


def files_of(folders: list[Path]) -> list[Path]:
    """Every file in the folders that exist (what a load reads), manifests included."""
    return [p for folder in folders if folder.is_dir() for p in sorted(folder.rglob("*")) if p.is_file()]


def check(folder: Path, meta: dict | None = None) -> str:
    """Why `folder` is not whole or not current (one line), or "" when it is."""
    return _validate(folder, meta)[1]


def link_or_copy(source: Path, target: Path) -> None:
    """A hard link (no copy of a large weights file, and no dangling link if the source folder
    moves), or a copy across file systems."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def discard(folder: Path) -> None:
    """Move a folder out of the way first (atomic), then delete it."""
    if folder.exists():
        doomed = folder.with_name(f".{folder.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        os.replace(folder, doomed)
        shutil.rmtree(doomed, ignore_errors=True)


def remove_abandoned(parent: Path) -> None:
    """Hidden staging or trash folders whose process is gone (killed mid-build)."""
    import psutil

    for entry in parent.glob(".*-*"):
        marker = next((m for m in _PID_MARKERS if m in entry.name), None)
        if marker is None:
            continue
        try:
            pid = int(entry.name.split(marker, 1)[1].split("-", 1)[0])
        except ValueError:
            continue
        if pid != os.getpid() and not psutil.pid_exists(pid):
            shutil.rmtree(entry, ignore_errors=True)


def _validate(folder: Path, meta: dict | None) -> tuple[dict | None, str]:
    """(manifest, "") when every file it lists is there, whole and unchanged, else (None, why)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        files = manifest["files"]
    except FileNotFoundError:
        return None, "no manifest (never finished building)"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"unreadable manifest: {exc}"
    built_with = manifest.get("meta") or {}
    # a manifest edited by hand may be valid JSON of the wrong shape: rebuilt, like a garbled one
    entries = list(files.values()) if isinstance(files, dict) else []
    shaped = entries and isinstance(built_with, dict) and all(isinstance(entry, dict) for entry in entries)
    if manifest.get("format") != FORMAT or not shaped:
        return None, "manifest of another format"
    stale = [k for k, v in (meta or {}).items() if built_with.get(k) != v]
    if stale:
        return None, f"built with other settings ({', '.join(stale)})"
    for name, entry in files.items():
        path = folder / name
        try:
            stat = path.stat()
        except OSError:
            return None, f"{name} is missing"
        if stat.st_size != entry.get("size"):
            return None, f"{name} has {stat.st_size} bytes, the manifest says {entry.get('size')}"
        # Unchanged since the build (same size and mtime): trust the recorded hash. Any rewrite
        # or copy changes the mtime and forces a re-hash.
        if stat.st_mtime_ns != entry.get("mtime_ns") and _sha256(path) != entry.get("sha256"):
            return None, f"{name} does not match its sha256"
    return manifest, ""


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return sha256_of(handle)


def _build(
    folder: Path, what: str, build: BuildFn, progress: ProgressFn, meta: dict | None, listed: ListFn | None = None
) -> Artifact:
    """Build into a hidden staging folder and rename it into place (the lock is held)."""
    remove_abandoned(folder.parent)
    staging = folder.with_name(f".{folder.name}.build-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    staging.mkdir()
    try:
        details = build(staging) or {}
        progress(f"checking the {what} files", None)
        manifest = _write_manifest(staging, meta, details, listed)
        discard(folder)
        os.replace(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    problem = check(folder, meta)
    if problem:  # e.g. the disk filled up under us
        raise ArtifactError(f"cached {what} is still not whole after building: {problem}")
    return Artifact(folder, manifest, built=True)


def _write_manifest(folder: Path, meta: dict | None, details: dict, listed: ListFn | None = None) -> dict:
    """Record every file in `folder` (recursively, or those `listed` picks); called last, so its
    presence means whole."""
    files = {}
    chosen = listed(folder) if listed is not None else [p for p in folder.rglob("*") if p.is_file()]
    for path in sorted(chosen):
        stat = path.stat()
        files[path.relative_to(folder).as_posix()] = {
            "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns,
            "sha256": _sha256(path),
        }
    manifest = {"format": FORMAT, "files": files, "meta": meta or {}, "build": details}
    with atomic_write(folder / MANIFEST) as handle:
        json.dump(manifest, handle, indent=1)
    return manifest


@contextmanager
def _build_lock(folder: Path, what: str, progress: ProgressFn) -> Iterator[None]:
    """One builder per artefact across processes.

    The lock file holds its owner's pid; a lock whose owner is gone (a worker killed mid-build)
    or that is older than _STALE_LOCK_S (a reused pid) is broken. Waiting reports progress now
    and then, so the worker's load timeout does not fire while another process builds.
    """
    import psutil

    lock = folder.with_name(f".{folder.name}.lock")
    last_report = 0.0
    while True:
        try:
            handle = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                age = time.time() - lock.stat().st_mtime
                text = lock.read_text().strip()
            except OSError:
                continue  # released just now: try again
            owner = int(text) if text.isascii() and text.isdigit() else 0  # half-written (or garbage): no owner
            if age > _STALE_LOCK_S or (owner and not psutil.pid_exists(owner)) or (not owner and age > 10):
                lock.unlink(missing_ok=True)
                continue
            if time.monotonic() - last_report > 10:
                progress(f"waiting for another process to finish building {what}", None)
                last_report = time.monotonic()
            time.sleep(0.25)
            continue
        with os.fdopen(handle, "w") as f:
            f.write(str(os.getpid()))
        break
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)
