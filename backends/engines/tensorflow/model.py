"""GPT-2 in TensorFlow 2, the way OpenAI's original gpt-2 code (TF 1.x) does it: small functions
over the weights, keys and values kept as a past state between calls, one graph call per token.

OpenAI's `model.py` concatenated `past` and fed it back through a placeholder; here the past is
a preallocated static cache (one tf.Variable pair per layer, [H, S, hd], zeros) written in place
at the current position, so the per-token step is ONE tf.function call with fixed input shapes:
no retracing per position (and XLA can compile it once).

Shapes: T tokens in this call, P the position of the first one, S cache length (n_positions),
d n_embd, H heads, hd = d // H, V vocab. Weights stay in HF's Conv1D layout [in, out], so
`x @ w + b` is a linear layer; the lm_head is tied to wte. Everything is float32.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before the import: silence TF's start-up logs

from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from ...gpt2_config import GPT2Config  # noqa: E402
from ...sources.weights import mmap_numpy, normalise_name, normalised_header  # noqa: E402

_GELU_C = float(np.sqrt(2.0 / np.pi))
_MASKED = -1e10  # OpenAI's `w * b - 1e10 * (1 - b)`: finite, so an all-stale row cannot make NaN


# --- the model: pure functions ---------------------------------------------------------------


def gelu_new(x: tf.Tensor) -> tf.Tensor:  # [..., n] -> [..., n]
    """GPT-2's tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + tf.tanh(_GELU_C * (x + 0.044715 * x * x * x)))


def layer_norm(x: tf.Tensor, w: tf.Variable, b: tf.Variable, eps: float) -> tf.Tensor:  # [T, d] -> [T, d]
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)  # [T, 1]
    centred = x - mean  # [T, d]
    var = tf.reduce_mean(tf.square(centred), axis=-1, keepdims=True)  # [T, 1]
    return centred * tf.math.rsqrt(var + eps) * w + b


def linear(x: tf.Tensor, w: tf.Variable, b: tf.Variable) -> tf.Tensor:  # [T, n] @ [n, m] -> [T, m]
    # matmul + b, not tf.nn.bias_add: Grappler then fuses MatMul + BiasAdd (+ GELU) into oneDNN's
    # _FusedMatMul, which decodes slower (docs/engines.md).
    return tf.matmul(x, w) + b


def ffn(x: tf.Tensor, c_fc: dict, c_proj: dict) -> tf.Tensor:  # [T, d] -> [T, d]
    return linear(gelu_new(linear(x, **c_fc)), **c_proj)  # [T, 4d] in between


