"""What machine and software a result came from (environment.json)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import psutil

from .. import __version__, registry
from ..machine.cpu import cpu_flags, cpu_model
from ..storage import bytecode

# What every run stands on (the harness, the sampler, the reference, the window); each engine's own
# runtime packages come from its registry entry.
CORE_PACKAGES = (
    "numpy",
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "huggingface_hub",
    "PySide6_Essentials",
    "pyqtgraph",
)
NOT_INSTALLED = "not installed"


def gpu_names() -> list[str]:
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return [line.strip() for line in out.stdout.splitlines() if line.strip()]
    except (OSError, subprocess.SubprocessError):
        return []


def git_commit() -> str:
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():  # an installed copy (site-packages may sit inside some other repository)
        return ""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        )
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "") if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def package_version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return NOT_INSTALLED


def library_versions(backends: Iterable[str] = ()) -> dict[str, str]:
    """The core packages' versions and those of the named engines' runtimes (the workers run in
    this interpreter, so its distributions are theirs)."""
    names = list(CORE_PACKAGES)
    for backend in backends:
        spec = registry.ENGINES.get(backend)
        names += spec.packages if spec is not None else ()
    return {name: package_version(name) for name in dict.fromkeys(names)}


def thread_env() -> dict[str, str]:
    """The thread-count variables set in this environment (the runtimes' pools read them)."""
    return {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS") if k in os.environ}


def collect_environment(model=None, settings: dict | None = None, extra: dict | None = None) -> dict:
    """The record of a run; the engines whose packages it lists are the settings' "backends"."""
    memory = psutil.virtual_memory()
    env = {
        "app": {"name": "whistle-stop", "version": __version__, "git_commit": git_commit()},
        "machine": {
            "cpu": cpu_model(),
            "cpu_flags": cpu_flags(),
            "cores_logical": psutil.cpu_count(logical=True),
            "cores_physical": psutil.cpu_count(logical=False),
            "memory_gb": round(memory.total / 2**30, 1),
            "gpus": gpu_names(),
            "os": platform.platform(),
            "hostname": platform.node(),
        },
        "python": sys.version.split()[0],
        "libraries": library_versions((settings or {}).get("backends", ())),
        "thread_env": thread_env(),
        "bytecode": bytecode.check().as_dict(),  # without it, every worker compiles the app (cold starts)
    }
    if model is not None:
        env["model"] = {
            "id": model.model_id,
            "spec": model.spec,
            "weights": model.weights,
            "weights_sha256_16": model.weights_hash,
            "folder": str(model.folder),
            "n_layer": model.config.get("n_layer"),
            "n_embd": model.config.get("n_embd"),
            "context": model.context,
        }
    if settings is not None:
        env["settings"] = settings
    if extra:
        env.update(extra)
    return env


def add_cached_probes(environment: dict, threads: int) -> None:
    """Record the machine's bandwidth and arithmetic peaks if a sweep, quality run or profile measured
    them before (never measures here): bench's and quality's folders, from the CLI or the window alike."""
    from ..machine.bandwidth import cached_bandwidth
    from ..machine.compute_peak import cached_compute_peaks

    cached = cached_bandwidth(threads)
    if cached is not None:
        environment.setdefault("bandwidth", cached.as_dict())
    peaks = cached_compute_peaks(threads)
    if peaks is not None:
        environment.setdefault("compute_peaks", peaks.as_dict())
