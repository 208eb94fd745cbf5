"""One sampler for every engine: the same logits and seed give the same tokens everywhere."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from .errors import UsageError

Decoding = Literal["greedy", "sample"]

# Temperatures below this are greedy (argmax), as in vLLM: dividing logits by a tiny one overflows
# float32 (1e-38 made every logit inf, and every draw the last token id), and well before that the
# softmax is one-hot at the argmax anyway.
GREEDY_BELOW = 1e-5


@dataclass(frozen=True)
class SamplingParams:
    decoding: Decoding = "greedy"
    temperature: float = 1.0  # >= 0; below GREEDY_BELOW (0 included) it is greedy: see is_greedy
    top_k: int = 0  # 0: no limit
    top_p: float = 1.0
    seed: int = 0

    def validate(self) -> SamplingParams:
        if self.decoding not in ("greedy", "sample"):
            raise UsageError(f"decoding must be 'greedy' or 'sample', not {self.decoding!r}")
        if not self.temperature >= 0:
            raise UsageError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise UsageError(f"top-p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise UsageError(f"top-k must be >= 0, got {self.top_k}")
        if self.seed < 0:
            raise UsageError(f"seed must be >= 0, got {self.seed}")
        return self

    @property
    def is_greedy(self) -> bool:
        """Greedy decoding, or a temperature below GREEDY_BELOW (0 included): every engine then takes the argmax."""
        return self.decoding == "greedy" or self.temperature < GREEDY_BELOW

    def as_dict(self) -> dict:
        return asdict(self)


class Sampler:
    """Picks the next token from a float logits vector. One instance per run (it owns the RNG).

    Nothing sorts the vocabulary. Top-k is a partial selection; a small candidate set (<= 2,048
    tokens) is sampled in float64 exactly as a plain sort would (by falling probability, ties by
    token id, when top-p is on). A large one (the whole vocabulary) is walked in token-id order
    over float32 weights summed by blocks; top-p there is rejection sampling over the nucleus
    (as FlashInfer's sorting-free top-p does): draw from the candidates, keep the draw if the
    mass of the tokens ranked before it (higher probability, or equal with a lower id) is below
    p, otherwise draw again among those tokens only. Each draw is exactly as likely as with a
    full sort; which token a given seed gives differs from a sorted walk. Vocabulary-sized
    temporaries are reused from token to token.
    """

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self._rng = np.random.default_rng(params.seed)
        self._scratch = _Scratch()

    def __call__(self, logits: np.ndarray) -> int:
        logits = np.asarray(logits, dtype=np.float32).reshape(-1)
        if self.params.is_greedy:
            return int(np.argmax(logits))
        if self.params.temperature == 1:
            return self._sample(logits)
        scaled = np.divide(logits, np.float32(self.params.temperature), out=self._scratch.get("scaled", logits.size))
        return self._sample(scaled)

    def probabilities(self, logits: np.ndarray) -> np.ndarray:
        """The distribution `__call__` draws from, float64 over the vocabulary: one-hot at the argmax
        when greedy; otherwise softmax(logits / temperature) kept to the top-k (ties: the lowest ids),
        then to the nucleus (the fewest tokens by falling probability, ties by lower id, whose mass
        reaches top-p), renormalised. A speculative engine's accept/reject rule compares these (with a
        full sort: slower than a draw, which needs none)."""
        logits = np.asarray(logits, dtype=np.float32).reshape(-1)
        out = np.zeros(logits.size, dtype=np.float64)
        if self.params.is_greedy:
            out[int(np.argmax(logits))] = 1.0
            return out
        p = self.params
        scaled = logits if p.temperature == 1 else logits / np.float32(p.temperature)
        ids = _top_k_ids(scaled, p.top_k, self._scratch) if 0 < p.top_k < logits.size else np.arange(logits.size)
        values = scaled[ids].astype(np.float64)
        probs = np.exp(values - values.max())
        probs /= probs.sum()
        if p.top_p < 1:
            order = np.lexsort((ids, -probs))  # falling probability, ties by token id
            cut = int(np.searchsorted(np.cumsum(probs[order]), p.top_p, side="left"))
            keep = order[: min(cut + 1, order.size)]
            ids, probs = ids[keep], probs[keep] / probs[keep].sum()
        out[ids] = probs
        return out

    def _sample(self, logits: np.ndarray) -> int:
        p = self.params
        ids = _top_k_ids(logits, p.top_k, self._scratch) if 0 < p.top_k < logits.size else None
        if ids is not None and ids.size <= _EXACT_LIMIT:
            return _sample_exact(logits[ids], ids, p.top_p, self._rng.random())
        values = logits if ids is None else logits[ids]
        weights = _BlockedWeights(values, self._scratch)
        if p.top_p < 1:
            index = _sample_top_p(weights, p.top_p, self._rng, self._scratch)
        else:
            index = weights.walk(weights.blocks, self._rng.random())
        return int(index if ids is None else ids[index])


class _Scratch:
    """Vocabulary-sized buffers reused from token to token. A fresh 200 KB temporary per step is
    above glibc's mmap threshold, so each one costs page faults, which dominated temperature-only
    sampling (docs/methodology.md)."""

    def __init__(self) -> None:
        self._buffers: dict[str, np.ndarray] = {}

    def get(self, name: str, size: int, dtype: type = np.float32) -> np.ndarray:
        buffer = self._buffers.get(name)
        if buffer is None or buffer.size < size:
            buffer = self._buffers[name] = np.empty(size, dtype)
        return buffer[:size]


# Candidate sets up to this size are sampled in float64, in the order a full sort gives.
_EXACT_LIMIT = 2048
# Weights are summed by blocks of this many tokens: float32 pairwise sums, one vectorised call
# (a float64 reduceat costs several times more), then a float64 cumulative sum inside one block per draw.
_BLOCK = 1024


def _kth_largest(values: np.ndarray, k: int, scratch: _Scratch) -> np.float32:
    """The k-th largest value (k >= 1), by partial selection in a reused copy."""
    copy = scratch.get("select", values.size)
    np.copyto(copy, values)
    copy.partition(values.size - k)
    return copy[values.size - k]


def _top_k_ids(logits: np.ndarray, k: int, scratch: _Scratch) -> np.ndarray:
    """Token ids of the k largest logits, in token-id order (ties at the k-th value: lowest ids)."""
    kth = _kth_largest(logits, k, scratch)
    ids = np.flatnonzero(logits > kth)
    if ids.size < k:
        ids = np.sort(np.concatenate([ids, np.flatnonzero(logits == kth)[: k - ids.size]]))
    return ids


def _sample_exact(values: np.ndarray, ids: np.ndarray, top_p: float, u: float) -> int:
    """A small candidate set (ids ascending), in float64: the plain algorithm."""
    scores = values.astype(np.float64)
    probs = np.exp(scores - scores.max())
    probs /= probs.sum()
    if top_p < 1:
        order = np.lexsort((ids, -probs))  # falling probability, ties by token id
        cumulative = np.cumsum(probs[order])
        cut = int(np.searchsorted(cumulative, top_p, side="left"))
        keep = order[: min(cut + 1, order.size)]
        chosen = probs[keep]
    else:
        keep, chosen = None, probs  # token-id order
    cumulative = np.cumsum(chosen)
    index = min(int(np.searchsorted(cumulative, u * chosen.sum(), side="right")), chosen.size - 1)
    return int(ids[index if keep is None else keep[index]])


# Weights are exp(value - max + this): the best weighs e^64 (~6e27), so 50k of them sum far below
# float32's limit (3.4e38), while tokens down to ~150 nats below the best still get normal floats.
# exp(value - max) made every token more than 87 nats down a subnormal, and numpy's exp is slow on
# subnormals: peaked logits (a trained model's, or any at a low temperature) paid for it.
_WEIGHT_SHIFT = np.float32(64)


class _BlockedWeights:
    """exp(values - max + shift) in a reused float32 buffer padded with zeros to whole blocks, with its
    block sums: the total mass and the in-order walk both come from them."""

    def __init__(self, values: np.ndarray, scratch: _Scratch) -> None:
        self.size = values.size
        padded = -(-values.size // _BLOCK) * _BLOCK
        self.padded = scratch.get("weights", padded)
        self.padded[values.size :] = 0
        self.weights = self.padded[: values.size]
        np.subtract(values, values.max() - _WEIGHT_SHIFT, out=self.weights)
        np.exp(self.weights, out=self.weights)  # float32; masked tokens (-inf) weigh 0
        self.blocks = self.block_sums(self.padded)
        self.total = float(self.blocks.sum(dtype=np.float64))

    @staticmethod
    def block_sums(padded: np.ndarray) -> np.ndarray:
        return padded.reshape(-1, _BLOCK).sum(axis=1)  # [blocks] float32, pairwise within a block

    def walk(self, blocks: np.ndarray, u: float, padded: np.ndarray | None = None) -> int:
        """Index where the running sum of `padded` (default: the weights; any vector of this
        layout whose block sums are `blocks`) first exceeds u x its total, in token-id order."""
        padded = self.padded if padded is None else padded
        cumulative = np.cumsum(blocks, dtype=np.float64)
        target = u * cumulative[-1]
        block = min(int(np.searchsorted(cumulative, target, side="right")), blocks.size - 1)
        before = cumulative[block - 1] if block else 0.0
        start = block * _BLOCK
        inside = padded[start : start + _BLOCK].astype(np.float64)  # then cumsum in place: faster
        np.cumsum(inside, out=inside)  # than cumsum(dtype=float64)
        index = start + int(np.searchsorted(inside, target - before, side="right"))
        return min(index, self.size - 1)


def _sample_top_p(weights: _BlockedWeights, top_p: float, rng: np.random.Generator, scratch: _Scratch) -> int:
    """Top-p over a large candidate set without ordering it (rejection sampling; see Sampler).

    The nucleus is the smallest set of candidates by falling weight (ties by index) whose mass
    reaches p. A draw is in it exactly when the mass ranked before it is below p x total; a
    rejected draw's ranked-before set still holds the whole nucleus, so drawing again from it
    keeps every nucleus token's odds. Expected draws: about 1 / p."""
    target = top_p * weights.total
    above = scratch.get("above", weights.padded.size)  # 1.0 where ranked before the draw, else 0.0
    tied = scratch.get("tied", weights.size, np.bool_)
    pool = scratch.get("pool", weights.padded.size)
    pool_padded, pool_blocks = weights.padded, weights.blocks
    while True:
        index = weights.walk(pool_blocks, rng.random(), pool_padded)
        weight = weights.weights[index]
        np.greater(weights.padded, weight, out=above, casting="unsafe")  # heavier than the draw ...
        ties = np.equal(weights.weights[:index], weight, out=tied[:index])  # ... or as heavy, lower index
        if ties.any():  # exact ties are rare in float32
            above[np.flatnonzero(ties)] = 1
        # a float32 mask and BLAS's dot: half the time of a bool mask, a product and a sum
        if float(np.dot(weights.padded, above)) < target:
            return index
        np.multiply(weights.padded, above, out=pool)
        pool_padded, pool_blocks = pool, weights.block_sums(pool)
