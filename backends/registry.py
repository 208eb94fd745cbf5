"""The engines whistle-stop knows, imported lazily by path, and what the rest of the code may know of them.

Listing engines or asking whether one is available never imports its heavy packages, so an
optional engine that is not installed costs nothing. Whatever the CLI, the window or the run
code needs to know about an engine before running it (the reference, the calibration engine,
which ones serve concurrently, its runtime packages) is a field of its entry here: nothing
outside an engine's own module names it.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from .engine import Engine, EngineOptions
from .errors import UsageError


class Role(Enum):
    """What the harness itself uses an engine for, beside the user's own choices."""

    NONE = "none"
    REFERENCE = "reference"  # ticked by default, and the one other engines' tokens are compared with
    CALIBRATION = "calibration"  # computes nothing: its ITL is the harness's own cost per token


@dataclass(frozen=True, kw_only=True)
class EngineSpec:
    name: str
    target: str  # "package.module:ClassName"
    description: str
    requires: tuple[str, ...] = ()  # importable module names
    install: str = ""  # the command that makes it available
    precision: str = "fp32"
    # The engine class's own constructor arguments, after (name, options).
    engine_args: dict[str, Any] = field(default_factory=dict)
    # "cuda" for GPU-only variants, "linux" for runtimes with Linux wheels only, "cc" for engines that
    # build their kernel with the machine's C compiler and have no fallback
    needs: str = ""
    # "package.module:function" in a light module: (**engine_args) -> "" where this machine can run the
    # engine, else why not in one line: a need only the engine's own code knows (torch.compile's C++ compiler)
    requirement: str = ""
    options: str = ""  # "package.module:Class" of its typed settings (an EngineSettings), if any
    # "package.module:function" in a light module: (model, **engine_args) -> the artefact-cache folders
    # it loads from (page-cache eviction for --cold; the parent never imports the engine for it)
    artifacts: str = ""
    # The distributions (as pip names them) whose versions a run of this engine depends on:
    # environment.json records each one's installed version.
    packages: tuple[str, ...] = ()
    # "package.module:function" in a light module: (model, port, threads, **kwargs) -> the
    # ServerCommand of the engine's own server program (llama.cpp's, vLLM's), which
    # `bench --serve-cold-start` times beside `whistle-stop serve`; "" for engines without one.
    own_server: str = ""
    role: Role = Role.NONE
    # A server: load runs may send it several streams at once. The CLI and the window know it before
    # anything runs; the engine class declares the same in its Capabilities (a test checks both agree).
    serves_concurrently: bool = False


_CORE = "pip install -e ."
_PEERS = 'pip install -e ".[peers]"'
_ENGINES = "whistle_stop.backends.engines."
_FILES = _ENGINES + "artifact_folders:"  # where each family's cached files live
_LLAMA_OPTIONS = _ENGINES + "llamacpp_options:LlamaCppOptions"
_NATIVE_OPTIONS = _ENGINES + "native_options:NativeOptions"


def _family(
    target: str, requires: tuple[str, ...], packages: tuple[str, ...], install: str = _CORE, artifacts: str = ""
) -> EngineSpec:
    """An engine family's shared fields: each row below is this with its own name and settings."""
    return EngineSpec(
        name="",
        target=_ENGINES + target,
        description="",
        requires=requires,
        packages=packages,
        install=install,
        artifacts=artifacts and _FILES + artifacts,
    )


