"""What the shared sampler costs per token over GPT-2's 50,257 logits, beside its floor.

    python -m scripts.sampler_probe [--rounds 7] [--logits 30]

Times `Sampler` for the usual settings on logits from flat (random weights) to peaked (a trained
model), median of `--rounds` rounds over `--logits` different vectors, and the floor any sampler
pays: max, subtract, float32 exp and one sum over the vocabulary. Run it alone (never beside a
benchmark): the figures are machine-wide.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

VOCAB = 50257
SETTINGS: dict[str, dict] = {
    "temperature 0.8": {"temperature": 0.8},
    "top-k 40": {"top_k": 40},
    "top-k 40 + top-p 0.95, t 0.8": {"top_k": 40, "top_p": 0.95, "temperature": 0.8},
    "top-p 0.9": {"top_p": 0.9},
    "top-p 0.95, t 0.8": {"top_p": 0.95, "temperature": 0.8},
}


def sample_logits(count: int, seed: int = 0) -> list[np.ndarray]:
    """`count` logit vectors, a third each at scale 0.5 (flat), 3 and 12 (peaked)."""
    rng = np.random.default_rng(seed)
    scales = (0.5, 3.0, 12.0)
    return [(rng.standard_normal(VOCAB) * scales[i % 3]).astype(np.float32) for i in range(count)]


def per_token_us(pick: Callable[[np.ndarray], object], logits: list[np.ndarray], rounds: int) -> float:
    """Median over rounds of the mean time per call, in microseconds (one warm-up round first)."""
    for vector in logits:
        pick(vector)
    times = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for vector in logits:
            pick(vector)
        times.append((time.perf_counter_ns() - start) / len(logits) / 1e3)
    return float(np.median(times))


def floor_pass(buffer: np.ndarray) -> Callable[[np.ndarray], float]:
    def run(logits: np.ndarray) -> float:
        np.subtract(logits, logits.max() - np.float32(64), out=buffer)  # as the sampler does: no subnormals
        np.exp(buffer, out=buffer)
        return float(buffer.sum())

    return run


def measure(rounds: int, count: int) -> dict[str, float]:
    from whistle_stop.backends.sampling import Sampler, SamplingParams

    logits = sample_logits(count)
    results = {"floor (max, subtract, exp, sum)": per_token_us(floor_pass(np.empty(VOCAB, np.float32)), logits, rounds)}
    for label, kwargs in SETTINGS.items():
        results[label] = per_token_us(Sampler(SamplingParams("sample", **kwargs)), logits, rounds)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--logits", type=int, default=30, help="different logit vectors per round")
    args = parser.parse_args(argv)
    for label, value in measure(args.rounds, args.logits).items():
        print(f"{label:34s} {value:7.0f} us/token")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
