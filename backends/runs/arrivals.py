"""Open-loop arrivals: when each request of a `--request-rate` level is sent.

vLLM's `bench serve` defines them: the gaps between requests are drawn from a gamma distribution
with shape = burstiness and mean 1/rate (scale = 1 / (rate * burstiness)). Burstiness 1 is a
Poisson process (exponential gaps); below 1 the requests come in bursts, above 1 more evenly. An
infinite rate sends every request at once. The draws come from one seeded generator, so a level's
schedule is the same in every run with the same seed, and the first request goes at 0 (vLLM
sleeps a gap after each request; the schedule here is those cumulative sleeps, the first one
moved to the front so that every level starts when its first request is sent).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import numpy as np

from ..errors import UsageError

MAX_RATE_REQUESTS = 1_000  # the worker holds one thread per request in flight


class RateMode(Enum):
    """How `--request-rate` was given: a list of rates (inf among them), or a sweep up to saturation."""

    LIST = "list"
    SWEEP = "sweep"


@dataclass(frozen=True)
class RateSpec:
    """--request-rate, typed: the rates (req/s, math.inf for all at once) or a sweep; --burstiness;
    --rate-requests (requests per rate)."""

    mode: RateMode = RateMode.LIST
    rates: tuple[float, ...] = ()
    burstiness: float = 1.0
    requests: int = 20

    @property
    def set(self) -> bool:
        return self.mode == RateMode.SWEEP or bool(self.rates)

    def validate(self) -> RateSpec:
        if any(not (r > 0) for r in self.rates):  # NaN fails too
            raise UsageError(f"--request-rate rates must be > 0 (or inf), got {list(self.rates)}")
        if not (math.isfinite(self.burstiness) and self.burstiness > 0):
            raise UsageError(f"--burstiness must be a number > 0, got {self.burstiness}")
        if not 1 <= self.requests <= MAX_RATE_REQUESTS:
            raise UsageError(f"--rate-requests must be 1 to {MAX_RATE_REQUESTS}, got {self.requests}")
        return self

    def record(self) -> dict:
        """environment.json's settings: inf written as the string "inf" (JSON has no infinity)."""
        return {
            "mode": self.mode.value,
            "rates": [rate_label(r) for r in self.rates],
            "burstiness": self.burstiness,
            "requests": self.requests,
        }


def parse_request_rate(text: str) -> RateSpec:
    """`R[,R2,...]`, `inf` or `sweep` (the burstiness and request count are set apart)."""
    words = [w.strip().lower() for w in text.split(",") if w.strip()]
    if words == ["sweep"]:
        return RateSpec(RateMode.SWEEP)
    if not words or "sweep" in words:
        raise UsageError(f"--request-rate takes R[,R2,...] (req/s), inf or sweep, not {text!r}")
    rates = []
    for word in words:
        try:
            rates.append(float(word))
        except ValueError:
            raise UsageError(f"--request-rate: {word!r} is not a rate in req/s (or inf, or sweep)") from None
    return RateSpec(RateMode.LIST, tuple(sorted(set(rates)))).validate()


def rate_label(rate: float) -> str:
    """A rate as the files and tables write it: "inf" or its number."""
    return "inf" if math.isinf(rate) else f"{rate:g}"


def arrival_offsets_ms(rate: float, requests: int, burstiness: float, seed: int) -> tuple[float, ...]:
    """When each of `requests` is sent, in ms after the first (0.0 first; all 0.0 at an infinite rate)."""
    if requests < 1:
        return ()
    if math.isinf(rate):
        return (0.0,) * requests
    rng = np.random.default_rng(seed)
    gaps_s = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=requests - 1)
    return (0.0, *(float(v) for v in np.cumsum(gaps_s) * 1000.0))


SWEEP_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)


def sweep_rates(batch1_e2e_s: float) -> tuple[float, ...]:
    """A sweep's ladder: multiples of one request at a time's rate (1 / the engine's level-1 median
    end-to-end time), from a quarter of it (an idle server) up to 32x; the sweep stops after the first
    rate the server does not keep up with."""
    if not (batch1_e2e_s > 0 and math.isfinite(batch1_e2e_s)):
        return (1.0, 2.0, 4.0, 8.0)
    base = 1.0 / batch1_e2e_s
    return tuple(float(f"{base * f:.3g}") for f in SWEEP_FACTORS)
