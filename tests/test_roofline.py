"""Prefill's roofline: the FLOPs of a GPT-2 prefill (against a hand count), the bound's two sides,
which arithmetic an engine is held to, and the arithmetic peaks' probe and its record."""

from __future__ import annotations

import os

import pytest

from whistle_stop.backends.gpt2_config import GPT2Config
from whistle_stop.backends.kernels import native
from whistle_stop.backends.machine import compute_peak
from whistle_stop.backends.machine.compute_peak import ComputePeaks, Peak, faster_peaks
from whistle_stop.backends.machine.cpu import cpuinfo_field
from whistle_stop.backends.machine.isa import Isa, why_not
from whistle_stop.backends.results.roofline import (
    Arithmetic,
    Roofline,
    arithmetic_of,
    default_arithmetic,
    prefill_bytes,
    prefill_flops,
)
from whistle_stop.backends.results.roofline_curves import curve_lengths, prefill_curves
from whistle_stop.backends.sources.model_files import resolve_model

TINY = GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=50257, n_inner=256)


def test_a_tiny_prefill_counted_by_hand():
    """random:tiny, 10 tokens from position 0, multiply-adds:
    matrices per token and layer: qkv 64 x 192 + proj 64 x 64 + fc 64 x 256 + fc2 256 x 64 = 49,152.
    Layer 0, every token: 10 x 49,152 = 491,520. Layer 1 (the last): every token's keys and values,
    10 x 2 x 64 x 64 = 81,920, and the last token's query, proj, fc and fc2, 4,096 + 4,096 + 16,384 +
    16,384 = 40,960: 614,400 in all. Attention, 64 multiply-adds for q.k and 64 for p.v per key over
    the 4 heads of 16: layer 0's query t sees t keys (1..10, 55 in all), layer 1's one query 10:
    (55 + 10) x 128 = 8,320. lm_head for the last position: 64 x 50,257 = 3,216,448.
    FLOPs = 2 x 3,839,168."""
    assert prefill_flops(TINY, 10) == 2 * (614_400 + 8_320 + 3_216_448) == 7_678_336
    assert resolve_model("random:tiny").gpt2_config.n_inner == 256  # the config the count is of
    # from position 5: the same matrices; layer 0's queries each see 5 more keys (50), layer 1's one 5
    assert prefill_flops(TINY, 10, pos=5) - prefill_flops(TINY, 10) == 2 * (50 + 5) * 128
    # one token: every layer whole
    assert prefill_flops(TINY, 1) == 2 * (2 * 49_152 + 2 * 128 + 3_216_448)


