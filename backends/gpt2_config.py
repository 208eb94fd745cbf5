"""GPT-2's architecture as every engine reads it: one torch-free object, one support rule.

Engines used to read config.json's dict on their own and disagreed on what they could run (the
numpy engine refused gelu_fast, others silently ignored scale_attn_by_inverse_layer_idx).
`supported()` is the one rule, the configurations that every engine computes the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# All three are GELU's tanh approximation 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))); on
# [-12, 12] in fp32 they differ from gelu_new by at most 2.4e-7 (rounding), while the exact erf
# "gelu" differs by 4.7e-4, and neither the numpy engine nor llama.cpp's GPT-2 graph has it.
TANH_GELU = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")
LAYER_NORM_EPSILON = 1e-5  # CTranslate2's GPT-2 converter drops the config's value and uses this


@dataclass(frozen=True)
class GPT2Config:
    n_layer: int
    n_head: int
    n_embd: int
    vocab_size: int
    n_positions: int = 1024
    n_inner: int = 0  # the MLP width; config.json's null means 4 * n_embd (filled in by from_dict)
    layer_norm_epsilon: float = LAYER_NORM_EPSILON
    activation_function: str = "gelu_new"
    scale_attn_weights: bool = True
    scale_attn_by_inverse_layer_idx: bool = False
    reorder_and_upcast_attn: bool = False
    tie_word_embeddings: bool = True

    @classmethod
    def from_dict(cls, config: Mapping) -> GPT2Config:
        """From config.json's contents, with transformers' defaults for what it leaves out.

        ValueError, naming the field, for a missing, non-numeric or non-positive size: a zero
        n_head or a negative n_layer would otherwise fail later, in every engine, with a bare
        ZeroDivisionError or an empty model."""
        d = _size(config, "n_embd")
        return cls(
            n_layer=_size(config, "n_layer"),
            n_head=_size(config, "n_head"),
            n_embd=d,
            vocab_size=_size(config, "vocab_size"),
            n_positions=_size(config, "n_positions", 1024),
            n_inner=_size(config, "n_inner", 4 * d),
            layer_norm_epsilon=_epsilon(config),
            activation_function=str(config.get("activation_function", "gelu_new")),
            scale_attn_weights=bool(config.get("scale_attn_weights", True)),
            scale_attn_by_inverse_layer_idx=bool(config.get("scale_attn_by_inverse_layer_idx", False)),
            reorder_and_upcast_attn=bool(config.get("reorder_and_upcast_attn", False)),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", True)),
        )

    @classmethod
    def from_json(cls, path: Path) -> GPT2Config:
        return cls.from_dict(json.loads(Path(path).read_text()))

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def supported(self) -> str:
        """Why the engines cannot run this configuration (one line), or "" when they all can.

        The rule is what every engine computes: tanh GELU, 1/sqrt(head_dim) attention scaling,
        the lm_head tied to the embedding (no engine but transformers reads a separate one)."""
        unusual = []
        if self.activation_function not in TANH_GELU:
            unusual.append(f"activation_function={self.activation_function}")
        if not self.scale_attn_weights:
            unusual.append("scale_attn_weights=false")
        if self.scale_attn_by_inverse_layer_idx:
            unusual.append("scale_attn_by_inverse_layer_idx=true")
        if self.reorder_and_upcast_attn:
            unusual.append("reorder_and_upcast_attn=true")
        if not self.tie_word_embeddings:
            unusual.append("tie_word_embeddings=false")
        if self.layer_norm_epsilon != LAYER_NORM_EPSILON:
            unusual.append(f"layer_norm_epsilon={self.layer_norm_epsilon}")
        if self.n_embd % self.n_head:
            unusual.append(f"n_embd={self.n_embd} is not a multiple of n_head={self.n_head}")
        return f"unsupported GPT-2 variant ({', '.join(unusual)})" if unusual else ""

    def require_supported(self, engine: str) -> GPT2Config:
        """Itself, or ValueError naming the engine and why (an engine calls this first in load)."""
        why = self.supported()
        if why:
            raise ValueError(f"{engine} cannot run this model: {why}")
        return self

    def weight_bytes(self, matrix_bytes: float, other_bytes: float = 4) -> int:
        """Weights read per decoded token: the 4 matrices of every layer and the tied lm_head
        at `matrix_bytes` per element, biases and norms at `other_bytes`. Position embeddings are
        one row per token and are left out."""
        d, v, inner = self.n_embd, self.vocab_size, self.n_inner
        matrices = self.n_layer * (d * 3 * d + d * d + 2 * d * inner) + v * d
        vectors = self.n_layer * (3 * d + d + inner + d + 4 * d) + 2 * d
        return int(matrices * matrix_bytes + vectors * other_bytes)

    def kv_bytes_per_position(self, element_bytes: float) -> int:
        """KV-cache bytes one decode step reads per cached position: every layer's key and value
        rows (n_embd each) at `element_bytes` per element (4 for fp32, 2 for f16/bf16 caches)."""
        return int(self.n_layer * 2 * self.n_embd * element_bytes)


def _size(config: Mapping, key: str, default: int | None = None) -> int:
    """A whole number >= 1 from config.json (null or absent: `default`), else ValueError naming it."""
    value = config.get(key)
    if value is None:
        if default is None:
            raise ValueError(f"{key} is missing")
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # 768.0: a whole number written by a JSON writer that knows only floats
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} must be a whole number >= 1, got {value!r}")
    return value


def _epsilon(config: Mapping) -> float:
    value = config.get("layer_norm_epsilon", LAYER_NORM_EPSILON)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ValueError(f"layer_norm_epsilon must be a number in (0, 1), got {value!r}")
    return float(value)
