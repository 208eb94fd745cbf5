"""Where each building engine family keeps its cached files, for one model: light on purpose.

The registry names these functions (`EngineSpec.artifacts`) so that the parent can find an
engine's files without importing the engine's packages: `--cold` evicts them from the page
cache before the engine's worker starts. Each returns the folders its engine loads from (the
final artefact only: a quantised variant's fp32 source is read only while building). The
folders need not exist yet. The kinds and keys are the ones the engines pass to
storage/artifact_cache.ensure (tests/test_cold_start.py checks that they agree).
"""

from __future__ import annotations

from pathlib import Path

from ..sources.model_files import ModelFiles
from ..storage.paths import cache_dir

GGUF_KIND = "gguf"
GGUF_FILE = "model.gguf"  # in each gguf folder
CT2_KIND = "ctranslate2"
OPENVINO_KIND = "openvino"
ORTGENAI_KIND = "ortgenai"
OPENVINO_GENAI_KIND = "openvino_genai"
NATIVE_LAYOUT_KIND = "native_layout"
NATIVE_LAYOUT_FILE = "matrices.safetensors"


def onnx(model: ModelFiles, variant: str = "fp32") -> list[Path]:
    from .onnx.cache import variant_dir  # torch-free, onnxruntime-free

    return [variant_dir(model, variant)]


def onnx_concat(model: ModelFiles) -> list[Path]:
    from .onnx.concat_cache import variant_dir  # torch-free, onnxruntime-free

    return [variant_dir(model)]


def gguf(model: ModelFiles, quant: str = "f32") -> list[Path]:
    return [cache_dir(GGUF_KIND, model.weights_hash) / quant]


def ctranslate2(model: ModelFiles, compute_type: str = "float32") -> list[Path]:
    return [cache_dir(CT2_KIND, model.weights_hash) / compute_type]


def openvino(model: ModelFiles, weight_format: str = "fp32") -> list[Path]:
    return [cache_dir(OPENVINO_KIND, model.weights_hash) / weight_format]


def ortgenai(model: ModelFiles, variant: str = "fp32") -> list[Path]:
    return [cache_dir(ORTGENAI_KIND, model.weights_hash) / variant]


def openvino_genai(model: ModelFiles, weight_format: str = "fp32", inference_precision: str = "f32") -> list[Path]:
    return [cache_dir(OPENVINO_GENAI_KIND, model.weights_hash) / weight_format]


def native(model: ModelFiles, dtype: str = "fp32") -> list[Path]:
    return [cache_dir(NATIVE_LAYOUT_KIND, model.weights_hash) / dtype]


def native_spec(model: ModelFiles, target: str = "native", draft: str = "native-int8") -> list[Path]:
    """The target's and the draft's layouts (the registry's pair; a draft of another model is not known here)."""
    from .. import registry

    return [folder for name in (target, draft) for folder in native(model, **registry.get(name).engine_args)]
