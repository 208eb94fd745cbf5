"""The classic past/present export in the shared artefact cache, beside the other ONNX variants:

    <cache>/onnx/<weights_hash>-<config digest>/concat-fp32/model.onnx [+ model.onnx.data]

Same kind and key as onnx/cache.py, its own variant folder and format version, so the two
exports never collide and each is rebuilt only when its own export changes. Built in a child
process (concat_build.py) through onnx/cache.py's runner. Light: no torch, no onnxruntime
(artifact_folders.py imports it for --cold).
"""

from __future__ import annotations

from pathlib import Path

from ...progress import ProgressFn
from ...sources.model_files import ModelFiles
from ...storage import artifact_cache
from ...storage.artifact_cache import Artifact, BuildFn
from . import cache as onnx_cache

VARIANT = "concat-fp32"
FORMAT_VERSION = 1  # bump when concat_export.py changes: older caches are then rebuilt
_BUILDER = "whistle_stop.backends.engines.onnx.concat_build"


def variant_dir(model: ModelFiles) -> Path:
    return onnx_cache.variant_dir(model, VARIANT)


def meta(model: ModelFiles) -> dict:
    """What the cached export must have been built with to be used."""
    return {
        "format": FORMAT_VERSION,
        "variant": VARIANT,
        "weights_hash": model.weights_hash,
        "config_digest": onnx_cache.config_digest(model.config),
    }


def ensure(model: ModelFiles, progress: ProgressFn) -> Artifact:
    """The cached export if it is whole and current, else a freshly built one."""
    return _ready(
        artifact_cache.ensure(
            onnx_cache.KIND, onnx_cache._key(model), VARIANT, _builder(model, progress), progress, meta(model)
        ),
        progress,
    )


def rebuild(model: ModelFiles, progress: ProgressFn) -> Artifact:
    """Throw the cached export away and build it again (its session would not open)."""
    return _ready(
        artifact_cache.rebuild(
            onnx_cache.KIND, onnx_cache._key(model), VARIANT, _builder(model, progress), progress, meta(model)
        ),
        progress,
    )


def _ready(artefact: Artifact, progress: ProgressFn) -> Artifact:
    if artefact.built:
        progress("ONNX classic past/present model ready", 1.0)
    return artefact


def _builder(model: ModelFiles, progress: ProgressFn) -> BuildFn:
    def build(out: Path) -> dict:
        args = ["--weights", str(model.safetensors), "--config", str(model.folder / "config.json"), "--out", str(out)]
        details = onnx_cache.run_builder(args, progress, VARIANT, module=_BUILDER)
        return {**details, "model_id": model.model_id, "onnxruntime": onnx_cache._ort_version()}

    return build
