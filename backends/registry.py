"""The engines whistle-stop knows, imported lazily by path.

Listing engines or asking whether one is available never imports its heavy packages, so an
optional engine that is not installed costs nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from typing import Callable

from .engine import Engine, EngineOptions
from .errors import UsageError


@dataclass(frozen=True)
class EngineSpec:
    name: str
    target: str  # "package.module:ClassName"
    description: str
    requires: tuple[str, ...] = ()  # importable module names
    install: str = ""  # the command that makes it available
    precision: str = "fp32"
    kwargs: dict = field(default_factory=dict)
    needs: str = ""  # "cuda" for GPU-only variants, "linux" for runtimes with Linux wheels only
    options: str = ""  # "package.module:Class" of its typed settings (an EngineSettings), if any
    # "package.module:function" in a light module: (model, **kwargs) -> the artefact-cache folders
    # it loads from (page-cache eviction for --cold; the parent never imports the engine for it)
    artifacts: str = ""
    # The distributions (as pip names them) whose versions a run of this engine depends on:
    # environment.json records each one's installed version.
    packages: tuple[str, ...] = ()
    # "package.module:function" in a light module: (model, port, threads, **kwargs) -> the
    # ServerCommand of the engine's own server program (llama.cpp's, vLLM's), which
    # `bench --serve-cold-start` times beside `whistle-stop serve`; "" for engines without one.
    own_server: str = ""


_CORE = 'pip install -e .'
_PEERS = 'pip install -e ".[peers]"'
_TF_EXTRA = 'pip install -e ".[tf]"'
_ORTGENAI_EXTRA = 'pip install -e ".[ortgenai]"'
_OVGENAI_EXTRA = 'pip install -e ".[openvino-genai]"'


@dataclass(frozen=True)
class _Runtime:
    """An engine family's modules (what `available` looks for) and the distributions that ship them."""

    requires: tuple[str, ...]
    packages: tuple[str, ...]


def _spec(name, target, description, runtime: _Runtime, precision="fp32", install=_CORE, **kwargs) -> EngineSpec:
    needs, options = kwargs.pop("needs", ""), kwargs.pop("options", "")
    artifacts, own_server = kwargs.pop("artifacts", ""), kwargs.pop("own_server", "")
    return EngineSpec(name, target, description, runtime.requires, install, precision, kwargs, needs,
                      options=options, artifacts=artifacts, packages=runtime.packages, own_server=own_server)


_TORCH = _Runtime(("torch",), ("torch",))
_HF = _Runtime(("torch", "transformers"), ("torch", "transformers"))
# The exports go through torch.onnx.export(dynamo=True), which writes the graph with onnxscript.
_ORT = _Runtime(("onnxruntime", "onnx", "torch"), ("onnxruntime", "onnx", "onnxscript", "torch"))
_NUMPY = _Runtime(("numpy",), ("numpy",))
_LLAMA = _Runtime(("llama_cpp", "gguf"), ("llama-cpp-python", "gguf"))
# ctranslate2's TransformersConverter loads the model with transformers and torch.
_CT2 = _Runtime(("ctranslate2", "transformers", "torch"), ("ctranslate2", "transformers", "torch"))
_OV = _Runtime(("openvino",), ("openvino",))
# The [tf] extra installs tensorflow-cpu; a user's own tensorflow provides the same module.
_TF = _Runtime(("tensorflow", "safetensors"), ("tensorflow-cpu", "tensorflow", "safetensors"))
_ORTGENAI = _Runtime(("onnxruntime_genai", "onnxruntime", "onnx", "torch"),
                     ("onnxruntime-genai", "onnxruntime", "onnx", "onnxscript", "torch"))
_OVGENAI = _Runtime(("openvino_genai", "openvino_tokenizers", "openvino"),
                    ("openvino-genai", "openvino-tokenizers", "openvino"))
