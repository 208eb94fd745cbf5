"""float32 linears with their weights re-laid out once for oneDNN (what inductor's freezing does).

PyTorch's eager float32 linear goes through MKL's GEMM, whose matrix-vector path reads GPT-2's
weights at ~12 GB/s on a 2-core AMD EPYC: aten::addmm took 37-39 ms of a 42 ms decode step there.
oneDNN's linear on a weight it has re-laid out for itself took 32-34 ms where F.linear took
49-57 ms on the same matrices, and 8.1 ms against 12.5 ms for the lm_head alone.
The packed lm_head is a copy (the embedding still needs the plain rows): +154 MB resident for GPT-2.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class OneDnnLinear(nn.Module):
    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        # a plain attribute, not a buffer: an opaque oneDNN tensor has no storage to save or move
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), 1)  # batch-size hint 1
        self.bias = linear.bias

    def forward(self, x: Tensor) -> Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


def available() -> bool:
    return torch.backends.mkldnn.is_available()


def pack_linears(model: nn.Module) -> int:
    """Replace every float32 nn.Linear of `model` by its packed form; returns how many."""
    count = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear) and child.weight.dtype == torch.float32:
                setattr(module, name, OneDnnLinear(child))
                count += 1
    return count
