"""The ONNX artefacts: what to build for each variant, kept in the shared artefact cache.

    <cache>/onnx/<weights_hash>-<config digest>/<variant>/model.onnx [+ model.onnx.data]

fp32 is exported from the safetensors; int8 and int4 are quantised from the cached fp32 one.
Every build runs in a child process (onnx/build.py), so the worker never imports torch: not
on a cache hit, and not for the export either. Locking, staging, the manifest and validation
are storage/artifact_cache's.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from ...progress import ProgressFn, scaled
from ...sources.model_files import ModelFiles
from ...storage import artifact_cache
from ...storage.artifact_cache import Artifact, BuildFn
from ...storage.paths import cache_dir
from .build import MODEL_FILE

KIND = "onnx"
FORMAT_VERSION = 3  # bump when the export changes: older caches are then rebuilt (3: weight bytes in the manifest)
VARIANTS = ("fp32", "int8", "int4")
# The config keys the exported graph depends on (the weights hash covers the rest).
_GRAPH_KEYS = (
    "n_embd",
    "n_head",
    "n_layer",
    "n_positions",
    "vocab_size",
    "n_inner",
    "activation_function",
    "layer_norm_epsilon",
    "scale_attn_weights",
    "scale_attn_by_inverse_layer_idx",
    "reorder_and_upcast_attn",
)


class OnnxBuildError(RuntimeError):
    """Building an artefact failed; the message carries the builder's last words."""


def config_digest(config: dict) -> str:
    # config.json's own values (a missing key hashes as null), not GPT2Config's filled-in
    # defaults: the folder name must stay the one earlier versions built into.
    relevant = {key: config.get(key) for key in _GRAPH_KEYS}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:8]


def _key(model: ModelFiles) -> str:
    return f"{model.weights_hash}-{config_digest(model.config)}"


def variant_dir(model: ModelFiles, variant: str) -> Path:
    """Where `variant` of this model lives (the variant folder itself exists only once built)."""
    return cache_dir(KIND, _key(model)) / variant


def meta(model: ModelFiles, variant: str, format_version: int = FORMAT_VERSION) -> dict:
    """What a cached variant must have been built with to be used (`format_version`: the export's,
    which each family that builds from this export bumps on its own)."""
    return {
        "format": format_version,
        "variant": variant,
        "weights_hash": model.weights_hash,
        "config_digest": config_digest(model.config),
    }


def model_path(artefact: Artifact) -> Path:
    return artefact.folder / MODEL_FILE


def ensure(model: ModelFiles, variant: str, progress: ProgressFn) -> Artifact:
    """The cached artefact if it is whole and current, else a freshly built one."""
    return _ready(
        artifact_cache.ensure(
            KIND, _key(model), variant, _builder(model, variant, progress), progress, meta(model, variant)
        ),
        variant,
        progress,
    )


def rebuild(model: ModelFiles, variant: str, progress: ProgressFn) -> Artifact:
    """Throw the cached artefact away and build it again (its session would not open)."""
    return _ready(
        artifact_cache.rebuild(
            KIND, _key(model), variant, _builder(model, variant, progress), progress, meta(model, variant)
        ),
        variant,
        progress,
    )


def _ready(artefact: Artifact, variant: str, progress: ProgressFn) -> Artifact:
    if artefact.built:
        progress(f"ONNX {variant} model ready", 1.0)
    return artefact


def _builder(model: ModelFiles, variant: str, progress: ProgressFn) -> BuildFn:
    """Fills an empty folder with `variant` (quantised variants start from the cached fp32 one)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown ONNX variant {variant!r}")

    def build(out: Path) -> dict:
        args = ["--variant", variant]
        if variant == "fp32":
            args += ["--weights", str(model.safetensors), "--config", str(model.folder / "config.json")]
            span = (0.0, 1.0)
        else:
            source = ensure(model, "fp32", scaled(progress, 0.0, 0.7))
            args += ["--source", str(model_path(source))]
            span = (0.7, 1.0)
        details = run_builder(args + ["--out", str(out)], scaled(progress, *span), variant)
        return {**details, "model_id": model.model_id, "onnxruntime": _ort_version()}

    return build


def run_builder(
    args: list[str], progress: ProgressFn, variant: str, module: str = "whistle_stop.backends.engines.onnx.build"
) -> dict:
    """Run onnx/build.py (or another builder `module` speaking its protocol, e.g. concat_build)
    in a child process, relaying its progress lines; return its details."""
    command = [sys.executable, "-m", module, *args]
    details: dict | None = None
    with tempfile.TemporaryFile() as log:
        child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
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
            raise OnnxBuildError(
                f"building the ONNX {variant} model failed (exit code {code}): {last}\n" + "\n".join(tail)
            )
    return details


def _ort_version() -> str:
    from importlib.metadata import version

    return version("onnxruntime")
