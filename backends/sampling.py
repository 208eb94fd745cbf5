"""One sampler for every engine: the same logits and seed give the same tokens everywhere."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from .errors import UsageError

Decoding = Literal["greedy", "sample"]


@dataclass(frozen=True)
class SamplingParams:
    decoding: Decoding = "greedy"
    temperature: float = 1.0
    top_k: int = 0  # 0: no limit
    top_p: float = 1.0
    seed: int = 0

    def validate(self) -> "SamplingParams":
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
        return self.decoding == "greedy" or self.temperature == 0

    def as_dict(self) -> dict:
        return asdict(self)


class Sampler:
    """Picks the next token from a float logits vector. One instance per run (it owns the RNG).

    Sampling draws one uniform number per token and walks the kept tokens' probabilities: in
    token-id order without top-p, by falling probability (ties by token id) with top-p. Nothing
    sorts the vocabulary: top-k is a partial selection, a small candidate set (<= 2,048) is
    handled in float64 exactly as a plain sort would, and a large one (top-p over the whole
    vocabulary) by selection on float32 probabilities, narrowing by value until a few hundred
    candidates remain. The token chosen is the one a full sort gives, except when the draw lands
    within float32 rounding of a boundary between two tokens.
    """

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self._rng = np.random.default_rng(params.seed)

    def __call__(self, logits: np.ndarray) -> int:
        logits = np.asarray(logits, dtype=np.float32).reshape(-1)
        if self.params.is_greedy:
            return int(np.argmax(logits))
        return self._sample(logits / np.float32(self.params.temperature))

    def _sample(self, logits: np.ndarray) -> int:
        p = self.params
        ids = _top_k_ids(logits, p.top_k) if 0 < p.top_k < logits.size else None
        u = self._rng.random()
        if ids is not None and ids.size <= _EXACT_LIMIT:
            return _sample_exact(logits[ids], ids, p.top_p, u)
        values = logits if ids is None else logits[ids]
        weights = np.exp(values - values.max())  # float32
        if p.top_p < 1:
            return _sample_top_p(values, weights, ids, p.top_p, u)
        index = _walk_in_order(weights, u)
        return int(index if ids is None else ids[index])


# Candidate sets up to this size are sampled in float64, in the order a full sort gives.
_EXACT_LIMIT = 2048
# The value-narrowing selection sorts what is left once the candidates are this few.
_SMALL = 256
_BLOCK = 1024


def _top_k_ids(logits: np.ndarray, k: int) -> np.ndarray:
    """Token ids of the k largest logits, in token-id order (ties at the k-th value: lowest ids)."""
    kth = np.partition(logits, logits.size - k)[logits.size - k]
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


def _walk_in_order(weights: np.ndarray, u: float) -> int:
    """Index where the running sum of `weights` (in array order) first exceeds u x their total:
    block sums first, then a cumulative sum inside one block."""
    starts = np.arange(0, weights.size, _BLOCK)
    blocks = np.add.reduceat(weights, starts, dtype=np.float64)
    cumulative = np.cumsum(blocks)
    target = u * cumulative[-1]
    block = min(int(np.searchsorted(cumulative, target, side="right")), blocks.size - 1)
    before = cumulative[block - 1] if block else 0.0
    inside = np.cumsum(weights[starts[block]: starts[block] + _BLOCK], dtype=np.float64) + before
    return int(starts[block]) + min(int(np.searchsorted(inside, target, side="right")), inside.size - 1)


def _sample_top_p(values: np.ndarray, weights: np.ndarray, ids: np.ndarray | None, top_p: float, u: float) -> int:
    """Top-p over a large candidate set, by falling probability (ties by token id), unsorted."""
    total = float(weights.sum(dtype=np.float64))
    # Real models' next-token distributions put top_p of the mass on a few tokens: try the best first.
    kth = np.partition(values, values.size - _SMALL)[values.size - _SMALL]
    best = np.flatnonzero(values >= kth)
    if float(weights[best].sum(dtype=np.float64)) >= top_p * total:
        ids = best if ids is None else ids[best]
        values, weights = values[best], weights[best]
    _, kept_mass = _crossing(values, weights, top_p * total, strict=False)
    index, _ = _crossing(values, weights, u * kept_mass, strict=True)
    return int(index if ids is None else ids[index])


def _crossing(values: np.ndarray, weights: np.ndarray, target: float, strict: bool) -> tuple[int, float]:
    """(index, running mass up to and including it) of the first candidate, in falling-value
    order with ties by index, where the running mass reaches `target` (exceeds it when strict).

    Narrows by value without sorting: a sample of the candidates estimates where the running
    mass crosses the target; two sample values around that point split the candidates into
    above / between / below, exact masses say which part holds the crossing, and the search goes
    on there (or in one half, when the estimate was off) until few are left; those are sorted."""
    def reached(mass: float) -> bool:
        return mass > target if strict else mass >= target

    index = None  # positions of the remaining candidates in `values` (None: all of them)
    before = 0.0  # mass of the candidates that come before the remaining ones
    while values.size > _SMALL:
        keep, after = _bracket(values, weights, before, target, reached)
        if np.count_nonzero(keep) > values.size // 2:
            keep, after = _halve(values, weights, before, reached)
            if keep is None:
                break  # all equal: their order is by index, as they stand
        before = after
        chosen = np.flatnonzero(keep)
        values, weights = values[chosen], weights[chosen]
        index = chosen if index is None else index[chosen]
    positions = np.arange(values.size) if index is None else index
    order = np.lexsort((positions, -values)) if values.size <= _SMALL else np.arange(values.size)
    cumulative = before + np.cumsum(weights[order], dtype=np.float64)
    at = min(int(np.searchsorted(cumulative, target, side="right" if strict else "left")), order.size - 1)
    return int(positions[order[at]]), float(cumulative[at])


def _mass(weights: np.ndarray, mask: np.ndarray) -> float:
    return float(weights[np.flatnonzero(mask)].sum(dtype=np.float64))


def _bracket(values, weights, before, target, reached):
    """Split around the estimated crossing: (mask of the part that holds it, mass before that part)."""
    stride = max(1, values.size // 256)
    sample_order = np.argsort(-values[::stride], kind="stable")
    sample = values[::stride][sample_order]
    estimate = before + np.cumsum(weights[::stride][sample_order], dtype=np.float64) * stride
    at = int(np.searchsorted(estimate, target))
    margin = 2 + int(3 * math.sqrt(at))  # the estimate's error grows like the square root of the count
    above = values > sample[at - margin] if at >= margin else np.zeros(values.size, bool)
    mass_above = before + _mass(weights, above)
    if reached(mass_above):
        return above, before
    between = ~above
    if at + margin < sample.size:
        between &= values >= sample[at + margin]
    mass_between = _mass(weights, between)
    if reached(mass_above + mass_between):
        return between, mass_above
    return ~(above | between), mass_above + mass_between


def _halve(values, weights, before, reached):
    """Split at the median value: (mask of the half that holds the crossing, mass before it), or
    (None, before) when all values are equal."""
    pivot = np.partition(values, values.size // 2)[values.size // 2]
    high = values > pivot
    if not high.any():  # the median is the largest value: it goes first
        high = values >= pivot
        if high.all():
            return None, before
    mass = before + _mass(weights, high)
    return (high, before) if reached(mass) else (~high, mass)
