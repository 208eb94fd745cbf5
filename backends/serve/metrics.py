"""The server's own figures as Prometheus text, under vLLM's names.

The latency histograms carry vLLM's names (backends/server_metrics.py holds them), so the
`remote` engine's cross-check, a vLLM dashboard and the window's Serve tab all read this server as
they read vLLM. TTFT counts from the request's arrival (queueing included, as vLLM's does) to the
worker's stamp of the first token; each inter-token gap is between two tokens' worker stamps (one
clock, `perf_counter_ns`, shared by every process). The latency buckets start below vLLM's (a tiny
model decodes in well under its first 10 ms bucket) and are finer (steps of at most 20%), so that a
percentile read from them is close: the Serve tab shows its bucket.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field

from ..server_metrics import (
    E2E_METRIC,
    GENERATION_TOKENS_METRIC,
    ITL_METRICS,
    PROMPT_TOKENS_METRIC,
    QUEUE_TIME_METRIC,
    RUNNING_METRIC,
    SUCCESS_METRIC,
    TTFT_METRICS,
    WAITING_METRIC,
)

# Within each power of ten: steps of at most 20%. The Serve tab's p50 is an estimate inside the
# bucket its rank falls in (Prometheus's histogram_quantile): with vLLM's coarser buckets, 100
# requests of 110 ms read 175 ms (linear inside 100-250 ms); here they read 105 ms, bucket 100-110 ms.
_STEPS = (1.0, 1.1, 1.2, 1.3, 1.5, 1.7, 2.0, 2.2, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0)


def _buckets(low: float, high: float) -> tuple[float, ...]:
    """Every step times a power of ten from `low` to `high` (seconds), rounded to plain decimals."""
    out = (round(step * 10.0**exp, 12) for exp in range(-6, 4) for step in _STEPS)
    return tuple(b for b in out if low <= b <= high)


TTFT_BUCKETS = _buckets(0.0001, 200.0)
ITL_BUCKETS = _buckets(0.00005, 5.0)
REQUEST_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
)
REQUESTS_METRIC = "whistle_stop:http_requests_total"  # every completion request, by HTTP status
RESTARTS_METRIC = "whistle_stop:worker_restarts_total"
REJECTED_METRIC = "whistle_stop:requests_rejected_total"  # 503s: queue full or shutting down
WORKERS_METRIC = "whistle_stop:workers_serving"


@dataclass
class _Histogram:
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.total += seconds
        self.count += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out, cumulative = [], 0
        for bound, count in zip((*self.bounds, None), self.counts):
            cumulative += count
            le = "+Inf" if bound is None else repr(float(bound))
            out.append(f'{name}_bucket{{{labels},le="{le}"}} {cumulative}')
        out.append(f"{name}_sum{{{labels}}} {self.total!r}")
        out.append(f"{name}_count{{{labels}}} {self.count}")
        return out


class ServeMetrics:
    """Thread-safe: worker slots observe, the event loop counts and renders."""

    def __init__(self, model_name: str) -> None:
        escaped = model_name.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")
        self.labels = f'model_name="{escaped}"'
        self._lock = threading.Lock()
        self._ttft = _Histogram(TTFT_BUCKETS)
        self._itl = _Histogram(ITL_BUCKETS)
        self._e2e = _Histogram(REQUEST_BUCKETS)
        self._queue = _Histogram(REQUEST_BUCKETS)
        self._finished: dict[str, int] = {}
        self._statuses: dict[int, int] = {}
        self._rejected: dict[str, int] = {}
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.restarts = 0

    def first_token(self, seconds: float) -> None:
        with self._lock:
            self._ttft.observe(seconds)

    def gap(self, seconds: float) -> None:
        with self._lock:
            self._itl.observe(seconds)

    def finished(self, reason: str, queue_s: float, e2e_s: float, prompt_tokens: int, tokens: int) -> None:
        """A request that reached a worker, however it ended ("length", "stop", "abort", "error")."""
        with self._lock:
            self._finished[reason] = self._finished.get(reason, 0) + 1
            self._queue.observe(queue_s)
            self._e2e.observe(e2e_s)
            self.prompt_tokens += prompt_tokens
            self.generation_tokens += tokens

    def answered(self, status: int) -> None:
        with self._lock:
            self._statuses[status] = self._statuses.get(status, 0) + 1

    def rejected(self, reason: str) -> None:
        with self._lock:
            self._rejected[reason] = self._rejected.get(reason, 0) + 1

    def restarted(self) -> None:
        with self._lock:
            self.restarts += 1

    def render(self, running: int, waiting: int, serving: int) -> str:
        """The Prometheus text exposition (format 0.0.4)."""
        lb = self.labels
        out: list[str] = []

        def metric(name: str, kind: str, help_text: str, rows: list[str]) -> None:
            out.extend((f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *rows))

        with self._lock:
            metric(
                RUNNING_METRIC, "gauge", "Requests on an engine worker now.", [f"{RUNNING_METRIC}{{{lb}}} {running}"]
            )
            metric(WAITING_METRIC, "gauge", "Requests waiting in the queue.", [f"{WAITING_METRIC}{{{lb}}} {waiting}"])
            metric(
                WORKERS_METRIC, "gauge", "Engine workers loaded and serving.", [f"{WORKERS_METRIC}{{{lb}}} {serving}"]
            )
            metric(
                TTFT_METRICS[0],
                "histogram",
                "Time to first token: arrival to the first token's stamp.",
                self._ttft.lines(TTFT_METRICS[0], lb),
            )
            metric(
                ITL_METRICS[0],
                "histogram",
                "Inter-token latency: the gap between two tokens' stamps.",
                self._itl.lines(ITL_METRICS[0], lb),
            )
            metric(E2E_METRIC, "histogram", "Arrival to the last token.", self._e2e.lines(E2E_METRIC, lb))
            metric(
                QUEUE_TIME_METRIC,
                "histogram",
                "Arrival to the start on a worker.",
                self._queue.lines(QUEUE_TIME_METRIC, lb),
            )
            metric(
                SUCCESS_METRIC,
                "counter",
                "Requests that reached a worker, by how they finished.",
                [f'{SUCCESS_METRIC}{{{lb},finished_reason="{r}"}} {n}' for r, n in sorted(self._finished.items())],
            )
            metric(
                PROMPT_TOKENS_METRIC,
                "counter",
                "Prompt tokens of the requests served.",
                [f"{PROMPT_TOKENS_METRIC}{{{lb}}} {self.prompt_tokens}"],
            )
            metric(
                GENERATION_TOKENS_METRIC,
                "counter",
                "Tokens generated.",
                [f"{GENERATION_TOKENS_METRIC}{{{lb}}} {self.generation_tokens}"],
            )
            metric(
                REQUESTS_METRIC,
                "counter",
                "Completion requests answered, by HTTP status.",
                [f'{REQUESTS_METRIC}{{{lb},status="{s}"}} {n}' for s, n in sorted(self._statuses.items())],
            )
            metric(
                REJECTED_METRIC,
                "counter",
                "Requests refused with 503 (queue full, shutting down).",
                [f'{REJECTED_METRIC}{{{lb},reason="{r}"}} {n}' for r, n in sorted(self._rejected.items())],
            )
            metric(
                RESTARTS_METRIC,
                "counter",
                "Engine workers started again after a crash or a hang.",
                [f"{RESTARTS_METRIC}{{{lb}}} {self.restarts}"],
            )
        return "\n".join(out) + "\n"