# vLLM runs in its own environment and a remote server elsewhere: nothing of this interpreter's.
_OWN = _Runtime((), ())
_FILES = "whistle_stop.backends.engines.artifact_folders:"  # where each family's cached files live
_LLAMA_OPTIONS = "whistle_stop.backends.engines.llamacpp_options:LlamaCppOptions"
_LLAMA_SERVER = "whistle_stop.backends.engines.llamacpp_server:server_command"
_VLLM_SERVER = "whistle_stop.backends.engines.vllm.server_command:own_server"
ENGINES: dict[str, EngineSpec] = {s.name: s for s in [
    _spec("hf", "whistle_stop.backends.engines.hf:HFEngine", "transformers GPT2LMHeadModel, eager fp32 (the baseline)", _HF),
    _spec("hf-bf16", "whistle_stop.backends.engines.hf:HFEngine", "transformers in bfloat16", _HF, "bf16", dtype="bf16"),
    _spec("hf-int8", "whistle_stop.backends.engines.hf:HFEngine", "transformers, Conv1D->Linear, torch dynamic int8", _HF, "int8", dtype="int8"),
    _spec("hf-fp16-dynamic", "whistle_stop.backends.engines.hf:HFEngine", "transformers, quantize_dynamic(nn.Linear, float16) as a founding write-up did (converts lm_head only)", _HF, "f16", dtype="fp16-dynamic"),
    _spec("torch-static", "whistle_stop.backends.engines.torch_static.engine:TorchStaticEngine", "own PyTorch GPT-2, preallocated static KV cache", _TORCH),
    _spec("torch-static-bf16", "whistle_stop.backends.engines.torch_static.engine:TorchStaticEngine", "own PyTorch GPT-2, bf16 weights, float32 arithmetic on the CPU", _TORCH, "bf16", dtype="bf16"),
    _spec("torch-static-int8", "whistle_stop.backends.engines.torch_static.engine:TorchStaticEngine", "own PyTorch GPT-2, every matmul dynamic int8 (4 per layer + lm_head)", _TORCH, "int8", dtype="int8"),
    _spec("torch-static-compile", "whistle_stop.backends.engines.torch_static.engine:TorchStaticEngine", "own PyTorch GPT-2, bf16, torch.compile'd decode (CUDA graphs on a GPU)", _TORCH, "bf16", compile=True, dtype="bf16"),
    _spec("torch-static-cuda", "whistle_stop.backends.engines.torch_static.engine:TorchStaticEngine", "own PyTorch GPT-2 on CUDA, fp32, static KV cache", _TORCH, device="cuda", needs="cuda"),
    _spec("torch-static-cuda-graphs", "whistle_stop.backends.engines.torch_static.engine:TorchStaticEngine", "own PyTorch GPT-2 on CUDA, bf16, decode captured in CUDA graphs", _TORCH, "bf16", compile=True, dtype="bf16", device="cuda", needs="cuda"),
    _spec("nanogpt", "whistle_stop.backends.engines.nanogpt.engine:NanoGPTEngine", "nanoGPT's way: no KV cache, the whole sequence recomputed per token", _TORCH),
    _spec("onnx", "whistle_stop.backends.engines.onnx.engine:OnnxEngine", "ONNX Runtime, own export with past key/values, graph-optimised", _ORT, artifacts=_FILES + "onnx"),
    _spec("onnx-int8", "whistle_stop.backends.engines.onnx.engine:OnnxEngine", "ONNX Runtime, dynamic int8 quantisation", _ORT, "int8", variant="int8", artifacts=_FILES + "onnx"),
    _spec("onnx-int4", "whistle_stop.backends.engines.onnx.engine:OnnxEngine", "ONNX Runtime, 4-bit weight-only (MatMulNBits)", _ORT, "int4", variant="int4", artifacts=_FILES + "onnx"),
    _spec("onnx-concat", "whistle_stop.backends.engines.onnx.concat_engine:OnnxConcatEngine", "ONNX Runtime, classic export: past/present concatenated per step", _ORT, artifacts=_FILES + "onnx_concat"),
    _spec("numpy", "whistle_stop.backends.engines.numpy_runtime.engine:NumpyEngine", "torch-free numpy runtime, zero-copy mmap of safetensors", _NUMPY),
    _spec("native", "whistle_stop.backends.engines.native.engine:NativeEngine", "own C runtime: the whole step in one call per token (built with the machine's compiler), fp32", _NUMPY),
    _spec("native-bf16", "whistle_stop.backends.engines.native.engine:NativeEngine", "own C runtime, bf16 weights, float32 arithmetic", _NUMPY, "bf16", dtype="bf16"),
    _spec("native-int8", "whistle_stop.backends.engines.native.engine:NativeEngine", "own C runtime, int8 weights (a scale per row), int8 activations in decode's products", _NUMPY, "int8", dtype="int8"),
    _spec("native-int4", "whistle_stop.backends.engines.native.engine:NativeEngine", "own C runtime, 4-bit weights (blocks of 32), int8 activations in the products", _NUMPY, "int4", dtype="int4"),
    _spec("null", "whistle_stop.backends.engines.null_engine:NullEngine", "no compute: fixed logits; its ITL is the harness's own per-token cost", _NUMPY),
    # The engines users would pick instead (the [peers] extra).
    _spec("llamacpp", "whistle_stop.backends.engines.llamacpp.engine:LlamaCppEngine", "llama.cpp (llama-cpp-python), own GGUF, f32", _LLAMA, install=_PEERS, quant="f32", artifacts=_FILES + "gguf", options=_LLAMA_OPTIONS, own_server=_LLAMA_SERVER),
    _spec("llamacpp-f16", "whistle_stop.backends.engines.llamacpp.engine:LlamaCppEngine", "llama.cpp, GGUF f16", _LLAMA, "f16", install=_PEERS, quant="f16", artifacts=_FILES + "gguf", options=_LLAMA_OPTIONS, own_server=_LLAMA_SERVER),
    _spec("llamacpp-bf16", "whistle_stop.backends.engines.llamacpp.engine:LlamaCppEngine", "llama.cpp, GGUF bf16", _LLAMA, "bf16", install=_PEERS, quant="bf16", artifacts=_FILES + "gguf", options=_LLAMA_OPTIONS, own_server=_LLAMA_SERVER),
    _spec("llamacpp-q8_0", "whistle_stop.backends.engines.llamacpp.engine:LlamaCppEngine", "llama.cpp, GGUF q8_0 (llama.cpp's quantiser)", _LLAMA, "int8", install=_PEERS, quant="q8_0", artifacts=_FILES + "gguf", options=_LLAMA_OPTIONS, own_server=_LLAMA_SERVER),
    _spec("llamacpp-q4_0", "whistle_stop.backends.engines.llamacpp.engine:LlamaCppEngine", "llama.cpp, GGUF q4_0 (llama.cpp's quantiser)", _LLAMA, "int4", install=_PEERS, quant="q4_0", artifacts=_FILES + "gguf", options=_LLAMA_OPTIONS, own_server=_LLAMA_SERVER),
    _spec("ctranslate2", "whistle_stop.backends.engines.ctranslate2_engine:CTranslate2Engine", "CTranslate2 generator, float32", _CT2, install=_PEERS, compute_type="float32", artifacts=_FILES + "ctranslate2"),
    _spec("ctranslate2-int8", "whistle_stop.backends.engines.ctranslate2_engine:CTranslate2Engine", "CTranslate2 generator, int8", _CT2, "int8", install=_PEERS, compute_type="int8", artifacts=_FILES + "ctranslate2"),
    _spec("openvino", "whistle_stop.backends.engines.openvino_engine:OpenVinoEngine", "OpenVINO Runtime, f32, stateful KV cache", _OV, install=_PEERS, weight_format="fp32", artifacts=_FILES + "openvino"),
    _spec("openvino-int8", "whistle_stop.backends.engines.openvino_engine:OpenVinoEngine", "OpenVINO Runtime, int8 weight compression", _OV, "int8", install=_PEERS, weight_format="int8", artifacts=_FILES + "openvino"),
    _spec("tf", "whistle_stop.backends.engines.tensorflow.engine:TFEngine", "TensorFlow 2 GPT-2 with a past-state cache (as OpenAI's original code), one tf.function per token", _TF, install=_TF_EXTRA),
    _spec("tf-xla", "whistle_stop.backends.engines.tensorflow.engine:TFEngine", "TensorFlow 2 GPT-2, decode step XLA-compiled (jit_compile)", _TF, install=_TF_EXTRA, xla=True),
    _spec("ortgenai", "whistle_stop.backends.engines.ortgenai.engine:OrtGenAIEngine", "ONNX Runtime GenAI (C++ generation loop and KV cache), fp32", _ORTGENAI, install=_ORTGENAI_EXTRA, variant="fp32", artifacts=_FILES + "ortgenai"),
    _spec("ortgenai-int8", "whistle_stop.backends.engines.ortgenai.engine:OrtGenAIEngine", "ONNX Runtime GenAI, 8-bit weight-only (MatMulNBits)", _ORTGENAI, "int8", install=_ORTGENAI_EXTRA, variant="int8", artifacts=_FILES + "ortgenai"),
    _spec("ortgenai-int4", "whistle_stop.backends.engines.ortgenai.engine:OrtGenAIEngine", "ONNX Runtime GenAI, 4-bit weight-only (MatMulNBits, block 32)", _ORTGENAI, "int4", install=_ORTGENAI_EXTRA, variant="int4", artifacts=_FILES + "ortgenai"),
    _spec("openvino-genai", "whistle_stop.backends.engines.openvino_genai.engine:OpenVinoGenAIEngine", "OpenVINO GenAI LLMPipeline, f32 asked for explicitly", _OVGENAI, install=_OVGENAI_EXTRA, weight_format="fp32", artifacts=_FILES + "openvino_genai"),
    _spec("openvino-genai-bf16", "whistle_stop.backends.engines.openvino_genai.engine:OpenVinoGenAIEngine", "OpenVINO GenAI LLMPipeline, bf16 inference precision", _OVGENAI, "bf16", install=_OVGENAI_EXTRA, weight_format="fp32", inference_precision="bf16", artifacts=_FILES + "openvino_genai"),
    _spec("openvino-genai-int8", "whistle_stop.backends.engines.openvino_genai.engine:OpenVinoGenAIEngine", "OpenVINO GenAI LLMPipeline, int8 weight compression", _OVGENAI, "int8", install=_OVGENAI_EXTRA, weight_format="int8", artifacts=_FILES + "openvino_genai"),
    _spec("openvino-genai-int4", "whistle_stop.backends.engines.openvino_genai.engine:OpenVinoGenAIEngine", "OpenVINO GenAI LLMPipeline, int4 weight compression", _OVGENAI, "int4", install=_OVGENAI_EXTRA, weight_format="int4", artifacts=_FILES + "openvino_genai"),
    # A real vLLM server, set up and started by the engine itself in its own environment.
    _spec("vllm", "whistle_stop.backends.engines.vllm.engine:VllmEngine", "vLLM's OpenAI-compatible server, fp32, managed (first use creates its own ~3.5 GB environment)", _OWN, needs="linux", dtype="fp32", own_server=_VLLM_SERVER),
    _spec("vllm-bf16", "whistle_stop.backends.engines.vllm.engine:VllmEngine", "vLLM's OpenAI-compatible server, bfloat16, managed", _OWN, "bf16", needs="linux", dtype="bf16", own_server=_VLLM_SERVER),
    _spec("remote", "whistle_stop.backends.engines.remote_engine:RemoteEngine", "any OpenAI-compatible completion server (vLLM, TGI, llama.cpp server)", _OWN, "server",
          options="whistle_stop.backends.engines.remote_options:RemoteOptions"),
]}


