"""A server's own latency figures, from its Prometheus `/metrics`, beside the client's.

vLLM exports histograms of time to first token and inter-token latency. Their `_sum` and
`_count` before and after a run give the server's own mean TTFT and ITL for that run; set beside
whistle-stop's figures (stamped in the worker as tokens arrive), the difference is what HTTP,
server-sent events and the network add.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# Names by vLLM version: the inter-token histogram was time_per_output_token before 0.10.
TTFT_METRICS = ("vllm:time_to_first_token_seconds",)
ITL_METRICS = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
CROSS_CHECK_PREFIX = "server's own /metrics"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


@dataclass(frozen=True)
class HistogramTotals:
    """Sum (seconds) and count of one histogram, over all its label sets."""

    total_s: float
    count: float

    def minus(self, before: HistogramTotals) -> HistogramTotals:
        return HistogramTotals(self.total_s - before.total_s, self.count - before.count)

    @property
    def mean_ms(self) -> float:
        return self.total_s * 1e3 / self.count if self.count > 0 else math.nan


@dataclass(frozen=True)
class ServerMetrics:
    """The histograms a cross-check needs, at one moment (None where the server has none)."""

    ttft: HistogramTotals | None
    itl: HistogramTotals | None


def parse(text: str) -> ServerMetrics:
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, value = match.group(1), match.group(3)
        try:
            number = float(value)
        except ValueError:
            continue
        if name.endswith("_sum"):
            sums[name[:-4]] = sums.get(name[:-4], 0.0) + number
        elif name.endswith("_count"):
            counts[name[:-6]] = counts.get(name[:-6], 0.0) + number

    def first(names: tuple[str, ...]) -> HistogramTotals | None:
        for name in names:
            if name in counts:
                return HistogramTotals(sums.get(name, 0.0), counts[name])
        return None

    return ServerMetrics(first(TTFT_METRICS), first(ITL_METRICS))


def settled(before: ServerMetrics, after: ServerMetrics, requests: int) -> bool:
    """True once the server has recorded a first token for each of `requests` new requests."""
    if before.ttft is None or after.ttft is None:
        return True  # nothing to wait for
    return after.ttft.count - before.ttft.count >= requests


def cross_check_note(before: ServerMetrics | None, after: ServerMetrics | None, client_ttft_ms: float,
                     client_itl_ms: float) -> str:
    """One note: the server's own mean TTFT and ITL over the span, beside the client's means."""
    if before is None or after is None or before.ttft is None or after.ttft is None:
        return ""
    ttft = after.ttft.minus(before.ttft)
    parts = [f"TTFT {_ms(ttft.mean_ms)} (client {_ms(client_ttft_ms)})"]
    if before.itl is not None and after.itl is not None:
        itl = after.itl.minus(before.itl)
        parts.append(f"mean ITL {_ms(itl.mean_ms)} (client {_ms(client_itl_ms)})")
    return f"{CROSS_CHECK_PREFIX} over {ttft.count:.0f} request(s): " + ", ".join(parts)


def _ms(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.2f} ms"
