"""The shift between two independent samples: Hodges-Lehmann's estimate with the Mann-Whitney
(Moses) interval, distribution-free.

Two results folders are independent samples of an engine's runs: no repeat of one is paired with a
repeat of the other (they ran at different times, maybe on different machines), so the paired
speed-up of one bench (speedup.py) does not apply. On log times the ratio NEW/BASE is a shift:
its Hodges-Lehmann estimate is the median of the n x m differences log(new_j) - log(base_i), and
its interval runs from the C-th smallest to the C-th largest of them, C from the exact null
distribution of the Mann-Whitney U statistic. It covers the true shift at its stated level whenever
the two distributions differ by a shift (of log time: a ratio of times), whatever their shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

CONFIDENCE = 0.95
MIN_LEVEL = 0.80  # below this no interval is stated: too few runs to tell anything apart


@dataclass(frozen=True)
class Shift:
    """NEW / BASE as a ratio, its interval and that interval's true level."""

    ratio: float
    low: float  # nan without an interval
    high: float
    level: float  # the interval's exact coverage (0.9 = 90%); nan without an interval
    n_base: int
    n_new: int

    @property
    def has_interval(self) -> bool:
        return not math.isnan(self.low)


@lru_cache(maxsize=256)
def _u_counts(n: int, m: int) -> tuple[int, ...]:
    """How many of the C(n+m, n) orderings give U = 0..nm: the coefficients of the Gaussian binomial
    [n+m choose n]_q = prod_{i=1..n} (1 - q^(m+i)) / (1 - q^i), exactly, in integers."""
    size = n * m + 1
    poly = [0] * size
    poly[0] = 1
    for i in range(1, n + 1):
        for u in range(size - 1, m + i - 1, -1):  # times (1 - q^(m+i))
            poly[u] -= poly[u - m - i]
        for u in range(i, size):  # divided by (1 - q^i): a running sum with stride i
            poly[u] += poly[u - i]
    return tuple(poly)


def moses_rank(n: int, m: int, confidence: float = CONFIDENCE) -> tuple[int, float]:
    """(C, level): the interval [d_(C), d_(nm+1-C)] of the sorted differences covers the shift with
    probability 1 - 2 P(U <= C - 1). C is the largest whose level is >= `confidence`; when none is
    (few runs: 3 against 3 reach 90%), C = 1 at its own level. (0, nan) when n or m is 0."""
    if n < 1 or m < 1:
        return 0, math.nan
    counts = _u_counts(n, m)
    total = math.comb(n + m, n)
    best, level = 1, 1 - 2 * counts[0] / total
    tail = counts[0]
    for c in range(2, n * m // 2 + 1):
        tail += counts[c - 1]
        coverage = 1 - 2 * tail / total
        if coverage < confidence:
            break
        best, level = c, coverage
    return best, level


def hodges_lehmann(base: Sequence[float], new: Sequence[float], confidence: float = CONFIDENCE) -> Shift | None:
    """NEW/BASE of positive values (times, sizes) on the log scale; None when either sample is empty."""
    x = [math.log(v) for v in base if v is not None and v > 0 and math.isfinite(v)]
    y = [math.log(v) for v in new if v is not None and v > 0 and math.isfinite(v)]
    if not x or not y:
        return None
    diffs = sorted(b - a for a in x for b in y)
    k = len(diffs)
    mid = diffs[k // 2] if k % 2 else (diffs[k // 2 - 1] + diffs[k // 2]) / 2
    c, level = moses_rank(len(x), len(y), confidence)
    if math.isnan(level) or level < MIN_LEVEL:
        return Shift(math.exp(mid), math.nan, math.nan, math.nan, len(x), len(y))
    return Shift(math.exp(mid), math.exp(diffs[c - 1]), math.exp(diffs[k - c]), level, len(x), len(y))
