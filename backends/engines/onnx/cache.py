"""The ONNX artefact cache: one folder per weights hash, config and variant, built once.

    <cache>/onnx/<weights_hash>-<config digest>/<variant>/model.onnx [+ model.onnx.data]
                                                          manifest.json

A variant is built in a hidden sibling folder by a child process (see onnx_build), the
manifest (format version, weights hash, size and sha256 of every file) is written last, and
the folder is then renamed into place: a build killed at any point leaves no half cache,
only a hidden folder that the next build removes. Torch-free: a cache hit never imports torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ...storage.atomic import atomic_write
from ...engine import ProgressFn
from ...sources.model_files import ModelFiles
from ...storage.paths import cache_dir

FORMAT_VERSION = 2  # bump when the export changes: older caches are then rebuilt
VARIANTS = ("fp32", "int8", "int4")
MANIFEST = "manifest.json"
MODEL_FILE = "model.onnx"
_STALE_LOCK_S = 3600.0  # no single build takes this long; an older lock's pid has been reused
_PROJECT_ROOT = Path(__file__).resolve().parents[3]
# The config keys the exported graph depends on (the weights hash covers the rest).
_GRAPH_KEYS = ("n_embd", "n_head", "n_layer", "n_positions", "vocab_size", "n_inner", "activation_function",
               "layer_norm_epsilon", "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn")


class OnnxBuildError(RuntimeError):
    """Building an artefact failed; the message carries the builder's last words."""


@dataclass(frozen=True)
class Artefact:
    folder: Path
    manifest: dict
    built: bool  # True when this call built it, False on a cache hit

    @property
    def model_path(self) -> Path:
        return self.folder / MODEL_FILE


def config_digest(config: dict) -> str:
    relevant = {key: config.get(key) for key in _GRAPH_KEYS}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:8]


def variant_dir(model: ModelFiles, variant: str) -> Path:
    """Where `variant` of this model lives (the variant folder itself exists only once built)."""
    return cache_dir("onnx", f"{model.weights_hash}-{config_digest(model.config)}") / variant


def ensure(model: ModelFiles, variant: str, progress: ProgressFn) -> Artefact:
    """The cached artefact if it is whole and current, else a freshly built one."""
    folder = variant_dir(model, variant)
    manifest = read_valid_manifest(folder, model, variant)
    if manifest is not None:
        return Artefact(folder, manifest, built=False)
    with _build_lock(folder, variant, progress):
        manifest = read_valid_manifest(folder, model, variant)  # built by another worker meanwhile?
        if manifest is not None:
            return Artefact(folder, manifest, built=False)
        return _build(model, variant, progress)


def rebuild(model: ModelFiles, variant: str, progress: ProgressFn) -> Artefact:
    """Throw the cached artefact away and build it again (its session would not open)."""
    folder = variant_dir(model, variant)
    with _build_lock(folder, variant, progress):
        discard(folder)
        return _build(model, variant, progress)