_HF = _family("hf:HFEngine", ("torch", "transformers"), ("torch", "transformers"))
_TORCH_STATIC = replace(
    _family("torch_static.engine:TorchStaticEngine", ("torch",), ("torch",)),
    requirement=_ENGINES + "torch_static.inductor:compile_requirement",
)
_NANOGPT = _family("nanogpt.engine:NanoGPTEngine", ("torch",), ("torch",))
# The exports go through torch.onnx.export(dynamo=True), which writes the graph with onnxscript.
_ORT_MODULES, _ORT_PACKAGES = ("onnxruntime", "onnx", "torch"), ("onnxruntime", "onnx", "onnxscript", "torch")
_ONNX = _family("onnx.engine:OnnxEngine", _ORT_MODULES, _ORT_PACKAGES, artifacts="onnx")
_ONNX_CONCAT = _family("onnx.concat_engine:OnnxConcatEngine", _ORT_MODULES, _ORT_PACKAGES, artifacts="onnx_concat")
_NUMPY = _family("numpy_runtime.engine:NumpyEngine", ("numpy",), ("numpy",))
_NATIVE = replace(
    _family("native.engine:NativeEngine", ("numpy",), ("numpy",), artifacts="native"),
    options=_NATIVE_OPTIONS,
    needs="cc",
)
_NATIVE_SPEC = replace(
    _family("native.speculative:NativeSpeculativeEngine", ("numpy",), ("numpy",), artifacts="native_spec"),
    options=_ENGINES + "speculative_options:SpeculativeOptions",
    needs="cc",
)
_NULL = _family("null_engine:NullEngine", ("numpy",), ("numpy",))
_LLAMA = replace(
    _family(
        "llamacpp.engine:LlamaCppEngine", ("llama_cpp", "gguf"), ("llama-cpp-python", "gguf"), _PEERS, artifacts="gguf"
    ),
    own_server=_ENGINES + "llamacpp_server:server_command",
)
# ctranslate2's TransformersConverter loads the model with transformers and torch.
_CT2 = _family(
    "ctranslate2_engine:CTranslate2Engine",
    ("ctranslate2", "transformers", "torch"),
    ("ctranslate2", "transformers", "torch"),
    _PEERS,
    artifacts="ctranslate2",
)
_OV = _family("openvino_engine:OpenVinoEngine", ("openvino",), ("openvino",), _PEERS, artifacts="openvino")
# The [tf] extra installs tensorflow-cpu; a user's own tensorflow provides the same module.
_TF = _family(
    "tensorflow.engine:TFEngine",
    ("tensorflow", "safetensors"),
    ("tensorflow-cpu", "tensorflow", "safetensors"),
    'pip install -e ".[tf]"',
)
_ORTGENAI = _family(
    "ortgenai.engine:OrtGenAIEngine",
    ("onnxruntime_genai", *_ORT_MODULES),
    ("onnxruntime-genai", *_ORT_PACKAGES),
    'pip install -e ".[ortgenai]"',
    artifacts="ortgenai",
)
_OVGENAI = _family(
    "openvino_genai.engine:OpenVinoGenAIEngine",
    ("openvino_genai", "openvino_tokenizers", "openvino"),
    ("openvino-genai", "openvino-tokenizers", "openvino"),
    'pip install -e ".[openvino-genai]"',
    artifacts="openvino_genai",
)
# vLLM runs in its own environment and a remote server elsewhere: nothing of this interpreter's.
_VLLM = replace(
    _family("vllm.engine:VllmEngine", (), ()),
    needs="linux",
    options=_ENGINES + "vllm_options:VllmOptions",
    serves_concurrently=True,
    own_server=_ENGINES + "vllm.server_command:own_server",
)
_REMOTE = replace(
    _family("remote_engine:RemoteEngine", (), ()),
    serves_concurrently=True,
    options=_ENGINES + "remote_options:RemoteOptions",
)

