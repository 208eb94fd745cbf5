"""The project's own GPT-2 in plain PyTorch, in the spirit of nanoGPT and gpt-fast.

Weights come from HF safetensors; HF's Conv1D stores matrices [in, out], so they are transposed
into nn.Linear ([out, in]), which is what dynamic int8 quantisation knows. Keys and values live
in a preallocated static cache, one buffer pair per layer (a single [layers, ...] buffer made
inductor rewrite the whole cache on every layer's write). Prefill and one-token decode are
separate functions so that only decode is compiled.

Shapes: B batch (1), T new tokens, S cache length (n_positions), C n_embd, H heads, D head_dim.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...gpt2_config import GPT2Config
from ...sources.weights import normalised_header

# HF Conv1D weights, stored [in, out]: transposed to nn.Linear's [out, in] on load.
_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
# numpy stand-ins for reading; bf16 is read as int16 and reinterpreted by torch.
_READ = {
    "F32": (np.float32, None),
    "F16": (np.float16, None),
    "BF16": (np.int16, torch.bfloat16),
    "F64": (np.float64, None),
}


class KVCache(nn.Module):
    """One layer's keys and values, [1, H, S, D] each, written in place at `input_pos`."""

    def __init__(self, n_head: int, max_seq: int, head_dim: int, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        shape = (1, n_head, max_seq, head_dim)
        # Zeros, not empty: masked stale positions must not hold NaN (0 * NaN would leak through).
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def update(self, input_pos: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        # input_pos [T]; k, v [1, H, T, D]
        self.k.index_copy_(2, input_pos, k)
        self.v.index_copy_(2, input_pos, v)
        return self.k, self.v


class Attention(nn.Module):
    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.kv_cache: KVCache | None = None

    def forward(
        self, x: Tensor, input_pos: Tensor | None, kv_len: int | None, mask: Tensor | None, last_only: bool = False
    ) -> Tensor:
        # last_only: every token's keys and values go to the cache, the output is the last token's [B, 1, C]
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 x [B, T, C]
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # [B, H, T, D]
        if last_only:
            q = q[:, :, -1:]  # [B, H, 1, D]
        y = self._attend(q, k, v, input_pos, kv_len, mask)  # [B, H, T or 1, D]
        return self.c_proj(y.transpose(1, 2).reshape(B, q.shape[2], C))

    def _attend(
        self, q: Tensor, k: Tensor, v: Tensor, input_pos: Tensor | None, kv_len: int | None, mask: Tensor | None
    ) -> Tensor:
        if self.kv_cache is None or input_pos is None:  # scoring a whole sequence: no cache
            return F.scaled_dot_product_attention(q, k, v, is_causal=q.shape[2] > 1)
        k_all, v_all = self.kv_cache.update(input_pos, k, v)  # [1, H, S, D]
        if mask is not None:  # fixed shapes for torch.compile: the whole cache, stale slots masked
            return F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask)
        if kv_len is not None:  # eager one-token decode: only the filled part of the cache
            return F.scaled_dot_product_attention(q, k_all[:, :, :kv_len], v_all[:, :, :kv_len])
        # prefill starts at position 0, so the new tokens are all there is to attend to; the last
        # token alone sees every one of them (is_causal would align its one row with the first key)
        return F.scaled_dot_product_attention(q, k, v, is_causal=q.shape[2] > 1)


class MLP(nn.Module):
    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, cfg.n_inner)
        self.c_proj = nn.Linear(cfg.n_inner, cfg.n_embd)

    def forward(self, x: Tensor) -> Tensor:
        # tanh: every activation GPT2Config.supported() admits is this approximation
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.attn = Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.mlp = MLP(cfg)

    def forward(
        self, x: Tensor, input_pos: Tensor | None, kv_len: int | None, mask: Tensor | None, last_only: bool = False
    ) -> Tensor:
        attended = self.attn(self.ln_1(x), input_pos, kv_len, mask, last_only)
        x = (x[:, -1:] if last_only else x) + attended
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, cfg: GPT2Config) -> None:
        super().__init__()
        self.config = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.n_embd)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied; a separate module so int8 can quantise it

    def setup_caches(self, max_seq: int | None = None) -> None:
        """(Re)allocate every layer's static cache, in the parameters' dtype and device."""
        cfg = self.config
        weight = self.wpe.weight
        for block in self.h:
            block.attn.kv_cache = KVCache(
                cfg.n_head, max_seq or cfg.n_positions, cfg.head_dim, weight.dtype, weight.device
            )

    @property
    def max_seq(self) -> int:
        cache = self.h[0].attn.kv_cache
        return cache.k.shape[2] if cache is not None else self.config.n_positions

    def forward(
        self,
        idx: Tensor,
        input_pos: Tensor | None = None,
        kv_len: int | None = None,
        mask: Tensor | None = None,
        last_only: bool = False,
    ) -> Tensor:
        # idx [B, T]; input_pos [T] (None: positions 0..T-1, no cache) -> logits [B, T or 1, V]
        pos = torch.arange(idx.shape[1], device=idx.device) if input_pos is None else input_pos
        x = self.wte(idx) + self.wpe(pos)  # [B, T, C]
        # last_only: the last block past its keys and values, and the lm_head, for the last position
        # alone (the other rows feed nothing; the lm_head is the largest matmul)
        for index, block in enumerate(self.h):
            x = block(x, input_pos, kv_len, mask, last_only and index == len(self.h) - 1)
        return self.lm_head(self.ln_f(x))