def split_heads(x: tf.Tensor, n_head: int) -> tf.Tensor:  # [T, d] -> [H, T, hd]
    d = x.shape[-1]
    return tf.transpose(tf.reshape(x, [-1, n_head, d // n_head]), [1, 0, 2])


def merge_heads(x: tf.Tensor) -> tf.Tensor:  # [H, T, hd] -> [T, H * hd]
    h, hd = x.shape[0], x.shape[2]
    return tf.reshape(tf.transpose(x, [1, 0, 2]), [-1, h * hd])


def causal_mask(t: tf.Tensor) -> tf.Tensor:  # -> [T, T] bool, query i sees keys 0..i
    return tf.cast(tf.linalg.band_part(tf.ones([t, t]), -1, 0), tf.bool)


def attention(q: tf.Tensor, k: tf.Tensor, v: tf.Tensor, mask: tf.Tensor | None) -> tf.Tensor:
    """q [H, T, hd], k/v [H, K, hd], mask [T, K] bool (None: every key) -> [H, T, hd]."""
    scores = tf.matmul(q, k, transpose_b=True) * (1.0 / float(np.sqrt(q.shape[-1])))  # [H, T, K]
    if mask is not None:
        scores = tf.where(mask, scores, _MASKED)  # [T, K] broadcasts over heads
    return tf.matmul(tf.nn.softmax(scores, axis=-1), v)  # [H, T, hd]


def cache_slots(n_head: int, pos: tf.Tensor, t: tf.Tensor) -> tf.Tensor:  # -> [H, T, 2] (head, position)
    """The cache indices of T new tokens at [pos, pos + T) for every head (once per call, all layers)."""
    heads, positions = tf.meshgrid(tf.range(n_head), pos + tf.range(t), indexing="ij")  # [H, T] each
    return tf.stack([heads, positions], axis=-1)


def kv_write(cache: tuple[tf.Variable, tf.Variable], k: tf.Tensor, v: tf.Tensor, slots: tf.Tensor) -> None:
    """Write k/v [H, T, hd] into the cache [H, S, hd] at `slots` [H, T, 2], in place."""
    cache[0].scatter_nd_update(slots, k)
    cache[1].scatter_nd_update(slots, v)


def mha(
    x: tf.Tensor, c_attn: dict, c_proj: dict, n_head: int, cache, slots: tf.Tensor | None, pos: tf.Tensor, keys: str
) -> tf.Tensor:
    """[T, d] -> [T, d]. `keys` says what the new queries attend to:
    "new": only the T new tokens, causally (a sequence from position 0: prefill, scoring);
    "prefix": the cache's first pos + 1 slots (decode, dynamic length: plain graphs only);
    "masked": the whole cache [S], slots after pos masked (decode, fixed shapes: XLA)."""
    qkv = linear(x, **c_attn)  # [T, 3d]
    q, k, v = (split_heads(part, n_head) for part in tf.split(qkv, 3, axis=-1))  # [H, T, hd] each
    if cache is not None:
        kv_write(cache, k, v, slots)
    if keys == "new":
        out = attention(q, k, v, causal_mask(tf.shape(x)[0]))
    elif keys == "prefix":
        out = attention(q, cache[0][:, : pos + 1], cache[1][:, : pos + 1], None)  # [H, pos + 1, hd] reads
    else:
        valid = tf.range(cache[0].shape[1]) <= pos  # [S]
        out = attention(q, cache[0].read_value(), cache[1].read_value(), valid[tf.newaxis, :])
    return linear(merge_heads(out), **c_proj)


def block(
    x: tf.Tensor,
    ln_1: dict,
    attn: dict,
    ln_2: dict,
    mlp: dict,
    n_head: int,
    eps: float,
    cache,
    slots: tf.Tensor | None,
    pos: tf.Tensor,
    keys: str,
) -> tf.Tensor:  # [T, d] -> [T, d]
    x = x + mha(layer_norm(x, **ln_1, eps=eps), **attn, n_head=n_head, cache=cache, slots=slots, pos=pos, keys=keys)
    return x + ffn(layer_norm(x, **ln_2, eps=eps), **mlp)


def gpt2_hidden(
    ids: tf.Tensor,
    pos: tf.Tensor,
    wte_t,
    wpe,
    blocks: list[dict],
    ln_f: dict,
    n_head: int,
    eps: float,
    caches: list | None,
    keys: str,
) -> tf.Tensor:
    """Token ids [T] at positions [pos, pos + T) -> final hidden states [T, d] (after ln_f)."""
    t = tf.shape(ids)[0]
    x = tf.transpose(tf.gather(wte_t, ids, axis=1)) + tf.gather(wpe, pos + tf.range(t))  # [T, d]
    slots = None if caches is None else cache_slots(n_head, pos, t)  # [H, T, 2]
    for index, params in enumerate(blocks):
        cache = None if caches is None else caches[index]
        x = block(x, **params, n_head=n_head, eps=eps, cache=cache, slots=slots, pos=pos, keys=keys)
    return layer_norm(x, **ln_f, eps=eps)


def lm_head(h: tf.Tensor, wte_t) -> tf.Tensor:  # [T, d] @ [d, V] -> [T, V]
    return tf.matmul(h, wte_t)  # tied embeddings, stored transposed (see nest_params)


# --- weights ----------------------------------------------------------------------------------


def iter_weights(path: Path) -> Iterator[tuple[str, np.ndarray]]:
    """(normalised name, float32 array) one tensor at a time, read with safetensors.numpy (never a
    pickle). numpy has no bfloat16, so a bf16 file is widened by the project's own reader."""
    from safetensors import safe_open

    if any(info.dtype == "BF16" for info in normalised_header(path).values()):
        for name, array in mmap_numpy(path).items():
            yield name, np.ascontiguousarray(array, dtype=np.float32)
        return
    with safe_open(str(path), framework="np") as f:
        for name in f.keys():  # noqa: SIM118 - safetensors' safe_open is no dict: keys() is its API
            key = normalise_name(name)
            if key is not None:
                yield key, np.ascontiguousarray(f.get_tensor(name), dtype=np.float32)


def read_weights(path: Path) -> dict[str, np.ndarray]:
    return dict(iter_weights(path))


def load_variables(path: Path) -> dict[str, tf.Variable]:
    """Every weight as a tf.Variable, one tensor read at a time (the load's peak memory stays near
    one copy). The tied embedding is kept once, transposed to `wte_t` [d, V]: TF's CPU MatMul reads
    the lm_head faster as [d, V] than with transpose_b=True (with XLA too; docs/engines.md), and
    the embedding lookup gathers T columns of it instead of T rows."""
    variables = {}
    for name, array in iter_weights(path):
        if name == "wte.weight":
            name, array = "wte_t", np.ascontiguousarray(array.T)
        variables[name] = tf.Variable(array, trainable=False, name=name.replace(".", "_"))
        del array
    return variables


def nest_params(flat: dict[str, tf.Variable], n_layer: int) -> dict:
    """Flat names -> picoGPT's nested dict."""

    def leaf(prefix: str) -> dict:
        return {"w": flat[prefix + ".weight"], "b": flat[prefix + ".bias"]}

    blocks = [
        {
            "ln_1": leaf(f"h.{i}.ln_1"),
            "ln_2": leaf(f"h.{i}.ln_2"),
            "attn": {"c_attn": leaf(f"h.{i}.attn.c_attn"), "c_proj": leaf(f"h.{i}.attn.c_proj")},
            "mlp": {"c_fc": leaf(f"h.{i}.mlp.c_fc"), "c_proj": leaf(f"h.{i}.mlp.c_proj")},
        }
        for i in range(n_layer)
    ]
    return {"wte_t": flat["wte_t"], "wpe": flat["wpe.weight"], "blocks": blocks, "ln_f": leaf("ln_f")}


# --- the graphs -------------------------------------------------------------------------------


class GPT2(tf.Module):
    """Weights and one sequence's static cache as tf.Variables, and three tf.functions:
    prefill (any prompt length: one trace, dynamic T), decode (one token: one trace, XLA-compiled
    when `xla`), forward (every position's logits, no cache)."""

    def __init__(self, variables: dict[str, tf.Variable], config: GPT2Config, xla: bool = False) -> None:
        super().__init__(name="gpt2")
        self.config = config
        self.max_seq = config.n_positions
        self.params = nest_params(variables, config.n_layer)
        shape = (config.n_head, config.n_positions, config.head_dim)  # [H, S, hd]
        # Zeros, not uninitialised: masked stale slots must hold finite values.
        self.caches = [
            (
                tf.Variable(tf.zeros(shape), trainable=False, name=f"k_{i}"),
                tf.Variable(tf.zeros(shape), trainable=False, name=f"v_{i}"),
            )
            for i in range(config.n_layer)
        ]
        self.decode_keys = "masked" if xla else "prefix"
        ids = tf.TensorSpec([None], tf.int32)
        scalar = tf.TensorSpec([], tf.int32)
        self.prefill_fn = tf.function(self._prefill, input_signature=[ids])
        self.decode_fn = tf.function(self._decode, input_signature=[scalar, scalar], jit_compile=xla)
        self.forward_fn = tf.function(self._forward, input_signature=[ids])

    def _hidden(self, ids: tf.Tensor, pos: tf.Tensor, caches, keys: str) -> tf.Tensor:
        p, c = self.params, self.config
        return gpt2_hidden(
            ids, pos, p["wte_t"], p["wpe"], p["blocks"], p["ln_f"], c.n_head, c.layer_norm_epsilon, caches, keys
        )

    def _prefill(self, ids: tf.Tensor) -> tf.Tensor:  # [T] -> [V]: fills cache slots [0, T)
        h = self._hidden(ids, tf.constant(0), self.caches, "new")  # [T, d]
        return lm_head(h[-1:], self.params["wte_t"])[0]  # the lm_head for the last position only

    def _decode(self, token: tf.Tensor, pos: tf.Tensor) -> tf.Tensor:  # token at pos -> [V]
        h = self._hidden(token[tf.newaxis], pos, self.caches, self.decode_keys)  # [1, d]
        return lm_head(h, self.params["wte_t"])[0]

    def _forward(self, ids: tf.Tensor) -> tf.Tensor:  # [T] -> [T, V], the cache untouched
        return lm_head(self._hidden(ids, tf.constant(0), None, "new"), self.params["wte_t"])
