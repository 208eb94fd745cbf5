"""nanoGPT's way of generating: fp32 PyTorch on the CPU with no KV cache.

Every token runs the whole sequence (cropped to the context) through the model again, as
nanoGPT's `generate` does, so the cost of a token grows with its position: at position n it
does the work of a prefill of n tokens. The engine exists to show that cost next to engines
that cache keys and values.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ...engine import Engine, EngineInfo, EngineOptions
from ...errors import UsageError
from ...progress import ProgressFn
from ...sources.model_files import ModelFiles
from ..torch_util import logits_to_numpy, set_threads
from .model import GPT, generate_step, load_gpt

NOTES = "no KV cache: recomputes the whole sequence for every token (nanoGPT's generate)"


class NanoGPTEngine(Engine):
    def __init__(self, name: str, options: EngineOptions) -> None:
        super().__init__(name, options)
        self.model: GPT | None = None
        self._idx: torch.Tensor | None = None  # [1, T]: the whole sequence so far, never cropped (as nanoGPT)

    def load(self, model: ModelFiles, progress: ProgressFn) -> EngineInfo:
        threads = set_threads(self.options.threads)
        torch.set_grad_enabled(False)
        config = model.gpt2_config.require_supported(self.name)
        progress("loading safetensors", None)
        self.model = load_gpt(model.safetensors, config)
        return EngineInfo(
            device="cpu",
            dtype="fp32",
            weight_bytes_per_token=config.weight_bytes(4, 4),
            kv_bytes_per_position=0,  # nothing is cached: every step reads the weights only
            notes=f"{NOTES}; context {config.n_positions}; threads={threads}",
        )

    @torch.inference_mode()
    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        if len(token_ids) == 0:
            raise UsageError("cannot start a sequence from an empty prompt")
        self._idx = torch.tensor([list(token_ids)], dtype=torch.long)  # [1, T]
        return logits_to_numpy(generate_step(self.model, self._idx)[0])  # [V]

    @torch.inference_mode()
    def decode(self, token_id: int) -> np.ndarray:
        if self._idx is None:
            raise UsageError("decode before prefill: no sequence to extend")
        next_id = torch.tensor([[token_id]], dtype=torch.long)  # [1, 1]
        self._idx = torch.cat((self._idx, next_id), dim=1)  # [1, T + 1]
        return logits_to_numpy(generate_step(self.model, self._idx)[0])  # [V]: the whole sequence again

    @torch.inference_mode()
    def forward_logits(self, token_ids: Sequence[int]) -> np.ndarray:
        block_size = self.model.config.block_size
        if not 0 < len(token_ids) <= block_size:
            raise UsageError(f"cannot score {len(token_ids)} tokens; this model takes 1 to {block_size}")
        idx = torch.tensor([list(token_ids)], dtype=torch.long)  # [1, T]
        return logits_to_numpy(self.model(idx, all_positions=True)[0])  # [T, V]

    def profiler(self):
        """torch.profiler: every aten op's self time, per prefill / decode step."""
        from ...profilers.torch_ops import TorchProfiler

        return TorchProfiler()

    def close(self) -> None:
        self.model = None
        self._idx = None
