"""transformers' GPT2LMHeadModel: the baseline users know (fp32, bf16, dynamic int8, and the
founding write-up's dynamic float16)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn
from transformers import DynamicCache, GPT2LMHeadModel
from transformers.pytorch_utils import Conv1D
from transformers.utils import logging as hf_logging

from ..engine import Engine, EngineInfo, EngineOptions
from ..sources.model_files import ModelFiles
from .torch_util import count_int8_linears, logits_to_numpy, quantize_linear_fp16, quantize_linear_int8, set_threads

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "int8": torch.float32, "fp16-dynamic": torch.float32}


def conv1d_to_linear(model: nn.Module) -> int:
    """Replace HF's Conv1D (weight [in, out]) with nn.Linear (weight [out, in]).

    quantize_dynamic only knows nn.Linear and silently skips Conv1D, which would leave GPT-2's
    48 block matmuls in fp32 and quantise the lm_head alone.
    """
    replaced = 0
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, Conv1D):
                fan_in, fan_out = child.weight.shape
                linear = nn.Linear(fan_in, fan_out, bias=True, dtype=child.weight.dtype)
                linear.weight.data = child.weight.data.t().contiguous()
                linear.bias.data = child.bias.data.clone()
                setattr(parent, child_name, linear)
                replaced += 1
    return replaced


class HFEngine(Engine):
    def __init__(self, name: str, options: EngineOptions, dtype: str = "fp32") -> None:
        super().__init__(name, options)
        self.dtype = dtype
        self.model: GPT2LMHeadModel | None = None
        self._cache: DynamicCache | None = None

    def load(self, model: ModelFiles, progress) -> EngineInfo:
        config = model.gpt2_config.require_supported(self.name)
        threads = set_threads(self.options.threads)
        torch.set_grad_enabled(False)
        hf_logging.disable_progress_bar()
        hf = GPT2LMHeadModel.from_pretrained(str(model.folder), dtype=DTYPES[self.dtype]).eval()
        notes = [f"attn={hf.config._attn_implementation}"]
        if self.dtype == "int8":
            converted = conv1d_to_linear(hf)
            quantize_linear_int8(hf)
            notes.append(f"{count_int8_linears(hf)} int8 linears ({converted} Conv1D converted)")
        weight_bytes = None
        if self.dtype == "fp16-dynamic":
            converted_names = quantize_linear_fp16(hf)
            share = (config.vocab_size * config.n_embd) / (config.weight_bytes(1, 0) or 1)
            notes.append(
                f"torch.ao.quantization.quantize_dynamic({{nn.Linear}}, float16) converted "
                f"{', '.join(converted_names) or 'nothing'} ({share:.0%} of the matrix weights; "
                f"GPT-2's Conv1D blocks stay fp32); torch.ao eager quantization is deprecated "
                f"in favour of torchao"
            )
            weight_bytes = config.weight_bytes(4) - 2 * config.vocab_size * config.n_embd * len(converted_names)
        self.model = hf
        bytes_per_matrix_element = {"fp32": 4, "bf16": 2, "int8": 1, "fp16-dynamic": 4}[self.dtype]
        other = 2 if self.dtype == "bf16" else 4
        return EngineInfo(
            device="cpu",
            dtype=self.dtype,
            weight_bytes_per_token=weight_bytes or config.weight_bytes(bytes_per_matrix_element, other),
            kv_bytes_per_position=config.kv_bytes_per_position(other),  # int8: fp32 activations
            notes="; ".join(notes + [f"threads={threads}"]),
        )

    @torch.inference_mode()
    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        ids = torch.tensor([list(token_ids)], dtype=torch.long)
        # The engine owns its cache (the one the model would make itself); transformers grows it in
        # place, so the output's cache is never read. It goes in positionally: forward's second
        # parameter is the cache in every transformers 5, named past_key_values before 5.24 and
        # cache from 5.24 on (the old keyword warns there and goes in 5.40).
        self._cache = DynamicCache(config=self.model.config)
        out = self.model(ids, self._cache, use_cache=True, logits_to_keep=1)
        return logits_to_numpy(out.logits[0, -1])

    @torch.inference_mode()
    def decode(self, token_id: int) -> np.ndarray:
        ids = torch.tensor([[token_id]], dtype=torch.long)
        out = self.model(ids, self._cache, use_cache=True)
        return logits_to_numpy(out.logits[0, -1])

    @torch.inference_mode()
    def forward_logits(self, token_ids: Sequence[int]) -> np.ndarray:
        ids = torch.tensor([list(token_ids)], dtype=torch.long)
        return logits_to_numpy(self.model(input_ids=ids, use_cache=False).logits[0])

    def profiler(self):
        """torch.profiler: every aten op's self time, per prefill / decode step."""
        from ..profile.torch_ops import TorchProfiler

        return TorchProfiler()

    def close(self) -> None:
        self.model = None
        self._cache = None