_BUILT_IN: tuple[EngineSpec, ...] = (
    replace(_HF, name="hf", role=Role.REFERENCE, description="transformers GPT2LMHeadModel, eager fp32 (the baseline)"),
    replace(
        _HF, name="hf-bf16", description="transformers in bfloat16", precision="bf16", engine_args={"dtype": "bf16"}
    ),
    replace(
        _HF,
        name="hf-int8",
        description="transformers, Conv1D->Linear, torch dynamic int8",
        precision="int8",
        engine_args={"dtype": "int8"},
    ),
    replace(
        _HF,
        name="hf-assisted",
        target=_ENGINES + "hf:HFAssistedEngine",
        options=_ENGINES + "hf_options:AssistedOptions",
        description="transformers' assisted generation: the int8 dynamic copy drafts, the fp32 model checks "
        "(speculative, in transformers' own loop)",
    ),
    replace(
        _HF,
        name="hf-fp16-dynamic",
        precision="f16",
        engine_args={"dtype": "fp16-dynamic"},
        description="transformers, quantize_dynamic(nn.Linear, float16) as a founding write-up did "
        "(converts lm_head only)",
    ),
    replace(_TORCH_STATIC, name="torch-static", description="own PyTorch GPT-2, preallocated static KV cache"),
    replace(
        _TORCH_STATIC,
        name="torch-static-bf16",
        precision="bf16",
        engine_args={"dtype": "bf16"},
        description="own PyTorch GPT-2, bf16 weights, float32 arithmetic on the CPU",
    ),
    replace(
        _TORCH_STATIC,
        name="torch-static-int8",
        precision="int8",
        engine_args={"dtype": "int8"},
        description="own PyTorch GPT-2, every matmul dynamic int8 (4 per layer + lm_head)",
    ),
    replace(
        _TORCH_STATIC,
        name="torch-static-compile",
        precision="bf16",
        engine_args={"compile": True, "dtype": "bf16"},
        description="own PyTorch GPT-2, bf16, torch.compile'd decode (CUDA graphs on a GPU)",
    ),
    replace(
        _TORCH_STATIC,
        name="torch-static-cuda",
        engine_args={"device": "cuda"},
        needs="cuda",
        description="own PyTorch GPT-2 on CUDA, fp32, static KV cache",
    ),
    replace(
        _TORCH_STATIC,
        name="torch-static-cuda-graphs",
        precision="bf16",
        needs="cuda",
        engine_args={"compile": True, "dtype": "bf16", "device": "cuda"},
        description="own PyTorch GPT-2 on CUDA, bf16, decode captured in CUDA graphs",
    ),
    replace(
        _NANOGPT, name="nanogpt", description="nanoGPT's way: no KV cache, the whole sequence recomputed per token"
    ),
    replace(_ONNX, name="onnx", description="ONNX Runtime, own export with past key/values, graph-optimised"),
    replace(
        _ONNX,
        name="onnx-int8",
        precision="int8",
        engine_args={"variant": "int8"},
        description="ONNX Runtime, dynamic int8 quantisation",
    ),
    replace(
        _ONNX,
        name="onnx-int4",
        precision="int4",
        engine_args={"variant": "int4"},
        description="ONNX Runtime, 4-bit weight-only (MatMulNBits)",
    ),
    replace(
        _ONNX_CONCAT, name="onnx-concat", description="ONNX Runtime, classic export: past/present concatenated per step"
    ),
    replace(_NUMPY, name="numpy", description="torch-free numpy runtime, zero-copy mmap of safetensors"),
    replace(
        _NATIVE,
        name="native",
        description="own C runtime: the whole step in one call per token (built with the machine's compiler), fp32",
    ),
    replace(
        _NATIVE,
        name="native-bf16",
        precision="bf16",
        engine_args={"dtype": "bf16"},
        description="own C runtime, bf16 weights, float32 arithmetic",
    ),
    replace(
        _NATIVE,
        name="native-int8",
        precision="int8",
        engine_args={"dtype": "int8"},
        description="own C runtime, int8 weights (a scale per row), int8 activations in decode's products",
    ),
    replace(
        _NATIVE,
        name="native-int4",
        precision="int4",
        engine_args={"dtype": "int4"},
        description="own C runtime, 4-bit weights (blocks of 32), int8 activations in the products",
    ),
    replace(
        _NATIVE_SPEC,
        name="native-spec",
        engine_args={"target": "native", "draft": "native-int8"},
        description="own C runtime, speculative: native-int8 drafts, native (fp32) checks them in one pass "
        "(greedy output = native's)",
    ),
    replace(
        _NATIVE_SPEC,
        name="native-bf16-spec",
        precision="bf16",
        engine_args={"target": "native-bf16", "draft": "native-int4"},
        description="own C runtime, speculative: native-int4 drafts, native-bf16 checks them (output = native-bf16's)",
    ),
    replace(
        _NULL,
        name="null",
        role=Role.CALIBRATION,
        description="no compute: fixed logits; its ITL is the harness's own per-token cost",
    ),
    # The engines users would pick instead (the [peers] extra).
    replace(
        _LLAMA,
        name="llamacpp",
        engine_args={"quant": "f32"},
        options=_LLAMA_OPTIONS,
        description="llama.cpp (llama-cpp-python), own GGUF, f32",
    ),
    replace(
        _LLAMA,
        name="llamacpp-f16",
        precision="f16",
        engine_args={"quant": "f16"},
        options=_LLAMA_OPTIONS,
        description="llama.cpp, GGUF f16",
    ),
    replace(
        _LLAMA,
        name="llamacpp-bf16",
        precision="bf16",
        engine_args={"quant": "bf16"},
        options=_LLAMA_OPTIONS,
        description="llama.cpp, GGUF bf16",
    ),
    replace(
        _LLAMA,
        name="llamacpp-q8_0",
        precision="int8",
        engine_args={"quant": "q8_0"},
        options=_LLAMA_OPTIONS,
        description="llama.cpp, GGUF q8_0 (llama.cpp's quantiser)",
    ),
    replace(
        _LLAMA,
        name="llamacpp-q4_0",
        precision="int4",
        engine_args={"quant": "q4_0"},
        options=_LLAMA_OPTIONS,
        description="llama.cpp, GGUF q4_0 (llama.cpp's quantiser)",
    ),
    replace(
        _LLAMA,
        name="llamacpp-lookup",
        target=_ENGINES + "llamacpp.lookup:LlamaCppLookupEngine",
        engine_args={"quant": "f32"},
        options=_LLAMA_OPTIONS,
        description="llama.cpp f32 with prompt-lookup decoding (llama-cpp-python's LlamaPromptLookupDecoding): "
        "pays where the text repeats itself",
    ),
    replace(
        _CT2, name="ctranslate2", engine_args={"compute_type": "float32"}, description="CTranslate2 generator, float32"
    ),
    replace(
        _CT2,
        name="ctranslate2-int8",
        precision="int8",
        engine_args={"compute_type": "int8"},
        description="CTranslate2 generator, int8",
    ),
    replace(
        _OV,
        name="openvino",
        engine_args={"weight_format": "fp32"},
        description="OpenVINO Runtime, f32, stateful KV cache",
    ),
    replace(
        _OV,
        name="openvino-int8",
        precision="int8",
        engine_args={"weight_format": "int8"},
        description="OpenVINO Runtime, int8 weight compression",
    ),
    replace(
        _TF,
        name="tf",
        description="TensorFlow 2 GPT-2 with a past-state cache (as OpenAI's original code), one tf.function per token",
    ),
    replace(
        _TF,
        name="tf-xla",
        engine_args={"xla": True},
        description="TensorFlow 2 GPT-2, decode step XLA-compiled (jit_compile)",
    ),
    replace(
        _ORTGENAI,
        name="ortgenai",
        engine_args={"variant": "fp32"},
        description="ONNX Runtime GenAI (C++ generation loop and KV cache), fp32",
    ),
    replace(
        _ORTGENAI,
        name="ortgenai-int8",
        precision="int8",
        engine_args={"variant": "int8"},
        description="ONNX Runtime GenAI, 8-bit weight-only (MatMulNBits)",
    ),
    replace(
        _ORTGENAI,
        name="ortgenai-int4",
        precision="int4",
        engine_args={"variant": "int4"},
        description="ONNX Runtime GenAI, 4-bit weight-only (MatMulNBits, block 32)",
    ),
    replace(
        _OVGENAI,
        name="openvino-genai",
        engine_args={"weight_format": "fp32"},
        description="OpenVINO GenAI LLMPipeline, f32 asked for explicitly",
    ),
    replace(
        _OVGENAI,
        name="openvino-genai-bf16",
        precision="bf16",
        engine_args={"weight_format": "fp32", "inference_precision": "bf16"},
        description="OpenVINO GenAI LLMPipeline, bf16 inference precision",
    ),
    replace(
        _OVGENAI,
        name="openvino-genai-int8",
        precision="int8",
        engine_args={"weight_format": "int8"},
        description="OpenVINO GenAI LLMPipeline, int8 weight compression",
    ),
    replace(
        _OVGENAI,
        name="openvino-genai-int4",
        precision="int4",
        engine_args={"weight_format": "int4"},
        description="OpenVINO GenAI LLMPipeline, int4 weight compression",
    ),
    # A real vLLM server, set up and started by the engine itself in its own environment.
    replace(
        _VLLM,
        name="vllm",
        engine_args={"dtype": "fp32"},
        description="vLLM's OpenAI-compatible server, fp32, managed (first use creates its own ~3.5 GB environment)",
    ),
    replace(
        _VLLM,
        name="vllm-bf16",
        precision="bf16",
        engine_args={"dtype": "bf16"},
        description="vLLM's OpenAI-compatible server, bfloat16, managed",
    ),
    replace(
        _REMOTE,
        name="remote",
        precision="server",
        description="any OpenAI-compatible completion server (vLLM, TGI, llama.cpp server)",
    ),
)
BUILT_IN: dict[str, EngineSpec] = {spec.name: spec for spec in _BUILT_IN}
# The engines this process knows: the built-in ones, plus any a test installs with `use`.
ENGINES: dict[str, EngineSpec] = dict(BUILT_IN)


