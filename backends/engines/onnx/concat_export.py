"""GPT-2 exported the classic way: past keys/values in, `present` = concat(past, new) out.

The layout ONNX Runtime's own GPT-2 converter (onnxruntime.transformers convert_to_onnx) and
HF's past_key_values export use: every step receives each layer's whole past as graph inputs
and returns it grown by the new positions, which the caller feeds back as the next past. The
state travels through ORT's inputs and outputs, so it is copied and grown every step: the cost
the `onnx` engine's in-place cache (export.py, GroupQueryAttention) avoids, made measurable.

Everything but attention is export.py's GPT2WithPast (same weights, same math), so the two
graphs differ only in how the cache travels. Like export.py, and unlike the converter, it takes
`logit_index` and runs the lm_head for those rows only: prefill costs the same in both, and
scoring a sequence passes arange(T).

Graph signature (L layers, H heads, D head size, P past positions, 0 for prefill):
  input_ids [1, T] int64, logit_index [K] int64,
  past_{i}_k / past_{i}_v [1, H, P, D] float32
  -> logits [K, vocab] float32, present_{i}_k / present_{i}_v [1, H, P + T, D] float32
Positions are P + arange(T), P read from the past's shape: batch 1 with no padding needs
neither an attention mask nor position ids.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...gpt2_config import GPT2Config
from ...sources.weights import mmap_numpy
from .export import GPT2WithPast


def input_names(n_layer: int) -> list[str]:
    return ["input_ids", "logit_index"] + [f"past_{i}_{kv}" for i in range(n_layer) for kv in "kv"]


def output_names(n_layer: int) -> list[str]:
    return ["logits"] + [f"present_{i}_{kv}" for i in range(n_layer) for kv in "kv"]


class GPT2WithConcatPast(GPT2WithPast):
    """GPT2WithPast whose cache is concatenated, not written in place: present = [past, new]."""

    def _attention(self, q, k, v, past_k, past_v, past_length, total, scale: float):
        """Causal attention of T new rows [T, d] over past + new; returns (out [T, d], present k, v)."""
        t, start = q.shape[0], past_k.shape[2]  # start: a symbolic size in the export, not data
        present_k = torch.cat([past_k, self._heads(k)], dim=2)
        present_v = torch.cat([past_v, self._heads(v)], dim=2)
        scores = (self._heads(q) @ present_k.transpose(2, 3)) * scale
        # New row j sits at position start + j and sees keys 0 .. start + j.
        blocked = torch.arange(start + t)[None, :] > (torch.arange(t) + start)[:, None]
        scores = scores.masked_fill(blocked, torch.finfo(torch.float32).min)
        out = (torch.softmax(scores, dim=-1) @ present_v)[0].transpose(0, 1).reshape(t, self.d)
        return out, present_k, present_v

    def forward(self, input_ids: torch.Tensor, logit_index: torch.Tensor, *past: torch.Tensor):
        # The past's length is its shape: no past_length input (the base class's positions need it as a tensor).
        past_length = torch.full((1,), past[0].shape[2], dtype=torch.long)
        return super().forward(input_ids, logit_index, past_length, *past)


def export_gpt2_concat(safetensors: Path, config: GPT2Config, out: Path) -> None:
    """Write `out` (the graph) and `out`.data (the weights, external as in export.py)."""
    torch.set_grad_enabled(False)
    module = GPT2WithConcatPast(mmap_numpy(safetensors), config).eval()
    n_layer, heads, head, context = config.n_layer, config.n_head, config.head_dim, config.n_positions
    # Example shapes distinct and > 1 so the exporter keeps every axis symbolic; the past's
    # axis admits 0 (prefill feeds an empty past).
    t, past_len = 5, 3
    ids = torch.zeros((1, t), dtype=torch.long)
    logit_index = torch.tensor([t - 1])
    past = tuple(torch.zeros((1, heads, past_len, head)) for _ in range(2 * n_layer))
    new = torch.export.Dim("T", min=1, max=context)
    rows = torch.export.Dim("K", min=1, max=context)
    cached = torch.export.Dim("P", min=0, max=context - 1)
    dynamic = ({1: new}, {0: rows}, tuple({2: cached} for _ in past))
    program = torch.onnx.export(
        module,
        (ids, logit_index, *past),
        dynamo=True,
        dynamic_shapes=dynamic,
        input_names=input_names(n_layer),
        output_names=output_names(n_layer),
        verbose=False,
    )
    program.save(str(out), external_data=True)
