"""Repeat until sure: when to stop the fair order's rounds so that each engine's median interval
is narrower than a target, with an interval whose level holds although the data chose the stop.

Looking at the interval after every round and stopping once it is narrow picks the luckiest look:
a 95% interval read at 20 looks covers far less than 95%. The rule here looks only at a fixed
schedule of round counts (fixed before any run: a first look, then each ~1.5 times the last, up to
--max-repeats) and builds each look's interval at level 1 - alpha / (K + 1), K the number of looks
(Bonferroni): the one more is the look a budget (--max-minutes) may force between two scheduled
ones, at a round count the runs' own durations chose. The chance that any of these K + 1 intervals
misses the median is at most the sum of their chances, alpha; so the interval at whichever look the
rounds stop at covers with probability at least 1 - alpha, however the stop was chosen.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .stats import median_interval

CONFIDENCE = 0.95
GROWTH = 1.5  # each look's round count over the last's


def look_schedule(max_repeats: int, confidence: float = CONFIDENCE) -> list[int]:
    """The round counts to look at: the first where an order-statistic interval can reach its
    per-look level, then x GROWTH, ending at max_repeats. The count of looks and the first look
    depend on each other (more looks, a stricter level, more runs before the first); found by
    trying counts of looks until they agree."""
    for looks in range(1, 40):
        first = _fewest_runs((1 - confidence) / (looks + 1))
        schedule = [first]
        while schedule[-1] < max_repeats:
            schedule.append(min(max_repeats, max(schedule[-1] + 1, math.ceil(schedule[-1] * GROWTH))))
        if first >= max_repeats:
            schedule = [max_repeats]
        if len(schedule) <= looks:
            return schedule
    return [max_repeats]


def _fewest_runs(alpha: float) -> int:
    """The fewest runs whose min..max interval covers the median at 1 - alpha: 2 / 2^n <= alpha."""
    return max(2, math.ceil(math.log2(2 / alpha)))


@dataclass(frozen=True)
class Width:
    """One engine's median interval at a look."""

    runs: int
    median: float
    low: float
    high: float
    level: float

    @property
    def width_pct(self) -> float:
        return 100.0 * (self.high - self.low) / self.median if self.median > 0 else math.inf

    def as_dict(self) -> dict:
        return {
            "repeats": self.runs,
            "median": self.median,
            "low": self.low,
            "high": self.high,
            "level": self.level,
            "width_pct": round(self.width_pct, 3),
        }


@dataclass(frozen=True)
class SequentialRule:
    """--repeats auto's rule: the looks, their level, and whether every engine is narrow enough."""

    target_width_pct: float
    max_repeats: int
    confidence: float = CONFIDENCE

    @property
    def looks(self) -> list[int]:
        return look_schedule(self.max_repeats, self.confidence)

    @property
    def per_look_confidence(self) -> float:
        return 1 - (1 - self.confidence) / (len(self.looks) + 1)  # + a budget's look

    def width(self, values: Sequence[float]) -> Width | None:
        data = sorted(v for v in values if v is not None and math.isfinite(v))
        if len(data) < 2:
            return None
        low, high, level = median_interval(data, self.per_look_confidence)
        n = len(data)
        median = data[n // 2] if n % 2 else (data[n // 2 - 1] + data[n // 2]) / 2
        return Width(n, median, low, high, level)

    def narrow(self, widths: dict[str, Width | None]) -> bool:
        return bool(widths) and all(w is not None and w.width_pct < self.target_width_pct for w in widths.values())