@contextlib.contextmanager
def use(specs: Iterable[EngineSpec]) -> Iterator[None]:
    """Add these engines (a test's scripted ones) to the registry of this whole process while the
    block runs; a spawned worker receives its EngineSpec itself, so it needs nothing more."""
    saved = dict(ENGINES)
    ENGINES.update({spec.name: spec for spec in specs})
    try:
        yield
    finally:
        ENGINES.clear()
        ENGINES.update(saved)


def names() -> list[str]:
    return list(ENGINES)


def get(name: str) -> EngineSpec:
    try:
        return ENGINES[name]
    except KeyError:
        raise UsageError(f"unknown backend {name!r}; known backends: {', '.join(ENGINES)}") from None


def with_role(role: Role) -> str:
    """The one engine with this role (the reference, the calibration engine)."""
    found = [spec.name for spec in ENGINES.values() if spec.role is role]
    if len(found) != 1:
        raise LookupError(f"the registry needs exactly one {role.value} engine, not {found}")
    return found[0]


def reference() -> str:
    """The engine ticked by default and compared with when selected: the baseline."""
    return with_role(Role.REFERENCE)


def reference_among(backends: Sequence[str], lowered: Iterable[str] = ()) -> str:
    """The engine a run's tokens are compared with: the reference where it runs, else the first fp32
    engine (agreement then still means agreement with full precision, whatever order the engines
    run in) that its settings leave at fp32 (`lowered`: those whose settings do not, e.g. an 8-bit
    KV cache), else the first engine. The calibration engine's tokens are a baseline only alone."""
    if reference() in backends:
        return reference()
    specs = {name: ENGINES.get(name) for name in backends}
    usable = [name for name, spec in specs.items() if spec is None or spec.role is not Role.CALIBRATION]
    fp32 = [name for name in usable if (spec := specs[name]) is not None and spec.precision == "fp32"]
    full = [name for name in fp32 if name not in set(lowered)]
    return (full or fp32 or usable or list(backends))[0]


