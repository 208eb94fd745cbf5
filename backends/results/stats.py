"""Latency metrics with vLLM's definitions, and summaries across repeats.

TTFT: request start to first token (prefill included). ITL: each gap between consecutive
tokens (TTFT is never one of them). TPOT = (e2e - TTFT) / (N - 1). Decode tokens/s = (N - 1) /
(e2e - TTFT), where e2e ends at the last token.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


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
    p50, p90, p99 = np.percentile(itl, [50, 90, 99]) if itl.size else (math.nan,) * 3
    return RunMetrics(n, ttft_ms, e2e_s, tpot_ms, tuple(itl.tolist()), float(p50), float(p90), float(p99), tok_s)


def first_step_tokens(steps: Sequence[int | None]) -> int | None:
    """How many tokens a stream's first step made, where its steps show a step making several (a
    server's event, a speculative pass); None where each token is its own step or a step is unknown."""
    if not steps or None in steps or len(set(steps)) == len(steps):
        return None
    return sum(step == steps[0] for step in steps)


def ms_per_token(
    itl_p50_ms: float | None,
    tpot_ms: float | None,
    multi_token_steps: bool,
    tokens: int | None = None,
    decoded: int | None = None,
) -> float | None:
    """A run's ms per decoded token: its median inter-token gap, robust to a slow step; for an engine
    that makes several tokens per step (speculative decoding), whose tokens arrive in bursts and whose
    median gap falls inside one, the time from its first token to its last over the `decoded` tokens
    made after the first token's step (its TPOT when that step made one; of `tokens` in all). None
    when the first step made them all: nothing was decoded after it."""
    if not multi_token_steps:
        return itl_p50_ms
    if tpot_ms is None or tokens is None or decoded is None:
        return tpot_ms  # a record from before `decoded_tokens`
    return tpot_ms * (tokens - 1) / decoded if decoded > 0 else None


def decode_rate(metrics: RunMetrics, multi_token_steps: bool, decoded: int) -> tuple[float | None, float | None]:
    """(ms per decoded token, decoded tokens/s) of a run from its stamps, as its record gives them:
    for an engine whose steps make one token, its median gap and vLLM's (N - 1) / (e2e - TTFT); for
    one whose steps make several, over the `decoded` tokens made after the first token's step."""
    if not multi_token_steps:
        return finite(metrics.itl_p50_ms), finite(metrics.decode_tok_s)
    per_token = ms_per_token(None, finite(metrics.tpot_ms), True, metrics.tokens, min(decoded, metrics.tokens - 1))
    return per_token, (1e3 / per_token if per_token else None)


def finite(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


@dataclass(frozen=True)
class Summary:
    """A metric across repeats. The figure shown is the median, with the median's own interval:
    distribution-free, from order statistics (the k-th smallest and k-th largest values, k the
    largest for which the binomial coverage is still >= 95%). Coverage only takes the values the
    binomial allows. With 2-8 repeats no narrower pair than min..max reaches 95%, so the interval
    is min..max, and `median_ci_level` says what it covers: 50%, 75%, 87.5%, 93.8% with 2-5
    repeats, 96.9%, 98.4%, 99.2% with 6-8; from 9 repeats it is narrower (96.1% at 9). The mean
    keeps its Student t 95% interval, for whoever reads the mean."""

    n: int
    median: float
    median_ci_low: float  # interval of the median (order statistics); nan with one value
    median_ci_high: float
    median_ci_level: float  # its exact confidence level (0.969 = 96.9%)
    mean: float
    mean_ci95_low: float  # 95% interval of the mean (Student t)
    mean_ci95_high: float
    p90: float
    p99: float
    std: float
    min: float
    max: float


def summarize(values: Sequence[float | None]) -> Summary:
    data = np.sort(np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=np.float64))
    nan = math.nan
    if data.size == 0:
        return Summary(0, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan)
    n = int(data.size)
    mean = float(data.mean())
    std = float(data.std(ddof=1)) if n > 1 else 0.0
    half = t95(n - 1) * std / math.sqrt(n) if n > 1 else nan
    low, high, level = median_interval(data)
    p90, p99 = np.percentile(data, [90, 99])
    return Summary(
        n,
        float(np.median(data)),
        low,
        high,
        level,
        mean,
        mean - half,
        mean + half,
        float(p90),
        float(p99),
        std,
        float(data[0]),
        float(data[-1]),
    )


