"""Small helpers shared by the PyTorch engines."""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import nn


def set_threads(threads: int) -> int:
    if threads > 0:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def quantize_linear_int8(module: nn.Module) -> nn.Module:
    """Dynamic int8 (weights int8, activations quantised per call) for every nn.Linear."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch 2.13 flags eager torch.ao quantization as deprecated
        from torch.ao.quantization import quantize_dynamic

        return quantize_dynamic(module, {nn.Linear}, dtype=torch.qint8, inplace=True)


def quantize_linear_fp16(module: nn.Module) -> list[str]:
    """`quantize_dynamic(model, {nn.Linear}, dtype=torch.float16)`, as one founding write-up did, on
    the module as it is (GPT-2's Conv1D blocks are not nn.Linear, so only lm_head converts).
    Returns the names of the converted modules."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch 2.13 flags eager torch.ao quantization as deprecated
        from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantLinear
        from torch.ao.quantization import quantize_dynamic

        quantize_dynamic(module, {nn.Linear}, dtype=torch.float16, inplace=True)
    return [name for name, m in module.named_modules() if isinstance(m, DynamicQuantLinear)]


def count_int8_linears(module: nn.Module) -> int:
    """How many layers really hold int8 weights (what a test checks after quantising)."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantLinear

    return sum(1 for m in module.modules() if isinstance(m, DynamicQuantLinear) and m.weight().dtype == torch.qint8)


def logits_to_numpy(logits: torch.Tensor) -> np.ndarray:
    """float32 numpy logits; `.cpu()` also synchronises a GPU before the caller reads a clock."""
    return logits.detach().to(torch.float32).cpu().numpy()
