"""Operation names -> the categories a step is broken into.

The categories follow what a decode step does (issue: matrix multiplies, attention, KV-cache
update and copies, normalisation and activation, other kernels), plus what no kernel covers:
framework dispatch and Python, the harness (sampling, detokenizing, sending), and whatever
the measurements leave over ("unattributed", never spread over the others).
"""

from __future__ import annotations

import re
from enum import Enum


class Category(str, Enum):
    MATMUL = "matmul"
    ATTENTION = "attention"
    KV_CACHE = "kv cache"
    NORM_ACTIVATION = "norm + activation"
    OTHER_KERNELS = "other kernels"
    ENGINE_UNSPLIT = "engine (not split)"  # an engine whose runtime reports no per-operation times
    FRAMEWORK = "framework + Python"
    HARNESS = "harness"
    UNATTRIBUTED = "unattributed"

    @property
    def key(self) -> str:
        """A snake_case identifier for file columns (breakdown.csv's `<key>_ms`): the value is a label."""
        return _KEYS[self]


# Stable: breakdown.csv's columns are named from these, whatever the labels become.
_KEYS = {
    Category.MATMUL: "matmul",
    Category.ATTENTION: "attention",
    Category.KV_CACHE: "kv_cache",
    Category.NORM_ACTIVATION: "norm_and_activation",
    Category.OTHER_KERNELS: "other_kernels",
    Category.ENGINE_UNSPLIT: "engine_not_split",
    Category.FRAMEWORK: "framework_python",
    Category.HARNESS: "harness",
    Category.UNATTRIBUTED: "unattributed",
}

KERNELS = (Category.MATMUL, Category.ATTENTION, Category.KV_CACHE, Category.NORM_ACTIVATION, Category.OTHER_KERNELS)
ORDER = KERNELS + (Category.ENGINE_UNSPLIT, Category.FRAMEWORK, Category.HARNESS, Category.UNATTRIBUTED)


class OpFamily(Enum):
    """Whose operation names these are: each family has its own table below."""

    TORCH = "torch ops"
    ORT = "onnxruntime nodes"
    NUMPY_FUNCTIONS = "numpy runtime functions"
    OPENVINO_NODES = "openvino nodes"


# (pattern, category), first match wins; patterns match the whole lower-cased op name.
_TORCH = [
    (
        r"aten::(addmm|mm|bmm|matmul|linear|baddbmm_?|addbmm|dot|mv)|quantized::linear.*|.*fbgemm.*|mkldnn.*linear.*"
        r"|aten::_?weight_int8pack_mm|aten::_mm_.*|onednn::.*|whistle_stop_kernels::gemv",
        Category.MATMUL,
    ),
    (
        r"aten::(_?scaled_dot_product.*|_?softmax|softmax|masked_fill_?|_safe_softmax|triu|tril|where)",
        Category.ATTENTION,
    ),
    (
        r"aten::(copy_|index_copy_?|index_put_?|_index_put_impl_|cat|_cat|narrow_copy|slice_scatter|clone|fill_|zero_)",
        Category.KV_CACHE,
    ),
    (
        r"aten::(native_layer_norm|layer_norm|gelu|tanh|pow|mul_?|add_?|div_?|sub_?|rsub|silu|sigmoid|erf|mean|var"
        r"|rsqrt|sqrt)",
        Category.NORM_ACTIVATION,
    ),
    # views, allocation and dtype plumbing: dispatch cost, not compute
    (
        r"aten::(view|reshape|_reshape_alias|_unsafe_view|transpose|t|permute|expand|slice|select|as_strided|split"
        r"|split_with_sizes|unbind|unsqueeze|squeeze|contiguous|empty|empty_like|empty_strided|zeros|ones|full|arange"
        r"|detach|alias|lift_fresh|_to_copy|to|resolve_conj|resolve_neg|chunk|_has_compatible_shallow_copy_type"
        r"|item|_local_scalar_dense|is_nonzero|result_type|lift_fresh_copy|numpy_t|matrix_h|mt)"
        r"|torchdynamo cache lookup|torch-compiled region.*",
        Category.FRAMEWORK,
    ),  # torch.compile's guards
]
_ORT = [
    (r"(fused)?matmul.*|gemm|qgemm|matmulinteger.*|dynamicquantizematmul|matmulnbits|qlinearmatmul", Category.MATMUL),
    (r"(multihead|group(ed)?query)?attention|softmax|qattention|rotaryembedding", Category.ATTENTION),
    (r"concat|scatterelements|scatternd", Category.KV_CACHE),
    (
        r"(skip|simplified)?layernormalization|(bias|fast|quick)?gelu|tanh|pow|mul|add|div|sub|sqrt|erf|reducemean",
        Category.NORM_ACTIVATION,
    ),
]
_NUMPY = [  # the numpy runtime's own function names (engines/numpy_runtime/model.py)
    (r"linear|lm_head", Category.MATMUL),
    (r"attention|softmax", Category.ATTENTION),
    (r"kv_write", Category.KV_CACHE),
    (r"layer_norm|gelu_new", Category.NORM_ACTIVATION),
]
_OPENVINO = [
    (r"fullyconnected.*|matmul|gemm|convolution", Category.MATMUL),
    (r".*attention.*|softmax|scaleddotproduct.*", Category.ATTENTION),
    (r"readvalue|assign|concat|gather.*kv.*", Category.KV_CACHE),
    (r"mvn|layernorm.*|rms.*|gelu|eltwise|multiply|add|power|tanh|subgraph", Category.NORM_ACTIVATION),
    (r"reshape|transpose|squeeze|unsqueeze|shapeof|convert|parameter|result|constant", Category.FRAMEWORK),
]
_TABLES = {
    OpFamily.TORCH: _TORCH,
    OpFamily.ORT: _ORT,
    OpFamily.NUMPY_FUNCTIONS: _NUMPY,
    OpFamily.OPENVINO_NODES: _OPENVINO,
}
_COMPILED = {family: [(re.compile(p), c) for p, c in table] for family, table in _TABLES.items()}


def classify(op: str, family: OpFamily) -> Category:
    """The category of one operation of a runtime family."""
    name = op.strip().lower()
    for pattern, category in _COMPILED[family]:
        if pattern.fullmatch(name):
            return category
    return Category.OTHER_KERNELS
