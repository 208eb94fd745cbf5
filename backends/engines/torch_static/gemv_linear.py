"""Linears whose one-row products (decode) run on the project's GEMV kernels, on the CPU.

Decode multiplies one row by every matrix, so it is bound by how fast the weights stream from
memory. PyTorch's own CPU kernels stream them slowly: the float32 linear (MKL) reads well below
the machine's bandwidth, and its bf16 linear computes in bf16 and, without native bf16 (AVX2),
converts more than it reads. backends/kernels/gemv.c reads them in four streams per core
(docs/engines.md has the figures).

float32: the weights stay as they are; one row -> f32 kernel, more rows (prefill, scoring) ->
F.linear. bf16 (what llama.cpp's bf16 and most CPU runtimes do): the matrices (the four per layer
and the tied lm_head / embedding) stay bf16, activations, norms, biases, positions and the KV
cache are float32; one row -> bf16 kernel (float32 sums), more rows -> the weight widened to
float32 once per call and torch's GEMM (oneDNN's bf16 GEMM where the CPU has native bf16).
Inside torch.compile graphs the kernel is an opaque op; eager calls skip the dispatcher.
Without a C compiler, the kernels are unavailable and torch's own kernels run (notes say so).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...kernels.native import KernelUnavailable, gemv

_KERNELS: dict[torch.dtype, object] = {}  # weight dtype -> ctypes function, filled by enable_kernels()
_NAMES = {torch.float32: "f32", torch.bfloat16: "bf16"}


def enable_kernels() -> str:
    """Build/open the GEMV kernels; returns what decode will use (for the engine's notes)."""
    try:
        _KERNELS.update({dtype: gemv(name) for dtype, name in _NAMES.items()})
    except KernelUnavailable as exc:
        _KERNELS.clear()
        return f"decode GEMV: torch's kernels ({exc})"
    return "decode GEMV: own kernel (backends/kernels/gemv.c, float32 sums)"


def _gemv(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    # x [..., K] float32 (one row in decode); weight [N, K] float32 or bf16; bias [N] float32 -> [..., N]
    x = x.contiguous()
    n, k = weight.shape
    y = torch.empty((*x.shape[:-1], n), dtype=torch.float32)
    _KERNELS[weight.dtype](
        weight.data_ptr(),
        x.data_ptr(),
        bias.data_ptr() if bias is not None else None,
        y.data_ptr(),
        x.numel() // k,
        n,
        k,
    )
    return y


# The kernel as an opaque op inside compiled graphs (dynamo cannot trace a ctypes call). A plain
# Library op: torch.library.custom_op's Python wrapper costs several times more per call, and
# decode makes 49 of them per token.
_LIBRARY = torch.library.Library("whistle_stop_kernels", "DEF")  # not "whistle_stop::", the profiler's phase marks
_LIBRARY.define("gemv(Tensor x, Tensor weight, Tensor? bias) -> Tensor")
_LIBRARY.impl("gemv", _gemv, "CPU")


@torch.library.register_fake("whistle_stop_kernels::gemv")
def _(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


class GemvLinear(nn.Module):
    """nn.Linear with a float32 or bf16 [out, in] weight; float32 input, bias and output."""

    def __init__(self, weight: Tensor, bias: Tensor | None, native_bf16: bool) -> None:
        super().__init__()
        self.weight = weight  # may be shared (lm_head and the embedding)
        self.bias = None if bias is None else nn.Parameter(bias.float(), requires_grad=False)
        self.native_bf16 = native_bf16

    def forward(self, x: Tensor) -> Tensor:
        one_row = x.numel() == x.shape[-1]  # decode
        if one_row and self.weight.dtype in _KERNELS:
            if torch.compiler.is_compiling() or torch._C._autograd._profiler_enabled():  # seen as an op
                return torch.ops.whistle_stop_kernels.gemv(x, self.weight, self.bias)
            return _gemv(x, self.weight, self.bias)  # eager: the direct call skips the op's dispatch
        if self.weight.dtype == torch.float32:
            return F.linear(x, self.weight, self.bias)
        if one_row or self.native_bf16:  # torch's bf16 GEMV (no kernel), or oneDNN's bf16 GEMM (AMX, AVX512-BF16)
            y = F.linear(x.to(torch.bfloat16), self.weight).float()
            return y if self.bias is None else y + self.bias
        return F.linear(x, self.weight.float(), self.bias)  # several rows: widen once, float32 GEMM


def native_bf16() -> bool:
    return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def use_gemv_linears(model: nn.Module) -> int:
    """Every nn.Linear of a GPT2 -> GemvLinear (same weights); with bf16 weights, every other
    parameter (norms, biases, positions) becomes float32, so activations and the KV cache are
    float32 (call setup_caches after). Returns how many linears."""
    native = native_bf16()
    count = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, name, GemvLinear(child.weight, child.bias, native))
                count += 1
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            kept = name == "weight" and (isinstance(module, GemvLinear) or module is model.wte)
            if param.dtype == torch.bfloat16 and not kept:
                setattr(module, name, nn.Parameter(param.float(), requires_grad=False))
    return count