def names() -> list[str]:
    return list(ENGINES)


def get(name: str) -> EngineSpec:
    try:
        return ENGINES[name]
    except KeyError:
        raise UsageError(f"unknown backend {name!r}; known backends: {', '.join(ENGINES)}") from None


def available(name: str) -> tuple[bool, str]:
    """(True, "") or (False, why not) without importing the engine's packages."""
    spec = get(name)
    missing = [m for m in spec.requires if importlib.util.find_spec(m) is None]
    if missing:
        return False, f"{', '.join(missing)} not installed: {spec.install}"
    if spec.needs == "cuda" and not cuda_available():
        return False, "needs a CUDA GPU (none found)"
    if spec.needs == "linux" and not sys.platform.startswith("linux"):
        return False, "needs Linux (its runtime publishes Linux wheels only)"
    try:
        module_spec = importlib.util.find_spec(spec.target.split(":")[0])
    except ModuleNotFoundError:
        module_spec = None
    if module_spec is None:
        return False, "not built into this version yet"
    return True, ""


def cuda_available() -> bool:
    """Ask torch in a cheap way: only if the parent already imported it, or via nvidia's device nodes."""
    if "torch" in sys.modules:
        return bool(sys.modules["torch"].cuda.is_available())
    return os.path.exists("/dev/nvidiactl") and importlib.util.find_spec("torch") is not None


def create(name: str, options: EngineOptions) -> Engine:
    return create_from_spec(get(name), options)


def create_from_spec(spec: EngineSpec, options: EngineOptions) -> Engine:
    """Import the engine's module (the measured import cost) and construct it."""
    module_name, class_name = spec.target.split(":")
    cls: Callable[..., Engine] = getattr(importlib.import_module(module_name), class_name)
    engine = cls(options, **spec.kwargs)
    engine.name = spec.name
    return engine
