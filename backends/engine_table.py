"""The engines whistle-stop ships: one EngineSpec row each, made from its family's shared fields (the
registry, registry.py, looks them up; nothing else names them)."""

from __future__ import annotations

from dataclasses import replace

from .engine_spec import EngineSpec, Role

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
    options=_LLAMA_OPTIONS,  # every llama.cpp row's form fields
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

BUILT_IN_SPECS: tuple[EngineSpec, ...] = (
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
        description="llama.cpp (llama-cpp-python), own GGUF, f32",
    ),
    replace(
        _LLAMA,
        name="llamacpp-f16",
        precision="f16",
        engine_args={"quant": "f16"},
        description="llama.cpp, GGUF f16",
    ),
    replace(
        _LLAMA,
        name="llamacpp-bf16",
        precision="bf16",
        engine_args={"quant": "bf16"},
        description="llama.cpp, GGUF bf16",
    ),
    replace(
        _LLAMA,
        name="llamacpp-q8_0",
        precision="int8",
        engine_args={"quant": "q8_0"},
        description="llama.cpp, GGUF q8_0 (llama.cpp's quantiser)",
    ),
    replace(
        _LLAMA,
        name="llamacpp-q4_0",
        precision="int4",
        engine_args={"quant": "q4_0"},
        description="llama.cpp, GGUF q4_0 (llama.cpp's quantiser)",
    ),
    replace(
        _LLAMA,
        name="llamacpp-lookup",
        target=_ENGINES + "llamacpp.lookup:LlamaCppLookupEngine",
        engine_args={"quant": "f32"},
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
