"""GPT-2 as ONNX Runtime GenAI's `decoder` model: token ids and the past in, logits and the present out.

GenAI's model builder refuses GPT-2, but its runtime runs any decoder graph with the names and
shapes it expects. This wraps the project's classic export (onnx/concat_export.py: the same
weights and math, the cache concatenated per step) by composition and only renames and reshapes:

  input_ids [1, T] int64, past_key_values.{i}.key / .value [1, H, P, D] float32
  -> logits [1, T, vocab] float32, present.{i}.key / .value [1, H, P + T, D] float32

Every position's logits: GenAI preallocates `logits` as [batch, T, vocab] and picks the last row
itself. No attention_mask or position_ids inputs (GenAI feeds only the inputs a graph declares):
batch 1 without padding needs neither, positions come from the past's length. Only the build
child process imports this file (torch).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ...gpt2_config import GPT2Config
from ...sources.weights import mmap_numpy
from ..onnx.concat_export import GPT2WithConcatPast


def input_names(n_layer: int) -> list[str]:
    return ["input_ids"] + [f"past_key_values.{i}.{kv}" for i in range(n_layer) for kv in ("key", "value")]


def output_names(n_layer: int) -> list[str]:
    return ["logits"] + [f"present.{i}.{kv}" for i in range(n_layer) for kv in ("key", "value")]


class GenAIDecoder(nn.Module):
    """GPT2WithConcatPast with GenAI's signature: logits for every new position, batch axis kept."""

    def __init__(self, inner: GPT2WithConcatPast) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_ids: torch.Tensor, *past: torch.Tensor):
        rows = torch.arange(input_ids.shape[1], dtype=torch.long)
        logits, *presents = self.inner(input_ids, rows, *past)
        return (logits[None], *presents)


def export_decoder(safetensors: Path, config: GPT2Config, out: Path) -> None:
    """Write `out` (the graph) and `out`.data (the weights, external as in onnx/export.py)."""
    torch.set_grad_enabled(False)
    module = GenAIDecoder(GPT2WithConcatPast(mmap_numpy(safetensors), config)).eval()
    n_layer, heads, head, context = config.n_layer, config.n_head, config.head_dim, config.n_positions
    # Distinct example sizes > 1 keep every axis symbolic; the past admits 0 (GenAI's first step).
    t, past_len = 5, 3
    ids = torch.zeros((1, t), dtype=torch.long)
    past = tuple(torch.zeros((1, heads, past_len, head)) for _ in range(2 * n_layer))
    new = torch.export.Dim("T", min=1, max=context)
    cached = torch.export.Dim("P", min=0, max=context - 1)
    dynamic = ({1: new}, tuple({2: cached} for _ in past))
    program = torch.onnx.export(
        module,
        (ids, *past),
        dynamo=True,
        dynamic_shapes=dynamic,
        input_names=input_names(n_layer),
        output_names=output_names(n_layer),
        verbose=False,
    )
    program.save(str(out), external_data=True)