def median_interval(
    sorted_values: Sequence[float] | np.ndarray, confidence: float = 0.95
) -> tuple[float, float, float]:
    """(low, high, level): the order-statistic interval for the median of sorted values (see
    `median_interval_rank`); nan with fewer than two values."""
    n = len(sorted_values)
    if n < 2:
        return math.nan, math.nan, math.nan
    k, level = median_interval_rank(n, confidence)
    return float(sorted_values[k - 1]), float(sorted_values[n - k]), level


def median_interval_rank(n: int, confidence: float = 0.95) -> tuple[int, float]:
    """(k, level) of the interval [x_(k), x_(n+1-k)] for the median of n >= 2 values.

    It covers the median with probability 1 - 2 P(B <= k - 1), B ~ Binomial(n, 1/2), whatever the
    distribution (continuous). k is the largest whose coverage is >= `confidence`; when none is
    (n <= 8 for 95%), k = 1: min..max, at its own level (below 95% up to 5 values, above from 6)."""
    k, level = 1, median_interval_level(n, 1)
    tail, term = 1, 1  # sum of C(n, i) for i < candidate; C(n, candidate - 1)
    for candidate in range(2, n // 2 + 1):
        term = term * (n - candidate + 2) // (candidate - 1)
        tail += term
        coverage = 1 - 2 * tail / 2**n
        if coverage < confidence:
            break
        k, level = candidate, coverage
    return k, level


def median_interval_level(n: int, k: int) -> float:
    """Coverage of [x_(k), x_(n+1-k)] for the median of n values: 1 - 2 P(Binomial(n, 1/2) < k)."""
    return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n


def t95(degrees_of_freedom: float) -> float:
    """Two-sided 95% Student t critical value (the 0.975 quantile) for any degrees of freedom."""
    return t_quantile(0.975, degrees_of_freedom)


def t_quantile(q: float, df: float) -> float:
    """Quantile of Student's t distribution, to ~1e-12: bisection on the exact CDF (the
    regularized incomplete beta function, by its continued fraction)."""
    if not df > 0 or not 0 < q < 1:
        return math.nan
    if q == 0.5:
        return 0.0
    if q < 0.5:
        return -t_quantile(1 - q, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < q:
        low, high = high, high * 2
    for _ in range(200):
        middle = (low + high) / 2
        if t_cdf(middle, df) < q:
            low = middle
        else:
            high = middle
        if high - low <= 1e-13 * high:
            break
    return (low + high) / 2


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom."""
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2, 0.5, x)  # P(T > |t|)
    return 1 - tail if t >= 0 else tail


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) (Numerical Recipes' continued fraction, Lentz)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1) / (a + b + 2):
        return 1 - _betainc(b, a, 1 - x)
    tiny = 1e-300
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 10_000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return front * result / a


def agreement(reference: Sequence[int], tokens: Sequence[int]) -> tuple[int, int | None]:
    """(tokens equal to the reference before the first divergence, index of that divergence or None)."""
    for index, (a, b) in enumerate(zip(reference, tokens)):
        if a != b:
            return index, index
    same = min(len(reference), len(tokens))
    return same, (same if len(reference) != len(tokens) else None)


def pooled_summary(values: Sequence[float]) -> Summary:
    """Values pooled from many runs (every inter-token gap): n, median (p50), mean, p90, p99, std,
    min, max. No intervals: gaps of one run are not independent draws."""
    data = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=np.float64)
    nan = math.nan
    if data.size == 0:
        return Summary(0, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan)
    p50, p90, p99 = np.percentile(data, [50, 90, 99])
    return Summary(
        int(data.size),
        float(p50),
        nan,
        nan,
        nan,
        float(data.mean()),
        nan,
        nan,
        float(p90),
        float(p99),
        float(data.std(ddof=1)) if data.size > 1 else 0.0,
        float(data.min()),
        float(data.max()),
    )
