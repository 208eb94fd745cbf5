"""One sampler for every engine: the same logits and seed give the same tokens everywhere."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from .errors import UsageError

Decoding = Literal["greedy", "sample"]

# Top-p looks at the best candidates first and sorts the full vocabulary only when they
# do not hold enough probability mass: exact, and ~50x cheaper than a 50k-element sort.
_TOP_P_WINDOW = 1024


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
    """Picks the next token from a float logits vector. One instance per run (it owns the RNG)."""

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
        candidates = np.arange(logits.size)
        if 0 < p.top_k < logits.size:
            candidates = np.argpartition(logits, -p.top_k)[-p.top_k :]
        scores = logits[candidates].astype(np.float64)
        probs = np.exp(scores - scores.max())
        probs /= probs.sum()
        if p.top_p < 1:
            keep = _top_p_keep(probs, candidates, p.top_p)
        elif candidates.size < logits.size:
            keep = np.argsort(candidates)  # a fixed order, so the draw maps to the same token
        else:
            keep = candidates  # already in token-id order
        chosen = probs[keep]
        u = self._rng.random() * chosen.sum()
        index = int(np.searchsorted(np.cumsum(chosen), u, side="right"))
        return int(candidates[keep[min(index, keep.size - 1)]])


def _by_probability(probs: np.ndarray, candidates: np.ndarray, subset: np.ndarray) -> np.ndarray:
    """`subset` ordered by falling probability, ties broken by token id."""
    return subset[np.lexsort((candidates[subset], -probs[subset]))]


def _top_p_keep(probs: np.ndarray, candidates: np.ndarray, top_p: float) -> np.ndarray:
    """Indices of the smallest most-probable set whose mass reaches top_p (at least one)."""
    if probs.size > _TOP_P_WINDOW:
        window = np.argpartition(-probs, _TOP_P_WINDOW)[:_TOP_P_WINDOW]
        order = _by_probability(probs, candidates, window)
        cumulative = np.cumsum(probs[order])
        if cumulative[-1] >= top_p:
            return order[: int(np.searchsorted(cumulative, top_p, side="left")) + 1]
    order = _by_probability(probs, candidates, np.arange(probs.size))
    cumulative = np.cumsum(probs[order])
    cut = int(np.searchsorted(cumulative, top_p, side="left"))
    return order[: min(cut + 1, order.size)]
