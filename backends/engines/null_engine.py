"""The null engine: no compute at all, the same fixed logits for every position.

It measures the harness, not a model: with an engine that costs nothing, the time between two
tokens is what the worker itself spends per token (sampling, detokenizing, pickling the event
and writing it into the pipe; a slow reader in the parent shows up when the pipe is full). Every
other engine's ITL carries that cost too, so this is the floor under every figure. It goes through
the same worker, sampler and records as any engine; under greedy decoding it repeats one token,
so it disagrees with any real reference.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..engine import Engine, EngineInfo, EngineOptions
from ..sources.model_files import ModelFiles


def fixed_logits(vocab_size: int, seed: int = 0) -> np.ndarray:
    """Float32 logits spread like a language model's (not all equal: top-k/top-p get real work).

    Read-only: the same array is handed out for every token, so nothing may change it in place.
    Made from a hash of each token id, not numpy.random: importing that is a cost no other engine
    pays before Ready, and this worker's cold start is the floor under theirs.
    """
    ids = np.arange(vocab_size, dtype=np.float64)
    uniforms = [(np.sin(ids * (12.9898 + k) + seed * 78.233) * 43758.5453) % 1.0 for k in range(3)]  # 3 x [0, 1)
    logits = ((sum(uniforms) - 1.5) * 6.0).astype(np.float32)  # sum of 3 uniforms: std 0.5 -> 3
    logits.setflags(write=False)
    return logits


class NullEngine(Engine):
    def __init__(self, name: str, options: EngineOptions) -> None:
        super().__init__(name, options)
        self._logits: np.ndarray | None = None

    def load(self, model: ModelFiles, progress) -> EngineInfo:
        self._logits = fixed_logits(model.gpt2_config.vocab_size)
        return EngineInfo(
            device="cpu",
            dtype="fp32",
            weight_bytes_per_token=0,
            notes="no compute: fixed logits (ITL = the harness's own per-token cost)",
        )

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        return self._logits

    def decode(self, token_id: int) -> np.ndarray:
        return self._logits

    def close(self) -> None:
        self._logits = None
