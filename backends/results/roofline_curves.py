"""Prefill's roofline against prompt length, for a sweep's chart: one dashed curve per arithmetic.

Computed where the sweep runs (it knows the model, the engines' arithmetic and bytes, the peaks and
the bandwidth) and kept in environment.json, so the window and a later `report` draw the same curve
from the folder alone.
"""

from __future__ import annotations

from ..gpt2_config import GPT2Config
from .compute_peak import ComputePeaks
from .roofline import Arithmetic, Roofline, arithmetic_of, bounds_on_host, prefill_bytes, prefill_flops

ENVIRONMENT_KEY = "prefill_roofline"


def curve_lengths(lengths: list[int], context: int) -> list[int]:
    """The sweep's prompt lengths and the powers of two between them (a smooth curve), within the context."""
    top = max(lengths, default=1)
    powers = [1 << i for i in range(11) if (1 << i) <= top]
    return sorted({n for n in [*lengths, *powers] if 1 <= n <= context})


def prefill_curves(
    config: GPT2Config, engines: dict[str, dict], peaks: ComputePeaks | None, gb_s: float | None, lengths: list[int]
) -> list[dict]:
    """One curve per arithmetic of the engines on the host: [{"arithmetic", "peak_arithmetic",
    "peak_gops", "isa", "engines", "points": [[tokens, ms], ...]}]. Each curve's bytes are its
    engines' fewest (the bound of them all); [] without peaks."""
    if peaks is None:
        return []
    groups: dict[str, list[tuple[str, dict]]] = {}
    for name, info in engines.items():
        if not bounds_on_host(str(info.get("device", "cpu")), float(info.get("weight_bytes_per_token") or 0)):
            continue
        own = arithmetic_of(str(info.get("prefill_arithmetic", "")), str(info.get("precision", "")))
        groups.setdefault(own.value, []).append((name, info))
    curves = []
    for arithmetic, members in groups.items():
        found = peaks.peak(Arithmetic(arithmetic))
        if found is None:
            continue
        held_by, peak = found
        weights = min(float(info.get("weight_bytes_per_token") or 0) for _, info in members)
        kv = min(float(info.get("kv_bytes_per_position") or 0) for _, info in members)
        points = [
            [n, round(Roofline(prefill_flops(config, n), prefill_bytes(weights, kv, n), peak.gops, gb_s or 0).ms, 4)]
            for n in curve_lengths(lengths, config.n_positions)
        ]
        curves.append(
            {
                "arithmetic": arithmetic,
                "peak_arithmetic": held_by.value,
                "peak_gops": peak.gops,
                "isa": peak.isa,
                "engines": [name for name, _ in members],
                "points": points,
            }
        )
    return curves
