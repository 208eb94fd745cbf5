"""The CPU's arithmetic peaks: the compute side of prefill's roofline (results/roofline.py).

For each arithmetic a prefill can use (fp32, bf16, int8), the probe times the best multiply-add
this CPU has for it (kernels/peak.c, built for this CPU: AVX-512F or AVX2 FMAs, AVX-512 BF16,
AVX-512 VNNI, AVX-VNNI or AVX2's maddubs, and the AMX tiles' tdpbf16ps and tdpbusd where the CPU has
them and Linux grants them) in registers, on the engines' thread count, and records which
instructions ran: a peak is only meaningful with its instruction set. Where both a vector unit and
the tiles have an arithmetic, its peak is the faster one's: every engine's prefill is held to the
machine's best unit, whether or not that engine uses it. As the bandwidth
probe, it runs in a spawned process of its own and is cached per CPU model and thread count; its
passes take the best, since a shared machine's slow phases only ever lower a peak. A refresh keeps
each arithmetic's faster figure, so the figures may come from different probes: each names its own
(`measured_at`, `probe_pid`). Without a C compiler there is no probe, and no roofline.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import time
from dataclasses import asdict, dataclass, field, fields, replace
from enum import Enum

from .bandwidth import probe_key, read_probe_cache, run_in_child, write_probe_cache
from .cpu import cpu_model


class Arithmetic(str, Enum):
    """The numbers a prefill's matrix products multiply."""

    FP32 = "fp32"
    BF16 = "bf16"  # bf16 x bf16 products, float32 sums
    INT8 = "int8"  # int8 x int8 (or u8 x s8) products, int32 sums

    def __str__(self) -> str:
        return self.value


CACHE_FILE = "compute-peaks-v2.json"  # v2: the AMX tiles probed too
# kernels/peak.c's PEAK_* per arithmetic: the vector unit's, then the AMX tiles'
_KINDS = {Arithmetic.FP32: (0,), Arithmetic.BF16: (1, 3), Arithmetic.INT8: (2, 4)}
ROUNDS = 1_500_000  # rounds of 12 chains per thread and pass: ~5-20 ms on a 2020s core


@dataclass(frozen=True)
class Peak:
    """One arithmetic's peak: the best pass, the passes' median, and the instructions it ran."""

    gops: float  # 1e9 operations (a multiply and an add are two) per second, all threads
    median_gops: float
    isa: str  # e.g. "avx512-vnni vpdpbusd zmm"
    # what this probe read where `gops` is the machine's best, kept from a faster phase (None: no probe now)
    probed_gops: float | None = None
    # the probe `gops` and `median_gops` came from, which may be an earlier one than the record's own
    # (ComputePeaks.measured_at is the latest probe's); "" and 0 in files written before entries had them
    measured_at: str = ""
    probe_pid: int = 0


