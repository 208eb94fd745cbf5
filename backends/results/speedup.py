"""An engine's speed-up over the reference, with a distribution-free interval from the repeats.

Repeat i of every engine runs in the same round of the fair order (A B C, C B A, ...), so a
slow minute of a shared machine falls on both runs of a pair. The speed-up is the median of the
per-repeat ratios (the reference's median ITL over the engine's, both of repeat i), and its
interval is that median's order-statistic interval, the one every table uses (stats.Summary):
distribution-free, at its true level for the number of pairs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .records import RunRecord
from .stats import summarize
from .summary import is_measured


@dataclass(frozen=True)
class Ratio:
    median: float
    low: float  # nan under two pairs (no interval)
    high: float
    level: float  # the interval's true confidence level (0.938 = 93.8%)
    n: int  # pairs of runs

    @property
    def has_interval(self) -> bool:
        return self.n >= 2 and not math.isnan(self.low)

    def overlaps(self, other: Ratio) -> bool:
        """True when the two intervals share a value, or either has none (nothing tells them apart)."""
        if not (self.has_interval and other.has_interval):
            return True
        return self.low <= other.high and other.low <= self.high

    def text(self, digits: int = 2) -> str:
        """'2.34x [2.10–2.61]'."""
        head = f"{self.median:.{digits}f}x"
        return head + (f" [{self.low:.{digits}f}–{self.high:.{digits}f}]" if self.has_interval else "")


def _per_repeat(runs: Sequence[RunRecord], backend: str, metric: str) -> dict[tuple[int, int, int], float]:
    """{(prompt tokens, new tokens, repeat): the metric} of the engine's measured runs."""
    out = {}
    for run in runs:
        value = getattr(run, metric)
        if run.backend == backend and is_measured(run) and value is not None and value > 0:
            out[(run.prompt_tokens, run.new_tokens, run.repeat)] = float(value)
    return out


def speedup(runs: Sequence[RunRecord], backend: str, reference: str, metric: str = "ms_per_token") -> Ratio | None:
    """`backend`'s speed-up over `reference` (ratios of a time metric: reference / engine), paired by
    repeat; None when no repeat has a measured run of both."""
    mine, theirs = _per_repeat(runs, backend, metric), _per_repeat(runs, reference, metric)
    ratios = [theirs[key] / mine[key] for key in sorted(mine.keys() & theirs.keys())]
    if not ratios:
        return None
    s = summarize(ratios)
    return Ratio(s.median, s.median_ci_low, s.median_ci_high, s.median_ci_level, s.n)