def read_valid_manifest(folder: Path, model: ModelFiles, variant: str) -> dict | None:
    """The manifest if every file it lists is there, whole and unchanged; None means rebuild."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    expected = {"format": FORMAT_VERSION, "variant": variant, "weights_hash": model.weights_hash,
                "config_digest": config_digest(model.config)}
    if not isinstance(manifest, dict) or any(manifest.get(k) != v for k, v in expected.items()):
        return None
    files = manifest.get("files")
    if not isinstance(files, dict) or MODEL_FILE not in files:
        return None
    for name, entry in files.items():
        if not _file_matches(folder / name, entry):
            return None
    return manifest


def _file_matches(path: Path, entry: dict) -> bool:
    try:
        stat = path.stat()
    except OSError:
        return False
    if stat.st_size != entry.get("size"):
        return False
    # Unchanged since the build (same size and mtime): trust the recorded hash rather than
    # reading 500 MB on every load. Any rewrite or copy changes the mtime and forces a re-hash.
    if stat.st_mtime_ns == entry.get("mtime_ns"):
        return True
    return _sha256(path) == entry.get("sha256")


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _build(model: ModelFiles, variant: str, progress: ProgressFn) -> Artefact:
    """Build `variant` under its lock (quantised variants start from the cached fp32 one)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown ONNX variant {variant!r}")
    folder = variant_dir(model, variant)
    _remove_abandoned(folder.parent)
    args = ["--variant", variant]
    if variant == "fp32":
        args += ["--weights", str(model.safetensors), "--config", str(model.folder / "config.json")]
        span = (0.0, 1.0)
    else:
        source = ensure(model, "fp32", _scaled(progress, 0.0, 0.7))
        args += ["--source", str(source.model_path)]
        span = (0.7, 1.0)
    staging = folder.parent / f".{variant}.build-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    try:
        details = _run_builder(args + ["--out", str(staging)], _scaled(progress, *span), variant)
        manifest = {"format": FORMAT_VERSION, "variant": variant, "weights_hash": model.weights_hash,
                    "config_digest": config_digest(model.config), "model_id": model.model_id,
                    "onnxruntime": _ort_version(), "build": details, "files": {}}
        progress(f"checking the ONNX {variant} files", None)
        for path in sorted(p for p in staging.iterdir() if p.is_file()):
            stat = path.stat()
            manifest["files"][path.name] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
                                            "sha256": _sha256(path)}
        with atomic_write(staging / MANIFEST) as handle:  # last: its presence means the folder is whole
            json.dump(manifest, handle, indent=1)
        _commit(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    progress(f"ONNX {variant} model ready", 1.0)
    return Artefact(folder, manifest, built=True)


def discard(folder: Path) -> None:
    """Move a bad artefact out of the way first (atomic), then delete it."""
    if folder.exists():
        doomed = folder.with_name(f".{folder.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        os.replace(folder, doomed)
        shutil.rmtree(doomed, ignore_errors=True)


def _commit(staging: Path, folder: Path) -> None:
    """Rename the finished build into place (the lock is held), replacing a stale or corrupt one."""
    discard(folder)
    os.replace(staging, folder)


@contextmanager
def _build_lock(folder: Path, variant: str, progress: ProgressFn) -> Iterator[None]:
    """One builder per artefact across processes (in a race both onnx and onnx-int8 want fp32).

    The lock file holds its owner's pid; a lock whose owner is gone (a worker killed mid-export)
    or that is older than _STALE_LOCK_S (a reused pid) is broken. Waiting reports progress now
    and then, so the worker's load timeout does not fire while another process exports.
    """
    import psutil

    lock = folder.parent / f".{variant}.lock"
    last_report = 0.0
    while True:
        try:
            handle = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                age = time.time() - lock.stat().st_mtime
                owner = int(lock.read_text() or 0)
            except (OSError, ValueError):
                continue  # released (or half-written) just now: try again
            if age > _STALE_LOCK_S or (owner and not psutil.pid_exists(owner)) or (not owner and age > 10):
                lock.unlink(missing_ok=True)
                continue
            if time.monotonic() - last_report > 10:
                progress(f"waiting for another process to finish building ONNX {variant}", None)
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


def _remove_abandoned(parent: Path) -> None:
    """Hidden build folders whose builder process is gone (killed mid-export)."""
    import psutil

    for entry in parent.glob(".*-*"):
        marker = next((m for m in (".build-", ".old-") if m in entry.name), None)
        if marker is None:
            continue
        try:
            pid = int(entry.name.split(marker, 1)[1].split("-", 1)[0])
        except ValueError:
            continue
        if pid != os.getpid() and not psutil.pid_exists(pid):
            shutil.rmtree(entry, ignore_errors=True)


def _run_builder(args: list[str], progress: ProgressFn, variant: str) -> dict:
    """Run onnx_build in a child process, relaying its progress lines; return its details."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_PROJECT_ROOT), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "backends.engines.onnx.build", *args]
    details: dict | None = None
    with tempfile.TemporaryFile() as log:
        child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                 text=True, env=env, cwd=_PROJECT_ROOT)
        try:
            for line in child.stdout:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if "done" in event:
                    details = event["done"]
                elif "message" in event:
                    progress(event["message"], event.get("fraction"))
            code = child.wait()
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            child.stdin.close()
            child.stdout.close()
        if code != 0 or details is None:
            log.seek(0)
            tail = log.read().decode("utf-8", "replace").strip().splitlines()[-15:]
            last = next((line for line in reversed(tail) if line.strip()), "no output")
            raise OnnxBuildError(f"building the ONNX {variant} model failed (exit code {code}): {last}\n"
                                 + "\n".join(tail))
    return details


def _scaled(progress: ProgressFn, low: float, high: float) -> ProgressFn:
    def report(message: str, fraction: float | None = None) -> None:
        progress(message, None if fraction is None else low + (high - low) * fraction)

    return report


def _ort_version() -> str:
    from importlib.metadata import version

    return version("onnxruntime")