def test_gpt2_prefill_is_about_8_gflop_at_50_tokens_and_attention_grows_with_the_square():
    gpt2 = GPT2Config(n_layer=12, n_head=12, n_embd=768, vocab_size=50257, n_inner=3072)
    assert prefill_flops(gpt2, 50) == pytest.approx(8.04e9, rel=0.01)
    # at 1,024 tokens causal attention, 2 x 2 x 768 x (1024 x 1025 / 2 x 11 + 1024) = 17.7 GFLOP, is a tenth
    per_token = 768 * 3 * 768 + 768 * 768 + 2 * 768 * 3072
    matrices = 2 * (1024 * 11 * per_token + 1024 * 2 * 768 * 768 + per_token - 2 * 768 * 768) + 2 * 768 * 50257
    attention = prefill_flops(gpt2, 1024) - matrices
    assert attention == 2 * 2 * 768 * (1024 * 1025 // 2 * 11 + 1024) == pytest.approx(17.74e9, rel=0.01)
    assert attention / prefill_flops(gpt2, 1024) == pytest.approx(0.10, abs=0.005)


def test_the_roofline_is_the_slower_of_compute_and_memory():
    compute_bound = Roofline(flops=8.6e9, bytes=132e6, peak_gops=900.0, gb_s=30.0)
    assert compute_bound.compute_ms == pytest.approx(9.556, rel=1e-3)
    assert compute_bound.memory_ms == pytest.approx(4.4)
    assert compute_bound.ms == compute_bound.compute_ms and compute_bound.bound == "compute"
    one_token = Roofline(flops=prefill_flops(TINY, 1), bytes=500e6, peak_gops=200.0, gb_s=25.0)
    assert one_token.bound == "memory" and one_token.ms == pytest.approx(20.0)
    assert prefill_bytes(100.0, 10.0, 5) == 150.0  # the weights once, the prompt's keys and values


def test_each_precision_is_held_to_its_fastest_arithmetic_unless_the_engine_says_otherwise():
    assert default_arithmetic("int4") is Arithmetic.INT8 and default_arithmetic("int8") is Arithmetic.INT8
    assert default_arithmetic("bf16") is Arithmetic.BF16
    assert default_arithmetic("f16") is Arithmetic.FP32 and default_arithmetic("fp32") is Arithmetic.FP32
    assert arithmetic_of("fp32", "bf16") is Arithmetic.FP32  # an engine that widens bf16 says so
    assert arithmetic_of("", "int4") is Arithmetic.INT8


PEAKS = ComputePeaks(
    peaks={"fp32": {"gops": 200.0, "median_gops": 190.0, "isa": "avx2 vfmadd231ps ymm"}},
    threads=2,
    passes=1,
    cpu="test",
    measured_at="now",
)


def test_an_arithmetic_the_cpu_has_no_instructions_for_is_held_to_fp32s_peak():
    assert PEAKS.peak(Arithmetic.BF16) == (Arithmetic.FP32, Peak(200.0, 190.0, "avx2 vfmadd231ps ymm"))
    assert ComputePeaks().peak(Arithmetic.FP32) is None
    assert "fp32 200 G/s (avx2 vfmadd231ps ymm)" in PEAKS.as_dict()["label"]


def test_a_refresh_keeps_the_faster_peak_of_the_same_instructions():
    slow = {"gops": 100.0, "median_gops": 90.0, "isa": "avx2 vfmadd231ps ymm"}
    new = ComputePeaks(peaks={"fp32": slow, "int8": {"gops": 50.0, "median_gops": 50.0, "isa": "avx2 x"}})
    old = ComputePeaks(peaks={"fp32": PEAKS.peaks["fp32"], "int8": {"gops": 99.0, "median_gops": 1.0, "isa": "y"}})
    merged = faster_peaks(new, old)
    assert merged.peaks["fp32"]["gops"] == 200.0  # a busy pass only ever lowers a peak
    assert merged.peaks["int8"]["gops"] == 50.0  # other instructions (a new build): the new figure
    # what this probe read stays with each: a slower phase now shows beside the machine's best
    assert merged.peaks["fp32"]["probed_gops"] == 100.0 and merged.peaks["int8"]["probed_gops"] == 50.0
    assert merged.peak(Arithmetic.FP32)[1].probed_gops == 100.0


def test_the_sweep_curve_holds_each_arithmetic_to_its_engines_fewest_bytes():
    engines = {
        "a": {"precision": "fp32", "prefill_arithmetic": "fp32", "weight_bytes_per_token": 4e6, "device": "cpu"},
        "b": {"precision": "fp32", "prefill_arithmetic": "", "weight_bytes_per_token": 2e6, "device": "cpu"},
        "gpu": {"precision": "fp32", "weight_bytes_per_token": 1, "device": "cuda:0"},
        # a server elsewhere: no bytes known (its zero would take the memory side off the curve)
        "remote": {"precision": "server", "weight_bytes_per_token": 0, "device": "remote (http://x)"},
    }
    (curve,) = prefill_curves(TINY, engines, PEAKS, 1.0, [1, 10])
    assert curve["engines"] == ["a", "b"] and curve["isa"] == "avx2 vfmadd231ps ymm"
    assert [n for n, _ in curve["points"]] == [1, 2, 4, 8, 10] == curve_lengths([1, 10], 1024)
    first = curve["points"][0][1]
    assert first == pytest.approx(max(prefill_flops(TINY, 1) / 200e6, 2e6 / 1e6), rel=1e-3)  # bytes-bound at 1 GB/s
    assert prefill_curves(TINY, engines, None, 1.0, [1]) == []


@pytest.mark.skipif(native.compiler() is None, reason="needs a C compiler")
def test_the_probe_records_each_peak_with_the_instructions_it_ran(tmp_path):
    """In a process of its own; fp32 always, bf16 only with AVX-512 BF16 or AMX, int8 with AMX, VNNI or AVX2;
    the tiles' peak where the dispatch says AMX is executable (the machine's best unit)."""
    peaks = compute_peak.measure_compute_peaks(threads=1, passes=2, rounds=100_000)  # a short probe
    assert peaks.probe_pid not in (0, os.getpid()) and peaks.threads == 1 and peaks.passes == 2
    flags = set(cpuinfo_field("flags").split())
    amx = why_not(Isa.AMX) is None
    assert set(peaks.peaks) == {"fp32"} | ({"bf16"} if "avx512_bf16" in flags or amx else set()) | (
        {"int8"} if flags & {"avx512_vnni", "avx_vnni", "avx2"} else set()
    )
    for name, entry in peaks.peaks.items():
        assert entry["gops"] > 0 and entry["median_gops"] <= entry["gops"], name
        assert entry["isa"], name
    if "avx512f" in flags:
        assert peaks.peaks["fp32"]["isa"] == "avx512f vfmadd231ps zmm"
    if amx:
        assert peaks.peaks["int8"]["isa"] == "amx-int8 tdpbusd tmm"
        assert peaks.peaks["bf16"]["isa"] == "amx-bf16 tdpbf16ps tmm"
    elif "avx512_vnni" in flags:
        assert peaks.peaks["int8"]["isa"] == "avx512-vnni vpdpbusd zmm"
    assert set(peaks.as_dict()) >= {"peaks", "threads", "cpu", "measured_at", "label"}
    # each figure names the probe it came from: a refresh may keep one from an earlier probe
    assert all((e["measured_at"], e["probe_pid"]) == (peaks.measured_at, peaks.probe_pid) for e in peaks.peaks.values())


def test_the_peaks_are_cached_per_cpu_and_threads(monkeypatch):
    calls = []

    def fake(threads, passes=5):
        calls.append(threads)
        return PEAKS

    monkeypatch.setattr(compute_peak, "measure_compute_peaks", fake)
    first = compute_peak.probe_compute_peaks(3)
    again = compute_peak.probe_compute_peaks(3)
    assert calls == [3] and not first.cached and again.cached
    assert again.peaks == {"fp32": {**PEAKS.peaks["fp32"], "measured_at": "now", "probe_pid": 0}}  # and whose
    assert first.peaks["fp32"]["probed_gops"] == 200.0  # measured now
    assert "probed_gops" not in again.peaks["fp32"]  # the cache keeps the best, not a run's own probe
    compute_peak.probe_compute_peaks(4)
    assert calls == [3, 4]


def test_each_peak_names_the_probe_it_came_from(monkeypatch):
    """A refresh keeps each arithmetic's faster figure, so fp32's may be yesterday's while int8's is
    today's: each entry carries its own probe's date and process, the record's (the latest probe's)
    only where its figure is that probe's; a cache written before entries had them still reads."""

    def probe(when: str, pid: int, fp32: float, int8: float) -> ComputePeaks:
        """A probe's record whose entries do not name it (as a cache written before they did)."""
        peaks = {"fp32": (fp32, "f"), "int8": (int8, "i")}
        entries = {k: {"gops": gops, "median_gops": gops - 10, "isa": isa} for k, (gops, isa) in peaks.items()}
        return ComputePeaks(peaks=entries, measured_at=when, probe_pid=pid)

    yesterday, today = probe("yesterday", 11, 250.0, 900.0), probe("today", 22, 150.0, 950.0)
    monkeypatch.setattr(compute_peak, "CACHE_FILE", "compute-peaks-dates-test.json")
    probes = iter([yesterday, today])
    monkeypatch.setattr(compute_peak, "measure_compute_peaks", lambda threads, passes=5: next(probes))
    compute_peak.probe_compute_peaks(7, refresh=True)
    merged = compute_peak.probe_compute_peaks(7, refresh=True)
    fp32, int8 = merged.peaks["fp32"], merged.peaks["int8"]
    assert (fp32["gops"], fp32["measured_at"], fp32["probe_pid"]) == (250.0, "yesterday", 11)  # kept from then
    assert fp32["probed_gops"] == 150.0  # beside what today's probe read
    assert (int8["gops"], int8["measured_at"], int8["probe_pid"]) == (950.0, "today", 22)
    assert merged.measured_at == "today" and merged.peak(Arithmetic.FP32)[1].measured_at == "yesterday"
    cached = compute_peak.cached_compute_peaks(7)  # the cache keeps each figure's probe too
    assert cached.peaks["fp32"]["measured_at"] == "yesterday" and cached.peaks["int8"]["measured_at"] == "today"

    old = {"fp32": {"gops": 300.0, "median_gops": 290.0, "isa": "f"}}  # written before entries named their probe
    compute_peak.write_probe_cache(compute_peak.CACHE_FILE, compute_peak.probe_key(8), {"peaks": old, "threads": 8})
    assert compute_peak.cached_compute_peaks(8).peak(Arithmetic.FP32)[1] == Peak(300.0, 290.0, "f")
    probes = iter([today])
    kept = compute_peak.probe_compute_peaks(8, refresh=True).peaks["fp32"]
    assert kept["gops"] == 300.0 and kept["measured_at"] == "" and kept["probe_pid"] == 0  # unknown, not today's
