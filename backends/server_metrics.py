"""A server's own latency figures, from its Prometheus `/metrics`, beside the client's (and the
client's gaps between a stream's chunks, pooled as vLLM's serving benchmark pools its ITL).

vLLM exports histograms of time to first token and inter-token latency. Their `_sum` and
`_count` before and after a run give the server's own mean TTFT and ITL for that run; set beside
whistle-stop's figures (stamped in the worker as tokens arrive), the difference is what HTTP,
server-sent events and the network add.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Names by vLLM version: the inter-token histogram was time_per_output_token before 0.10.
TTFT_METRICS = ("vllm:time_to_first_token_seconds",)
ITL_METRICS = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
# vLLM's other names, which `whistle-stop serve` exports too (backends/serve/metrics.py).
E2E_METRIC = "vllm:e2e_request_latency_seconds"
QUEUE_TIME_METRIC = "vllm:request_queue_time_seconds"
RUNNING_METRIC = "vllm:num_requests_running"
WAITING_METRIC = "vllm:num_requests_waiting"
SUCCESS_METRIC = "vllm:request_success_total"
PROMPT_TOKENS_METRIC = "vllm:prompt_tokens_total"
GENERATION_TOKENS_METRIC = "vllm:generation_tokens_total"
# vLLM's speculative decoding counters (V1): verify steps, tokens proposed, tokens kept
SPEC_METRICS = (
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
)
CROSS_CHECK_PREFIX = "server's own /metrics"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LE = re.compile(r'le="([^"]+)"')


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
class SpecCounters:
    """vLLM's speculative decoding counters at one moment (cumulative)."""

    drafts: float  # verify steps that checked proposals
    draft_tokens: float
    accepted_tokens: float

    def minus(self, before: SpecCounters) -> SpecCounters:
        return SpecCounters(
            self.drafts - before.drafts,
            self.draft_tokens - before.draft_tokens,
            self.accepted_tokens - before.accepted_tokens,
        )


@dataclass(frozen=True)
class ServerMetrics:
    """The histograms a cross-check needs, at one moment (None where the server has none)."""

    ttft: HistogramTotals | None
    itl: HistogramTotals | None
    spec: SpecCounters | None = None  # where the server speculates (vLLM with a speculative config)


def parse(text: str) -> ServerMetrics:
    found = samples(text)

    def first(names: tuple[str, ...]) -> HistogramTotals | None:
        for name in names:
            count = value(found, name + "_count")
            if count is not None:
                return HistogramTotals(value(found, name + "_sum") or 0.0, count)
        return None

    counts = [value(found, name) for name in SPEC_METRICS]
    spec = SpecCounters(*(c or 0.0 for c in counts)) if any(c is not None for c in counts) else None
    return ServerMetrics(first(TTFT_METRICS), first(ITL_METRICS), spec)


@dataclass(frozen=True)
class Histogram:
    """One histogram over all its label sets: cumulative counts per upper bound, ascending."""

    buckets: tuple[tuple[float, float], ...]  # (le, cumulative count), +Inf last
    total_s: float
    count: float

    def quantile(self, q: float) -> float:
        """Prometheus's histogram_quantile: linear inside the bucket the rank falls in (nan when empty)."""
        found = self._find(q)
        if found is None:
            return math.nan
        (lower, upper), below, inside, rank = found
        if math.isinf(upper):
            return lower  # above the last finite bound: its bound is all that is known
        return lower + (upper - lower) * ((rank - below) / inside if inside > 0 else 1.0)

    def bucket(self, q: float) -> tuple[float, float] | None:
        """The bounds (lower, upper] of the bucket the q-quantile's rank falls in: what the histogram
        knows of it (upper is inf above the last finite bound; None when empty)."""
        found = self._find(q)
        return None if found is None else found[0]

    def _find(self, q: float) -> tuple[tuple[float, float], float, float, float] | None:
        """((lower, upper], the count below it, the count inside it, the rank) of the bucket the
        q-quantile's rank falls in; None when empty."""
        if self.count <= 0 or not self.buckets:
            return None
        rank = q * self.count
        lower, below = 0.0, 0.0
        for upper, cumulative in self.buckets:
            if cumulative >= rank:
                return (lower, upper), below, cumulative - below, rank
            lower, below = upper, cumulative
        return (lower, math.inf), below, 0.0, rank


def samples(text: str) -> dict[str, list[tuple[str, float]]]:
    """Every sample of a Prometheus text page: name -> [(labels, value)]."""
    found: dict[str, list[tuple[str, float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        try:
            number = float(match.group(3))
        except ValueError:
            continue
        found.setdefault(match.group(1), []).append((match.group(2) or "", number))
    return found


def value(found: dict[str, list[tuple[str, float]]], name: str) -> float | None:
    """A counter or gauge summed over its label sets, or None when the page has none."""
    rows = found.get(name)
    return sum(v for _, v in rows) if rows else None


def histogram(found: dict[str, list[tuple[str, float]]], name: str) -> Histogram | None:
    """The histogram `name` with its buckets (label sets merged by bound), or None."""
    if name + "_count" not in found:
        return None
    bounds: dict[float, float] = {}
    for labels, count in found.get(name + "_bucket", []):
        match = _LE.search(labels)
        if match:
            bound = math.inf if match.group(1) in ("+Inf", "Inf") else float(match.group(1))
            bounds[bound] = bounds.get(bound, 0.0) + count
    return Histogram(
        tuple(sorted(bounds.items())), value(found, name + "_sum") or 0.0, value(found, name + "_count") or 0.0
    )


def settled(before: ServerMetrics, after: ServerMetrics, requests: int) -> bool:
    """True once the server has recorded a first token for each of `requests` new requests."""
    if before.ttft is None or after.ttft is None:
        return True  # nothing to wait for
    return after.ttft.count - before.ttft.count >= requests


def cross_check_note(
    before: ServerMetrics | None, after: ServerMetrics | None, client_ttft_ms: float, client_itl_ms: float
) -> str:
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


def chunk_gaps_ms(token_ns: Sequence[int], steps: Sequence[int | None]) -> list[float]:
    """The gaps between a stream's chunks, as vLLM's serving benchmark pools its ITL: a step's tokens
    (a server's event, a speculative pass) arrive as one chunk, so a gap runs from one step's first
    token to the next's; without steps (or any missing), each token is its own chunk."""
    if len(steps) != len(token_ns) or None in steps:
        return (np.diff(np.asarray(token_ns, dtype=np.int64)) / 1e6).tolist()
    arrivals = [t for i, t in enumerate(token_ns) if i == 0 or steps[i] != steps[i - 1]]
    return (np.diff(np.asarray(arrivals, dtype=np.int64)) / 1e6).tolist()
