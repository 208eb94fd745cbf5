"""Prefill's roofline: the shortest a prompt's prefill can take on this machine.

A prefill computes every matrix product of the prompt's T tokens at once, so it is bound by
arithmetic, not by one read of the weights as decode is. Its roofline is the larger of

    FLOPs / the CPU's peak for the engine's arithmetic     (machine/compute_peak.py: fp32 FMA,
                                                           bf16 or int8 products, each measured)
    bytes / the memory bandwidth                           (the weights once, and the KV cache written)

FLOPs are the matrix products' 2 x multiply-adds of the work the first token needs: the four
matrices of every layer for each token, causal attention (each query t against its t + 1 keys:
scores and weighted values, 2 x 2 x d per key and layer) and the lm_head for the last position
(what prefill must return). In the last layer only the keys and values are needed for every token
(the cache); its queries, attention, projection and MLP only for the last position, whose logits
are asked for: the other rows feed nothing. Norms, GELU, softmax and the embedding are left out: a
lower bound. Which arithmetic an engine's prefill uses is a fact the engine reports
(EngineInfo.prefill_arithmetic); without one, its precision's fastest (`default_arithmetic`), so that
the bound is never one it can beat by its instructions.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..gpt2_config import GPT2Config
from ..machine.compute_peak import Arithmetic


def default_arithmetic(precision: str) -> Arithmetic:
    """The fastest arithmetic an engine of this precision could use: int8 for int8 and int4 (their
    integer products), bf16 for bf16, fp32 otherwise (f16 has no products of its own on these CPUs)."""
    if precision in ("int8", "int4"):
        return Arithmetic.INT8
    if precision == "bf16":
        return Arithmetic.BF16
    return Arithmetic.FP32


def arithmetic_of(reported: str, precision: str) -> Arithmetic:
    """The engine's own word (EngineInfo.prefill_arithmetic) where it gave one, else its precision's default."""
    try:
        return Arithmetic(reported)
    except ValueError:
        return default_arithmetic(precision)


def prefill_flops(config: GPT2Config, tokens: int, pos: int = 0) -> float:
    """2 x the multiply-adds of a prefill of `tokens` tokens at positions [pos, pos + tokens) that
    returns the last position's logits."""
    d, layers = config.n_embd, config.n_layer
    inner = config.n_inner or 4 * d
    per_token = d * 3 * d + d * d + 2 * d * inner  # qkv, proj, fc, fc2
    last_layer = tokens * 2 * d * d + (per_token - 2 * d * d)  # every token's k and v; the rest for one
    matrices = tokens * (layers - 1) * per_token + last_layer
    keys = tokens * pos + tokens * (tokens + 1) // 2  # query t sees pos + t + 1 keys
    last_keys = pos + tokens  # the last layer's one query
    attention = 2 * d * ((layers - 1) * keys + last_keys)  # q . k and p x v, d multiply-adds each per key
    return 2.0 * (matrices + attention + d * config.vocab_size)


def prefill_bytes(weight_bytes: float, kv_bytes_per_position: float, tokens: int) -> float:
    """What a prefill must move at least: every weight once, and the prompt's keys and values written."""
    return float(weight_bytes) + float(kv_bytes_per_position) * tokens


@dataclass(frozen=True)
class Roofline:
    """One prefill's bound: its work, the rates it is held to, and which of them binds."""

    flops: float
    bytes: float
    peak_gops: float  # the arithmetic's peak, 1e9 operations per second
    gb_s: float  # memory bandwidth, 1e9 bytes per second

    @property
    def compute_ms(self) -> float:
        return self.flops / (self.peak_gops * 1e6) if self.peak_gops > 0 else 0.0

    @property
    def memory_ms(self) -> float:
        return self.bytes / (self.gb_s * 1e6) if self.gb_s > 0 else 0.0

    @property
    def ms(self) -> float:
        return max(self.compute_ms, self.memory_ms)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_ms >= self.memory_ms else "memory"