def prefill(model: GPT2, idx: Tensor) -> Tensor:
    """Start a sequence at position 0: fill the cache, return logits [1, V] of the last token."""
    input_pos = torch.arange(idx.shape[1], device=idx.device)  # [T]
    return model(idx, input_pos, last_only=True)[:, -1]


def decode_one(model: GPT2, idx: Tensor, input_pos: Tensor, kv_len: int) -> Tensor:
    """Eager decode: idx [1, 1] at input_pos [1]; attends to the first kv_len cache slots. -> [1, V]"""
    return model(idx, input_pos, kv_len=kv_len)[:, -1]


def decode_masked(model: GPT2, idx: Tensor, input_pos: Tensor) -> Tensor:
    """Fixed-shape decode for torch.compile: the whole cache with a mask of valid slots. -> [1, V]"""
    valid = torch.arange(model.max_seq, device=idx.device) <= input_pos  # [S]
    return model(idx, input_pos, mask=valid.view(1, 1, 1, -1))[:, -1]


def forward_all(model: GPT2, idx: Tensor) -> Tensor:
    """Logits [T, V] of every position of one sequence, without touching the cache."""
    return model(idx)[0]


def read_tensors(path: Path) -> Iterator[tuple[str, Tensor]]:
    """(normalised name, tensor) one at a time, by plain reads: the pages of a memory-mapped
    file would count in the peak RSS that every run records, on top of the model itself."""
    with open(path, "rb") as f:
        for key, info in normalised_header(path).items():
            np_dtype, torch_view = _READ[info.dtype]
            f.seek(info.start)
            raw = np.fromfile(f, dtype=np_dtype, count=(info.end - info.start) // np.dtype(np_dtype).itemsize)
            tensor = torch.from_numpy(raw).view(info.shape)
            yield key, tensor.view(torch_view) if torch_view is not None else tensor


def load_gpt2(
    safetensors: Path, config: GPT2Config, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
) -> GPT2:
    """Build the module from HF safetensors (hub or `transformer.`-prefixed keys, any float dtype)."""
    state: dict[str, Tensor] = {}
    for key, tensor in read_tensors(safetensors):
        if key.endswith(_CONV1D):
            tensor = tensor.t()  # [in, out] -> [out, in]
        state[key] = tensor.to(device=device, dtype=dtype).contiguous()
    state["lm_head.weight"] = state["wte.weight"]
    with torch.device("meta"):  # no random init of ~124M parameters that are overwritten anyway
        model = GPT2(config)
    model.load_state_dict(state, assign=True)
    model.lm_head.weight = model.wte.weight  # assign=True made two Parameters: tie them again
    return model.eval().requires_grad_(False)
