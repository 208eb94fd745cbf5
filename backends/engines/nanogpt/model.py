"""A nanoGPT-style GPT-2 (Karpathy's model.py, inference only), loaded from HF safetensors.

It keeps nanoGPT's layout (`transformer.{wte, wpe, h, ln_f}`, `lm_head` tied to `wte`) and its
inference path: `forward(idx)` runs every position of `idx` and returns the logits of the last
one. There is no KV cache, so `generate_step` (one step of nanoGPT's `generate`) recomputes the
whole sequence, cropped to the context, for every new token: that is the cost this engine shows.

Two departures, both so that it computes what GPT-2 computes: the MLP uses tanh GELU (nanoGPT's
`nn.GELU()` is the exact erf form, which GPT-2 was not trained with and `GPT2Config.supported()`
does not admit), and LayerNorm takes the config's epsilon. No dropout: inference only.

Shapes: B batch (1), T sequence length (<= block_size), C n_embd, H heads, D head_dim, V vocab.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...gpt2_config import GPT2Config
from ..torch_static.model import read_tensors

# HF Conv1D weights, stored [in, out]: nanoGPT's from_pretrained transposes them for nn.Linear.
_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


@dataclass(frozen=True)
class GPTConfig:
    """nanoGPT's GPTConfig (bias always on, no dropout), filled from the project's GPT2Config."""

    block_size: int
    vocab_size: int
    n_layer: int
    n_head: int
    n_embd: int
    n_inner: int
    layer_norm_epsilon: float

    @classmethod
    def from_gpt2(cls, config: GPT2Config) -> GPTConfig:
        return cls(
            block_size=config.n_positions,
            vocab_size=config.vocab_size,
            n_layer=config.n_layer,
            n_head=config.n_head,
            n_embd=config.n_embd,
            n_inner=config.n_inner,
            layer_norm_epsilon=config.layer_norm_epsilon,
        )


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)  # q, k, v for all heads at once
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.size()  # [B, T, C]
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)  # 3 x [B, T, C]
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # [B, H, T, D]
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # [B, H, T, D]
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # [B, H, T, D]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [B, H, T, D]
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # [B, T, C]
        return self.c_proj(y)  # [B, T, C]


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, config.n_inner)
        self.c_proj = nn.Linear(config.n_inner, config.n_embd)

    def forward(self, x: Tensor) -> Tensor:
        # x [B, T, C] -> [B, T, 4C] -> [B, T, C]; tanh GELU as GPT-2 (nanoGPT has the erf form)
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = MLP(config)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))  # [B, T, C]
        return x + self.mlp(self.ln_2(x))  # [B, T, C]


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                h=nn.ModuleList(Block(config) for _ in range(config.n_layer)),
                ln_f=nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT

    def forward(self, idx: Tensor, all_positions: bool = False) -> Tensor:
        """idx [B, T] -> logits [B, 1, V] of the last position (nanoGPT's inference path), or
        [B, T, V] of every position with `all_positions` (nanoGPT's training path, for perplexity)."""
        B, T = idx.size()
        if self.config.block_size < T:
            raise ValueError(f"cannot forward a sequence of {T} tokens, block size is only {self.config.block_size}")
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)  # [T]
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)  # [B, T, C] + [T, C]
        for block in self.transformer.h:
            x = block(x)  # [B, T, C]
        x = self.transformer.ln_f(x)  # [B, T, C]
        if all_positions:
            return self.lm_head(x)  # [B, T, V]
        return self.lm_head(x[:, [-1], :])  # [B, 1, V]: a list index keeps the time dimension


def crop(idx: Tensor, block_size: int) -> Tensor:
    """nanoGPT's `idx_cond`: the last `block_size` tokens once the sequence outgrows the context."""
    return idx if idx.size(1) <= block_size else idx[:, -block_size:]


def generate_step(model: GPT, idx: Tensor) -> Tensor:
    """One step of nanoGPT's `generate` before sampling: the whole (cropped) sequence idx [B, T]
    goes through the model again, nothing is cached -> logits [B, V] for the next token."""
    return model(crop(idx, model.config.block_size))[:, -1, :]


def load_gpt(safetensors: Path, config: GPT2Config) -> GPT:
    """GPT in fp32 from HF safetensors (hub or `transformer.`-prefixed keys, any float dtype),
    read as torch_static reads them (no pickles); Conv1D weights transposed as from_pretrained does."""
    state: dict[str, Tensor] = {}
    for key, tensor in read_tensors(safetensors):  # normalised names: no `transformer.`, no lm_head
        if key.endswith(_CONV1D):
            tensor = tensor.t()  # [in, out] -> nn.Linear's [out, in]
        state[f"transformer.{key}"] = tensor.to(torch.float32).contiguous()
    state["lm_head.weight"] = state["transformer.wte.weight"]
    with torch.device("meta"):  # no random init of parameters that are overwritten anyway
        model = GPT(GPTConfig.from_gpt2(config))
    model.load_state_dict(state, assign=True)
    model.transformer.wte.weight = model.lm_head.weight  # assign=True made two Parameters: tie them again
    return model.eval().requires_grad_(False)
