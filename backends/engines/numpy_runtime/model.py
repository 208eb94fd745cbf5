"""GPT-2 in plain numpy, picoGPT style: small pure functions over parameter dicts.

Shapes: T tokens in this call, P tokens cached before them, d = n_embd, H heads, hd = d // H,
V vocab. Everything stays float32: constants are np.float32 because a numpy float64 scalar
would upcast whole activations (Python floats are "weak" under NEP 50 and are fine).
Weight matrices are HF Conv1D layout [in, out], so `x @ w + b` is a linear layer with no copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

F32 = np.float32
_GELU_C = F32(np.sqrt(2.0 / np.pi))
_GELU_A = F32(0.044715)


def gelu_new(x: np.ndarray) -> np.ndarray:  # [..., n] -> [..., n], in place (x is ours)
    """GPT-2's tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    inner = x * x  # [..., n]
    inner *= _GELU_A
    inner += F32(1)
    inner *= x
    inner *= _GELU_C
    np.tanh(inner, out=inner)
    inner += F32(1)
    x *= F32(0.5)
    x *= inner
    return x


def softmax(x: np.ndarray) -> np.ndarray:  # [..., n] -> [..., n], in place (x is ours)
    x -= x.max(axis=-1, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=-1, keepdims=True)
    return x


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: np.float32) -> np.ndarray:  # [T, d] -> [T, d]
    mean = x.mean(axis=-1, keepdims=True)  # [T, 1]
    centred = x - mean  # [T, d]
    var = np.mean(centred * centred, axis=-1, keepdims=True)  # [T, 1]
    centred /= np.sqrt(var + eps)
    centred *= w
    centred += b
    return centred


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:  # [T, n] @ [n, m] -> [T, m]
    out = np.matmul(x, w)  # BLAS (gemv for T == 1), multithreaded
    out += b
    return out


def ffn(x: np.ndarray, c_fc: dict, c_proj: dict) -> np.ndarray:  # [T, d] -> [T, d]
    return linear(gelu_new(linear(x, **c_fc)), **c_proj)  # [T, 4d] in between


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """q [H, T, hd], k/v [H, P+T, hd] -> [H, T, hd]. Query t sees keys up to P + t (causal)."""
    scale = F32(1.0 / np.sqrt(q.shape[-1]))
    scores = np.matmul(q, k.transpose(0, 2, 1))  # [H, T, P+T]
    scores *= scale
    t, s = scores.shape[1:]
    if t > 1:  # a single new token may see every key, so decode skips the mask
        future = np.triu(np.ones((t, s), dtype=bool), k=s - t + 1)  # [T, P+T]
        scores[:, future] = -np.inf
    return np.matmul(softmax(scores), v)  # [H, T, hd]


