"""The GenAI artefacts in the shared artefact cache, one folder per variant:

    <cache>/ortgenai/<weights_hash>/<variant>/model.onnx, model.onnx.data, genai_config.json

(the folder artifact_folders.ortgenai names). fp32 is exported from the safetensors; int8 and int4
are quantised from the cached fp32 one. Builds run in a child process (build.py) through the ONNX
engines' runner, so the worker never imports torch. The config digest is in the meta: a changed
config.json with the same weights rebuilds.
"""

from __future__ import annotations

from pathlib import Path

from ...progress import ProgressFn, scaled
from ...sources.model_files import ModelFiles
from ...storage import artifact_cache
from ...storage.artifact_cache import Artifact, BuildFn
from ..artifact_folders import ORTGENAI_KIND
from ..onnx import cache as onnx_cache
from .genai_config import MODEL_FILE

FORMAT_VERSION = 1  # bump when the export or genai_config.json changes: older caches are rebuilt
VARIANTS = ("fp32", "int8", "int4")
_BUILDER = "whistle_stop.backends.engines.ortgenai.build"


def meta(model: ModelFiles, variant: str) -> dict:
    """What a cached variant must have been built with to be used."""
    return onnx_cache.meta(model, variant, FORMAT_VERSION)


def ensure(model: ModelFiles, variant: str, progress: ProgressFn) -> Artifact:
    """The cached artefact if it is whole and current, else a freshly built one."""
    return artifact_cache.ensure(
        ORTGENAI_KIND, model.weights_hash, variant, _builder(model, variant, progress), progress, meta(model, variant)
    )


def rebuild(model: ModelFiles, variant: str, progress: ProgressFn) -> Artifact:
    """Throw the cached artefact away and build it again (GenAI would not open it)."""
    return artifact_cache.rebuild(
        ORTGENAI_KIND, model.weights_hash, variant, _builder(model, variant, progress), progress, meta(model, variant)
    )


def _builder(model: ModelFiles, variant: str, progress: ProgressFn) -> BuildFn:
    if variant not in VARIANTS:
        raise ValueError(f"unknown GenAI variant {variant!r}")

    def build(out: Path) -> dict:
        args = ["--variant", variant, "--config", str(model.folder / "config.json")]
        if variant == "fp32":
            args += ["--weights", str(model.safetensors)]
            span = (0.0, 1.0)
        else:
            source = ensure(model, "fp32", scaled(progress, 0.0, 0.7))
            args += ["--source", str(source.folder / MODEL_FILE)]
            span = (0.7, 1.0)
        details = onnx_cache.run_builder(
            args + ["--out", str(out)], scaled(progress, *span), f"GenAI {variant}", _BUILDER
        )
        return {**details, "model_id": model.model_id, "onnxruntime": _version("onnxruntime")}

    return build


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)
