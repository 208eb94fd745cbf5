"""The machine's memory bandwidth: the ceiling of batch-1 decoding, which reads every weight per token.

The probe does what decoding does: a float32 matrix-vector product (BLAS sgemv) over a matrix
well larger than the last-level cache, with the engines' thread count. A plain `np.sum` reads
only about half as fast here (it is partly compute-bound), which would draw the limit too low.
It runs once per CPU model and thread count; the result is cached in `cache_dir()`.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import psutil

from ..storage.atomic import atomic_write
from ..worker.blas import OpenBLAS
from .environment import cpu_model
from ..storage.paths import cache_dir

CACHE_FILE = "bandwidth-v2.json"  # v2: sgemv probe (v1 summed, and read low)
MIN_BYTES = 1 << 30  # 1 GiB, unless the last-level cache is larger than a quarter of that


@dataclass(frozen=True)
class Bandwidth:
    gb_s: float  # best pass, 1e9 bytes per second
    median_gb_s: float
    bytes: int  # array size read per pass
    threads: int
    passes: int
    cpu: str
    measured_at: str
    cached: bool = False  # True when read back from the cache rather than measured now

    def as_dict(self) -> dict:
        return asdict(self)


def last_level_cache_bytes() -> int:
    """Largest CPU cache the OS reports (0 if unknown)."""
    best = 0
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = path.read_text().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            best = max(best, int(text.rstrip("KMG")) * scale)
        except (OSError, ValueError):
            continue
    return best


def default_probe_bytes() -> int:
    """4x the last-level cache and at least 1 GiB, but at most a quarter of the free memory."""
    wanted = max(MIN_BYTES, 4 * last_level_cache_bytes())
    return int(min(wanted, psutil.virtual_memory().available // 4))


def measure_bandwidth(threads: int, n_bytes: int | None = None, passes: int = 5) -> Bandwidth:
    """Time `passes` full read sweeps (a sum) over one array; report the best and median GB/s."""
    threads = max(1, threads)
    n_bytes = n_bytes or default_probe_bytes()
    columns = 4096
    matrix = np.ones((max(1, n_bytes // (4 * columns)), columns), dtype=np.float32)  # ones: pages really touched
    vector = np.ones(columns, dtype=np.float32)
    blas = OpenBLAS()
    previous = blas.threads()
    blas.set_threads(threads)
    rates = []
    try:
        matrix @ vector  # thread start-up outside the timing
        for _ in range(max(1, passes)):
            start = time.perf_counter()
            result = matrix @ vector
            elapsed = time.perf_counter() - start
            if result[0] != columns:  # catches nonsense (and keeps the product from being skipped)
                raise RuntimeError("bandwidth probe: wrong product")
            rates.append(matrix.nbytes / elapsed / 1e9)
    finally:
        if previous:
            blas.set_threads(previous)
    data = matrix
    return Bandwidth(gb_s=max(rates), median_gb_s=float(np.median(rates)), bytes=int(data.nbytes), threads=threads,
                     passes=len(rates), cpu=cpu_model(), measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))


def _key(threads: int) -> str:
    return f"{cpu_model()}|threads={max(1, threads)}"


def _read_cache() -> dict:
    try:
        data = json.loads((cache_dir() / CACHE_FILE).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {}


def cached_bandwidth(threads: int) -> Bandwidth | None:
    """The cached probe for this CPU and thread count, or None (never measures)."""
    entry = _read_cache().get(_key(threads))
    if not isinstance(entry, dict):
        return None
    try:
        entry = {**entry, "cached": True}
        return Bandwidth(**entry)
    except TypeError:  # an older or damaged entry: measure again
        return None


def probe_bandwidth(threads: int, n_bytes: int | None = None, refresh: bool = False) -> Bandwidth:
    """The cached result if there is one, else measure once and cache it."""
    if not refresh:
        cached = cached_bandwidth(threads)
        if cached is not None:
            return cached
    result = measure_bandwidth(threads, n_bytes)
    cache = _read_cache()
    cache[_key(threads)] = {k: v for k, v in result.as_dict().items() if k != "cached"}
    with atomic_write(cache_dir() / CACHE_FILE, encoding="utf-8") as f:
        json.dump(cache, f, indent=1)
    return result


def limit_ms_per_token(weight_bytes_per_token: float, gb_s: float) -> float:
    """The fastest a decode step can be if it must read every weight once: bytes / bandwidth."""
    return weight_bytes_per_token / (gb_s * 1e9) * 1e3
