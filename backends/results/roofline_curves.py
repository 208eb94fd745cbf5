"""Prefill's roofline against prompt length, for a sweep's chart: one dashed curve per arithmetic.

Computed where the sweep runs (it knows the model, the engines' arithmetic and bytes, the peaks and
the bandwidth) and kept in environment.json, so the window and a later `report` draw the same curve
from the folder alone.
"""

from __future__ import annotations

from ..gpt2_config import GPT2Config
from ..machine.bandwidth import on_gpu
from ..machine.compute_peak import ComputePeaks
from .roofline import Arithmetic, Roofline, arithmetic_of, prefill_bytes, prefill_flops

ENVIRONMENT_KEY = "prefill_roofline"


def curve_lengths(lengths: list[int], context: int) -> list[int]:
    """The sweep's prompt lengths and the powers of two between them (a smooth curve), within the context."""
    top = max(lengths, default=1)
    powers = [1 << i for i in range(11) if (1 << i) <= top]
    return sorted({n for n in [*lengths, *powers] if 1 <= n <= context})


def prefill_curves(
    config: GPT2Config,
    engines: dict[str, dict],
    peaks: ComputePeaks | None,
    gb_s: float | None,
    lengths: list[int],
    gpu_peaks: ComputePeaks | None = None,
    gpu_gb_s: float | None = None,
) -> list[dict]:
    """One curve per device and arithmetic of the engines: [{"device", "arithmetic", "peak_arithmetic",
    "peak_gops", "isa", "engines", "points": [[tokens, ms], ...]}]. An engine on the host is held to the
    CPU's peaks and bandwidth, one on a GPU to its GPU's (none without them); an engine without bytes
    (a remote server's machine, the null engine) to none. Each curve's bytes are its engines' fewest
    (the bound of them all)."""
    limits = {"cpu": (peaks, gb_s), "cuda": (gpu_peaks, gpu_gb_s)}
    groups: dict[tuple[str, str], list[tuple[str, dict]]] = {}
    for name, info in engines.items():
        if not float(info.get("weight_bytes_per_token") or 0):
            continue
        device = "cuda" if on_gpu(str(info.get("device") or "cpu")) else "cpu"
        own = arithmetic_of(str(info.get("prefill_arithmetic", "")), str(info.get("precision", "")))
        groups.setdefault((device, own.value), []).append((name, info))
    curves = []
    for (device, arithmetic), members in groups.items():
        device_peaks, device_gb_s = limits[device]
        found = device_peaks.peak(Arithmetic(arithmetic)) if device_peaks is not None else None
        if found is None:
            continue
        held_by, peak = found
        weights = min(float(info.get("weight_bytes_per_token") or 0) for _, info in members)
        kv = min(float(info.get("kv_bytes_per_position") or 0) for _, info in members)
        points = []
        for n in curve_lengths(lengths, config.n_positions):
            roofline = Roofline(prefill_flops(config, n), prefill_bytes(weights, kv, n), peak.gops, device_gb_s or 0)
            points.append([n, round(roofline.ms, 4)])
        curves.append(
            {
                "device": device,
                "arithmetic": arithmetic,
                "peak_arithmetic": held_by.value,
                "peak_gops": peak.gops,
                "isa": peak.isa,
                "engines": [name for name, _ in members],
                "points": points,
            }
        )
    return curves
