"""Latency metrics with vLLM's definitions, and summaries across repeats.

TTFT: request start to first token (prefill included). ITL: each gap between consecutive
tokens (TTFT is never one of them). TPOT = (e2e - TTFT) / (N - 1). Decode tokens/s = (N - 1) /
(e2e - TTFT), where e2e ends at the last token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

# Two-sided 95% Student t critical values for 1..30 degrees of freedom; 1.96 beyond.
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042]


@dataclass(frozen=True)
class RunMetrics:
    tokens: int
    ttft_ms: float
    e2e_s: float
    tpot_ms: float  # nan with a single token
    itl_ms: tuple[float, ...]
    itl_p50_ms: float
    itl_p90_ms: float
    itl_p99_ms: float
    decode_tok_s: float


def run_metrics(start_ns: int, token_ns: Sequence[int]) -> RunMetrics:
    """Metrics of one run from its request start and its token timestamps (monotonic ns)."""
    if not token_ns:
        nan = math.nan
        return RunMetrics(0, nan, nan, nan, (), nan, nan, nan, nan)
    stamps = np.asarray(token_ns, dtype=np.int64)
    ttft_ms = (stamps[0] - start_ns) / 1e6
    e2e_s = (stamps[-1] - start_ns) / 1e9
    itl = np.diff(stamps) / 1e6
    n = len(stamps)
    decode_s = (stamps[-1] - stamps[0]) / 1e9
    tpot_ms = decode_s * 1e3 / (n - 1) if n > 1 else math.nan
    tok_s = (n - 1) / decode_s if n > 1 and decode_s > 0 else math.nan
    p50, p90, p99 = (np.percentile(itl, [50, 90, 99]) if itl.size else (math.nan,) * 3)
    return RunMetrics(n, ttft_ms, e2e_s, tpot_ms, tuple(itl.tolist()), float(p50), float(p90), float(p99), tok_s)


@dataclass(frozen=True)
class Summary:
    """A metric across repeats."""

    n: int
    median: float
    mean: float
    p90: float
    p99: float
    std: float
    ci95_low: float  # 95% confidence interval of the mean (Student t)
    ci95_high: float
    min: float
    max: float

    @property
    def spread_pct(self) -> float:
        """Half the 95% interval relative to the mean: '+-x%'."""
        if self.n < 2 or not self.mean:
            return math.nan
        return 100 * (self.ci95_high - self.ci95_low) / 2 / abs(self.mean)


def summarize(values: Sequence[float]) -> Summary:
    data = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=np.float64)
    if data.size == 0:
        nan = math.nan
        return Summary(0, nan, nan, nan, nan, nan, nan, nan, nan, nan)
    mean = float(data.mean())
    std = float(data.std(ddof=1)) if data.size > 1 else 0.0
    half = t95(data.size - 1) * std / math.sqrt(data.size) if data.size > 1 else math.nan
    p90, p99 = np.percentile(data, [90, 99])
    return Summary(int(data.size), float(np.median(data)), mean, float(p90), float(p99), std,
                   mean - half, mean + half, float(data.min()), float(data.max()))


def t95(degrees_of_freedom: int) -> float:
    if degrees_of_freedom < 1:
        return math.nan
    return _T95[degrees_of_freedom - 1] if degrees_of_freedom <= len(_T95) else 1.96


def agreement(reference: Sequence[int], tokens: Sequence[int]) -> tuple[int, int | None]:
    """(tokens equal to the reference before the first divergence, index of that divergence or None)."""
    for index, (a, b) in enumerate(zip(reference, tokens)):
        if a != b:
            return index, index
    same = min(len(reference), len(tokens))
    return same, (same if len(reference) != len(tokens) else None)