def serving_concurrently() -> list[str]:
    """The engines that serve several streams at once (servers): the only ones with load levels above 1."""
    return [spec.name for spec in ENGINES.values() if spec.serves_concurrently]


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
    if spec.needs == "cc" and not c_compiler_found():
        return False, "needs a C compiler to build its kernel (none found: install gcc, or set $CC)"
    try:
        module_spec = importlib.util.find_spec(spec.target.split(":")[0])
    except ModuleNotFoundError:
        module_spec = None
    if module_spec is None:
        return False, "not built into this version yet"
    why = unmet_requirement(spec)
    return not why, why


def unmet_requirement(spec: EngineSpec) -> str:
    """Why the engine's own module says it cannot run here ("" when it can, or declares nothing)."""
    if not spec.requirement:
        return ""
    module_name, function_name = spec.requirement.split(":")
    check: Callable[..., str] = getattr(importlib.import_module(module_name), function_name)
    return check(**spec.engine_args)


def cuda_available() -> bool:
    """Ask torch in a cheap way: only if the parent already imported it, or via nvidia's device nodes."""
    if "torch" in sys.modules:
        return bool(sys.modules["torch"].cuda.is_available())
    return os.path.exists("/dev/nvidiactl") and importlib.util.find_spec("torch") is not None


def c_compiler_found() -> bool:
    """Whether the compiler the own kernels are built with ($CC, else cc or gcc on PATH) exists. A
    preset then takes its next candidate instead of an engine that would fail at load."""
    import shutil  # here: a worker imports the registry before Ready, and shutil is in its cold start

    from .kernels.native import compiler  # imports no engine package

    cc = compiler()
    return cc is not None and shutil.which(cc) is not None


def create(name: str, options: EngineOptions) -> Engine:
    return create_from_spec(get(name), options)


def create_from_spec(spec: EngineSpec, options: EngineOptions) -> Engine:
    """Import the engine's module (the measured import cost) and construct it."""
    module_name, class_name = spec.target.split(":")
    cls: Callable[..., Engine] = getattr(importlib.import_module(module_name), class_name)
    return cls(spec.name, options, **spec.engine_args)