def mha(x: np.ndarray, c_attn: dict, c_proj: dict, n_head: int, cache: LayerCache | None, pos: int) -> np.ndarray:
    """[T, d] -> [T, d]. With a cache, K/V are written at [pos, pos+T) and attention reads [0, pos+T)."""
    t, d = x.shape
    qkv = linear(x, **c_attn)  # [T, 3d]
    heads = qkv.reshape(t, 3, n_head, d // n_head).transpose(1, 2, 0, 3)  # [3, H, T, hd] (a view)
    q, k, v = heads[0], heads[1], heads[2]
    if cache is not None:
        k, v = kv_write(cache, k, v, pos)  # [H, P+T, hd] views
    out = attention(q, k, v)  # [H, T, hd]
    merged = out.transpose(1, 0, 2).reshape(t, d)  # [T, d] (copies: heads interleave)
    return linear(merged, **c_proj)


def kv_write(cache: LayerCache, k: np.ndarray, v: np.ndarray, pos: int) -> tuple[np.ndarray, np.ndarray]:
    """Write k/v [H, T, hd] at [pos, pos+T) of the cache; the views of [0, pos+T) to attend over."""
    t = k.shape[1]
    cache.k[:, pos : pos + t] = k
    cache.v[:, pos : pos + t] = v
    return cache.k[:, : pos + t], cache.v[:, : pos + t]


def block(
    x: np.ndarray,
    mlp: dict,
    attn: dict,
    ln_1: dict,
    ln_2: dict,
    n_head: int,
    eps: np.float32,
    cache: LayerCache | None,
    pos: int,
) -> np.ndarray:  # [T, d] -> [T, d]
    x += mha(layer_norm(x, **ln_1, eps=eps), **attn, n_head=n_head, cache=cache, pos=pos)  # x is ours
    x += ffn(layer_norm(x, **ln_2, eps=eps), **mlp)
    return x


def gpt2_hidden(
    ids: np.ndarray,
    wte: np.ndarray,
    wpe: np.ndarray,
    blocks: list[dict],
    ln_f: dict,
    n_head: int,
    eps: np.float32,
    caches: list[LayerCache] | None,
    pos: int,
) -> np.ndarray:
    """Token ids [T] at positions [pos, pos+T) -> final hidden states [T, d] (after ln_f)."""
    x = wte[ids] + wpe[pos : pos + len(ids)]  # [T, d] (fancy indexing copies T rows only)
    for index, params in enumerate(blocks):
        x = block(x, **params, n_head=n_head, eps=eps, cache=None if caches is None else caches[index], pos=pos)
    return layer_norm(x, **ln_f, eps=eps)


def lm_head(h: np.ndarray, wte: np.ndarray) -> np.ndarray:  # [T, d] -> [T, V]
    return np.matmul(h, wte.T)  # tied embeddings; wte.T is a transposed view, BLAS reads it as is


@dataclass
class LayerCache:
    """One layer's keys and values, [H, max_seq, hd] each, written at the current position."""

    k: np.ndarray
    v: np.ndarray


@dataclass
class GPT2:
    """Parameters (views of the weight file) plus one sequence's KV cache and position."""

    params: dict  # wte, wpe, blocks[i]{ln_1, attn{c_attn, c_proj}, ln_2, mlp{c_fc, c_proj}}, ln_f
    n_head: int
    eps: np.float32
    max_seq: int
    caches: list[LayerCache] = field(default_factory=list)
    pos: int = 0  # tokens held in the cache

    def __post_init__(self) -> None:
        d = self.params["wte"].shape[1]
        shape = (self.n_head, self.max_seq, d // self.n_head)
        # np.zeros maps untouched zero pages: the ~75 MB of gpt2's cache costs nothing until written.
        self.caches = [LayerCache(np.zeros(shape, F32), np.zeros(shape, F32)) for _ in self.params["blocks"]]

    def _hidden(self, ids: np.ndarray, caches: list[LayerCache] | None, pos: int) -> np.ndarray:
        p = self.params
        return gpt2_hidden(ids, p["wte"], p["wpe"], p["blocks"], p["ln_f"], self.n_head, self.eps, caches, pos)

    def prefill(self, ids: np.ndarray) -> np.ndarray:  # [T] -> [V], logits of the last position
        if not 0 < len(ids) <= self.max_seq:
            raise ValueError(f"prompt has {len(ids)} tokens; this model takes 1 to {self.max_seq}")
        self.pos = 0
        h = self._hidden(ids, self.caches, 0)
        self.pos = len(ids)
        return lm_head(h[-1:], self.params["wte"])[0]  # lm_head for the last position only

    def decode(self, token: int) -> np.ndarray:  # -> [V]
        if self.pos >= self.max_seq:
            raise ValueError(f"the context is full ({self.max_seq} tokens)")
        h = self._hidden(np.array([token], dtype=np.intp), self.caches, self.pos)
        self.pos += 1
        return lm_head(h, self.params["wte"])[0]

    def forward_logits(self, ids: np.ndarray) -> np.ndarray:  # [T] -> [T, V]; leaves the cache alone
        if not 0 < len(ids) <= self.max_seq:
            raise ValueError(f"sequence has {len(ids)} tokens; this model takes 1 to {self.max_seq}")
        return lm_head(self._hidden(ids, None, 0), self.params["wte"])


def file_mapping(array: np.ndarray) -> object:
    """The object at the end of a view's .base chain: the mmap.mmap for a zero-copy weight."""
    while isinstance(array, np.ndarray) and array.base is not None:
        array = array.base
    return array


def nest_params(flat: dict[str, np.ndarray], n_layer: int) -> dict:
    """Normalised safetensors names ('h.0.attn.c_attn.weight') -> picoGPT's nested dict.
    np.asarray drops the np.memmap subclass (its ufunc hooks cost per op) and still copies nothing."""

    def leaf(prefix: str) -> dict:
        return {"w": np.asarray(flat[prefix + ".weight"]), "b": np.asarray(flat[prefix + ".bias"])}

    blocks = [
        {
            "ln_1": leaf(f"h.{i}.ln_1"),
            "ln_2": leaf(f"h.{i}.ln_2"),
            "attn": {"c_attn": leaf(f"h.{i}.attn.c_attn"), "c_proj": leaf(f"h.{i}.attn.c_proj")},
            "mlp": {"c_fc": leaf(f"h.{i}.mlp.c_fc"), "c_proj": leaf(f"h.{i}.mlp.c_proj")},
        }
        for i in range(n_layer)
    ]
    return {
        "wte": np.asarray(flat["wte.weight"]),
        "wpe": np.asarray(flat["wpe.weight"]),
        "blocks": blocks,
        "ln_f": leaf("ln_f"),
    }