@dataclass(frozen=True)
class ComputePeaks:
    peaks: dict = field(default_factory=dict)  # arithmetic value -> Peak's fields; absent: no instructions for it
    threads: int = 1
    passes: int = 0
    cpu: str = ""
    measured_at: str = ""
    cached: bool = False
    probe_pid: int = 0

    def peak(self, arithmetic: Arithmetic) -> tuple[Arithmetic, Peak] | None:
        """The peak a prefill of this arithmetic is held to, and whose it is: its own, or fp32's
        where the CPU has no instructions for it (its products then run as fp32's); None without
        either."""
        known = {f.name for f in fields(Peak)}
        for candidate in (arithmetic, Arithmetic.FP32):
            entry = self.peaks.get(candidate.value)
            if entry and entry.get("gops"):
                return candidate, Peak(**{k: v for k, v in entry.items() if k in known})
        return None

    @property
    def label(self) -> str:
        """One line: each arithmetic's peak and instructions."""
        return "; ".join(f"{name} {entry['gops']:.0f} G/s ({entry['isa']})" for name, entry in self.peaks.items())

    def as_dict(self) -> dict:
        return {**asdict(self), "label": self.label}

    @classmethod
    def from_dict(cls, data: dict) -> ComputePeaks:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def measure_here(threads: int, passes: int = 5, rounds: int = ROUNDS) -> ComputePeaks:
    """Each arithmetic's passes in this process (its kernel built on first use)."""
    # Late: kernels/ sits above the machine, and peak.c is built (a compiler run) only in the probe's process.
    from ..kernels.native import load

    lib = load("peak")
    lib.peak_isa.restype = ctypes.c_char_p
    lib.peak_isa.argtypes = [ctypes.c_int]
    lib.peak_gops.restype = ctypes.c_double
    lib.peak_gops.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int, ctypes.POINTER(ctypes.c_float)]
    threads = max(1, threads)
    sink = ctypes.c_float()
    now, pid = time.strftime("%Y-%m-%dT%H:%M:%S%z"), os.getpid()
    peaks: dict[str, dict] = {}
    for arithmetic, kinds in _KINDS.items():
        for kind in kinds:
            isa = lib.peak_isa(kind).decode()
            if not isa:
                continue
            rates = [lib.peak_gops(kind, rounds, threads, ctypes.byref(sink)) for _ in range(max(1, passes))]
            peak = Peak(round(max(rates), 1), round(statistics.median(rates), 1), isa, measured_at=now, probe_pid=pid)
            if peak.gops > peaks.get(arithmetic.value, {}).get("gops", 0):  # the machine's best unit
                peaks[arithmetic.value] = asdict(peak)
    return ComputePeaks(peaks, threads, max(1, passes), cpu_model(), now, probe_pid=pid)


def measure_compute_peaks(threads: int, passes: int = 5, rounds: int = ROUNDS) -> ComputePeaks:
    """The probe, in a spawned process of its own (`rounds` goes with it: the child's module has its own)."""
    return ComputePeaks(**run_in_child(measure_here, threads, passes, rounds))


def cached_compute_peaks(threads: int) -> ComputePeaks | None:
    """The cached probe for this CPU and thread count, or None (never measures)."""
    entry = read_probe_cache(CACHE_FILE).get(probe_key(threads))
    if not isinstance(entry, dict):
        return None
    try:
        return ComputePeaks.from_dict({**entry, "cached": True})
    except TypeError:
        return None


def probe_compute_peaks(threads: int, refresh: bool = False) -> ComputePeaks:
    """The cached peaks if there are some, else measured once and cached. `refresh` measures again
    and keeps, per arithmetic, the faster of the new and the cached figure (same instructions): a
    busy machine's pass only lowers a peak, and a roofline from a low one is a bound an engine beats."""
    cached = cached_compute_peaks(threads)
    if cached is not None and not refresh:
        return cached
    result = faster_peaks(measure_compute_peaks(threads), cached)
    # the cache keeps the machine's best; what this probe read is this run's alone
    best = {name: {k: v for k, v in entry.items() if k != "probed_gops"} for name, entry in result.peaks.items()}
    cached_now = {k: v for k, v in asdict(replace(result, peaks=best)).items() if k != "cached"}
    write_probe_cache(CACHE_FILE, probe_key(threads), cached_now)
    return result


def faster_peaks(new: ComputePeaks, old: ComputePeaks | None) -> ComputePeaks:
    """`new`, each arithmetic's peak replaced by `old`'s where that was faster with the same
    instructions; each keeps what `new` probed (`probed_gops`: its own figure where it already
    carries one, as a profile's merged probe does), so a slower phase now shows. Each figure keeps the
    date and process of the probe it came from; `new`'s own, where its entries lack them, are `new`'s."""
    peaks = {
        name: {
            **entry,
            "probed_gops": entry.get("probed_gops") or entry.get("gops"),
            "measured_at": entry.get("measured_at") or new.measured_at,
            "probe_pid": entry.get("probe_pid") or new.probe_pid,
        }
        for name, entry in new.peaks.items()
    }
    for name, entry in (old.peaks if old else {}).items():
        mine = peaks.get(name)
        if mine and mine.get("isa") == entry.get("isa") and entry.get("gops", 0) > mine.get("gops", 0):
            # a figure from a cache written before entries named their probe: its probe unknown ("", 0)
            peaks[name] = {"measured_at": "", "probe_pid": 0, **entry, "probed_gops": mine["probed_gops"]}
    return replace(new, peaks=peaks)
