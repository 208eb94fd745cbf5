"""bf16 weights with float32 arithmetic, for CPUs: what llama.cpp's bf16 and most CPU runtimes do.

Decode reads every weight once per token, so storing the matrices in bf16 halves the bytes; the
arithmetic can stay float32 at no cost in a memory-bound matrix-vector product. Torch's own bf16
linear computes in bf16 and, on a CPU without native bf16 (AVX2), spends more time converting
than reading: its bf16 KV cache and attention added 6-8 ms per token on a 2-core EPYC.

So on the CPU: matrices (the four per layer and the tied lm_head / embedding) stay bf16;
activations, layer norms, biases, positions and the KV cache are float32. A one-row product (decode)
goes to the bf16 GEMV kernel (backends/kernels/bf16_gemv.c: weights read once as bf16, float32
sums), as a custom op inside torch.compile graphs; more rows (prefill, scoring) widen the weight
to float32 once per call and use torch's GEMM (or its bf16 GEMM where the CPU has native bf16).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...kernels.native import KernelUnavailable, bf16_gemv

_KERNEL = None  # ctypes function, set by enable_kernel()


def enable_kernel() -> str:
    """Build/open the bf16 GEMV kernel; returns what decode will use (for the engine's notes)."""
    global _KERNEL
    try:
        _KERNEL = bf16_gemv()
    except KernelUnavailable as exc:
        _KERNEL = None
        return f"decode GEMV: torch's bf16 kernel ({exc})"
    return "decode GEMV: own bf16 kernel (bf16 weights, float32 sums; backends/kernels/bf16_gemv.c)"


def _gemv(x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
    # x [..., K] float32 (one row in decode); weight [N, K] bf16; bias [N] float32 -> [..., N]
    x = x.contiguous()
    n, k = weight.shape
    y = torch.empty((*x.shape[:-1], n), dtype=torch.float32)
    _KERNEL(weight.data_ptr(), x.data_ptr(), bias.data_ptr() if bias is not None else None, y.data_ptr(),
            x.numel() // k, n, k)
    return y


# The kernel as an opaque op inside compiled graphs (dynamo cannot trace a ctypes call). A plain
# Library op: torch.library.custom_op's Python wrapper cost ~37 us a call against ~11 us here,
# and decode makes 49 of them per token.
_LIBRARY = torch.library.Library("whistle_stop", "DEF")
_LIBRARY.define("bf16_gemv(Tensor x, Tensor weight, Tensor? bias) -> Tensor")
_LIBRARY.impl("bf16_gemv", lambda x, weight, bias: _gemv(x, weight, bias), "CPU")


@torch.library.register_fake("whistle_stop::bf16_gemv")
def _(x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


class Bf16Linear(nn.Module):
    """nn.Linear with a bf16 [out, in] weight and float32 input, bias and output."""

    def __init__(self, weight: Tensor, bias: Tensor | None, native_bf16: bool) -> None:
        super().__init__()
        self.weight = weight  # bf16; may be shared (lm_head and the embedding)
        self.bias = None if bias is None else nn.Parameter(bias.float(), requires_grad=False)
        self.native_bf16 = native_bf16

    def forward(self, x: Tensor) -> Tensor:
        one_row = x.numel() == x.shape[-1]  # decode
        if one_row and _KERNEL is not None:
            if torch.compiler.is_compiling():
                return torch.ops.whistle_stop.bf16_gemv(x, self.weight, self.bias)
            return _gemv(x, self.weight, self.bias)  # eager: the direct call skips the op's dispatch
        if one_row or self.native_bf16:  # torch's bf16 GEMV (no kernel), or oneDNN's bf16 GEMM (AMX, AVX512-BF16)
            y = F.linear(x.to(torch.bfloat16), self.weight).float()
            return y if self.bias is None else y + self.bias
        return F.linear(x, self.weight.float(), self.bias)  # several rows: widen once, float32 GEMM


def native_bf16() -> bool:
    return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def keep_weights_bf16(model: nn.Module) -> None:
    """A GPT2 loaded in bf16 -> bf16 matrices (and the tied embedding), float32 everything else.
    Call setup_caches() after: the caches take the float32 dtype of the positions."""
    native = native_bf16()
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, name, Bf16Linear(child.weight, child.bias, native))
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            kept = name == "weight" and (isinstance(module, Bf16Linear) or module is model.wte)
            if param.dtype == torch.bfloat16 and not kept:
                setattr(module, name, nn.Parameter(param.float(), requires_grad=False))
