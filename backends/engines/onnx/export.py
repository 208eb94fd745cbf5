"""The project's own GPT-2 for ONNX export: token ids and a key/value cache in, logits out.

onnxruntime's bundled GPT-2 converter fails with transformers 5, so this small module is built
straight from the safetensors weights (no transformers needed) and exported with the dynamo
exporter. Only the build subprocess imports this file; the engine itself never imports torch.

Graph signature (L layers, H heads, D head size, C cache capacity >= P + T):
  input_ids [1, T] int64, logit_index [K] int64 (rows of T whose logits are wanted),
  past_length [1] int64 (P, tokens already in the cache; 0 for prefill),
  past_{i}_k / past_{i}_v [1, H, C, D] float32
  -> logits [K, vocab] float32, present_{i}_k / present_{i}_v [1, H, C, D] float32
Attention is onnxruntime's GroupQueryAttention (com.microsoft; here plain multi-head, causal):
when the caller binds the same buffer as past and present it writes the T new positions in
place, so a decode step never copies the cache (a Concat per layer is a large part of an int8
step: docs/engines.md). Prefill and decode pass logit_index = [T-1] (the lm_head runs
for one row); scoring a whole sequence passes arange(T).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ...gpt2_config import GPT2Config
from ...sources.weights import mmap_numpy


def input_names(n_layer: int) -> list[str]:
    return ["input_ids", "logit_index", "past_length"] + [f"past_{i}_{kv}" for i in range(n_layer) for kv in "kv"]


def output_names(n_layer: int) -> list[str]:
    return ["logits"] + [f"present_{i}_{kv}" for i in range(n_layer) for kv in "kv"]


class GPT2WithPast(nn.Module):
    """GPT-2 (batch 1) on 2-D activations [T, d]: the same math as HF's eager attention."""

    def __init__(self, weights: dict[str, np.ndarray], config: GPT2Config) -> None:
        super().__init__()
        config.require_supported("the ONNX export")
        self.n_layer, self.n_head, self.d = config.n_layer, config.n_head, config.n_embd
        self.eps = config.layer_norm_epsilon
        self.scale = 1 / math.sqrt(config.head_dim)

        def param(array: np.ndarray) -> nn.Parameter:
            return nn.Parameter(torch.tensor(np.ascontiguousarray(array), dtype=torch.float32), requires_grad=False)

        # One [d, vocab] copy of the tied matrix serves both the embedding (Gather on axis 1) and
        # the lm_head (a plain MatMul, which the quantisers recognise; a transposed use would not be).
        self.wte_t = param(weights["wte.weight"].T)
        self.wpe = param(weights["wpe.weight"])
        self.p = nn.ParameterDict(
            {
                name.replace(".", "_"): param(array)
                for name, array in weights.items()
                if name.startswith(("h.", "ln_f."))
            }
        )

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return nn.functional.layer_norm(x, (self.d,), self.p[name + "_weight"], self.p[name + "_bias"], self.eps)

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return x @ self.p[name + "_weight"] + self.p[name + "_bias"]  # HF Conv1D layout [in, out]

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """[T, d] -> [1, H, T, D]"""
        return x.view(x.shape[0], self.n_head, self.d // self.n_head).transpose(0, 1)[None]

    def _attention(self, q, k, v, past_k, past_v, past_length, total, scale: float):
        """Causal attention of T new rows [T, d] over the cache; returns (out [T, d], present k, v)."""
        t = q.shape[0]
        if torch.onnx.is_in_onnx_export():
            seqlens_k, total_length = (total - 1).to(torch.int32), total.to(torch.int32).reshape(())
            out, present_k, present_v = torch.onnx.ops.symbolic_multi_out(
                "com.microsoft::GroupQueryAttention",
                [q[None], k[None], v[None], past_k, past_v, seqlens_k, total_length],
                {"num_heads": self.n_head, "kv_num_heads": self.n_head, "scale": scale},
                dtypes=[torch.float32] * 3,
                shapes=[[1, t, self.d], past_k.shape, past_v.shape],
                version=1,
            )
            return out[0], present_k, present_v
        # Eager reference with the same in-place semantics (what the exported op computes).
        start = int(past_length[0])
        present_k, present_v = past_k.clone(), past_v.clone()
        present_k[:, :, start : start + t], present_v[:, :, start : start + t] = self._heads(k), self._heads(v)
        keys, values = present_k[:, :, : start + t], present_v[:, :, : start + t]
        scores = (self._heads(q) @ keys.transpose(2, 3)) * scale
        blocked = torch.arange(start + t)[None, :] > torch.arange(start, start + t)[:, None]
        scores = scores.masked_fill(blocked, torch.finfo(torch.float32).min)
        out = (torch.softmax(scores, dim=-1) @ values)[0].transpose(0, 1).reshape(t, self.d)
        return out, present_k, present_v

    def forward(
        self, input_ids: torch.Tensor, logit_index: torch.Tensor, past_length: torch.Tensor, *past: torch.Tensor
    ):
        t = input_ids.shape[1]
        positions = past_length + torch.arange(t, dtype=torch.long)
        total = past_length + t  # [1]
        x = torch.index_select(self.wte_t, 1, input_ids[0]).t() + torch.index_select(self.wpe, 0, positions)
        presents = []
        for i in range(self.n_layer):
            h = f"h_{i}_"
            q, k, v = self._linear(self._norm(x, h + "ln_1"), h + "attn_c_attn").split(self.d, dim=1)
            attended, present_k, present_v = self._attention(
                q, k, v, past[2 * i], past[2 * i + 1], past_length, total, self.scale
            )
            presents += [present_k, present_v]
            x = x + self._linear(attended, h + "attn_c_proj")
            m = self._linear(self._norm(x, h + "ln_2"), h + "mlp_c_fc")
            # all admitted activations
            x = x + self._linear(nn.functional.gelu(m, approximate="tanh"), h + "mlp_c_proj")
        x = self._norm(torch.index_select(x, 0, logit_index), "ln_f")
        return (x @ self.wte_t, *presents)


def export_gpt2(safetensors: Path, config: GPT2Config, out: Path) -> None:
    """Write `out` (the graph) and `out`.data (the weights).

    External data always, not only past protobuf's 2 GB cap: ORT memory-maps it, so rows of the
    embedding that are never looked up never become resident (~100 MB less peak RSS for int8).
    """
    torch.set_grad_enabled(False)
    module = GPT2WithPast(mmap_numpy(safetensors), config).eval()
    n_layer, heads = config.n_layer, config.n_head
    head, context = config.head_dim, config.n_positions
    # Example shapes must be distinct and > 1 so the exporter keeps every axis symbolic.
    t, capacity = 5, 11
    ids = torch.zeros((1, t), dtype=torch.long)
    logit_index = torch.tensor([t - 1])
    past_length = torch.tensor([3])
    past = tuple(torch.zeros((1, heads, capacity, head)) for _ in range(2 * n_layer))
    new = torch.export.Dim("T", min=1, max=context)
    rows = torch.export.Dim("K", min=1, max=context)
    cache = torch.export.Dim("C", min=2, max=context)
    dynamic = ({1: new}, {0: rows}, None, tuple({2: cache} for _ in past))
    # The dynamo exporter, not TorchScript: TorchScript export is deprecated in torch 2.x and
    # stores a tied weight once per use; dynamo keeps this module's single wte copy once too.
    program = torch.onnx.export(
        module,
        (ids, logit_index, past_length, *past),
        dynamo=True,
        dynamic_shapes=dynamic,
        input_names=input_names(n_layer),
        output_names=output_names(n_layer),
        verbose=False,
    )
    program.save(str(out), external_data=True)
