"""The machine's memory bandwidth: the ceiling of batch-1 decoding, which reads every weight per token.

The probe does what decoding does: a float32 matrix-vector product over a matrix well larger
than the last-level cache, with the engines' thread count, read twice: by BLAS's sgemv and by the
project's own streaming kernel (kernels/gemv.c, four row streams per thread, where a C compiler
is there); the faster reader sets the limit. A floor must be one no engine can beat, and the
native engine's products stream faster than sgemv reads (docs/methodology.md). A plain
`np.sum` reads slower still (it is partly compute-bound).
It runs once per CPU model and thread count, in a spawned process of its own (its buffer of a
GiB or more would otherwise stay in the parent's peak RSS and page tables), and the result is
cached in `cache_dir()`. `profile` probes around each engine over that engine's own bytes per
token instead (`fresh_bandwidth(threads, n_bytes)`, not cached): how much of a working set the
caches keep between passes depends on its size. `label` says what the limit is: "<reader> over
a N MB fp32 matrix, T threads".
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path

import numpy as np
import psutil

from ..storage.atomic import atomic_write
from ..storage.paths import cache_dir
from .blas import OpenBLAS
from .cpu import cpu_model

CACHE_FILE = "bandwidth-v3.json"  # v3: the faster of sgemv and the own kernel (v2: sgemv only; v1 summed, and read low)
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
    probe_pid: int = 0  # the process that measured it (not the app's: the probe runs in its own)
    reader: str = "sgemv"  # what read fastest: "sgemv" (BLAS) or "own kernel" (kernels/gemv.c)
    readers: dict = field(default_factory=dict)  # reader -> its best GB/s
    # How fast the cores computed at the same moment (best pass of an in-cache float32 GEMM, same
    # threads; 0.0 for an older cached entry): a shared machine's slow phases slow arithmetic as
    # well as memory, and a profile shows it beside each engine.
    compute_gflops: float = 0.0
    device: str = "cpu"  # what read: "cpu" (host memory) or "cuda" (a CUDA engine's floor: GPU memory)
    device_name: str = ""  # the GPU's name where device is "cuda"

    @property
    def method(self) -> str:
        """How it was measured: "<reader> over a N MB fp32 matrix, T threads" (on a GPU: "... on <GPU>")."""
        where = (
            f"on {self.device_name or self.device}"
            if self.device != "cpu"
            else f"{self.threads} thread{'s' if self.threads != 1 else ''}"
        )
        return f"{self.reader} over a {self.bytes / 1e6:.0f} MB fp32 matrix, {where}"

    @property
    def label(self) -> str:
        """What the limit is, in one line (environment.json, plots, reports)."""
        return f"{self.method}: {self.gb_s:.1f} GB/s"

    def as_dict(self) -> dict:
        return {**asdict(self), "label": self.label, "llc_bytes": last_level_cache_bytes()}

    @classmethod
    def from_dict(cls, data: dict) -> Bandwidth:
        """From as_dict's output (extra keys such as label are derived, and dropped)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def cpu_caches(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> list[tuple[int, int]]:
    """(level, bytes) of every data or unified cache the OS reports for cpu0 ([] if none: not Linux)."""
    caches = []
    for index in sorted(root.glob("index*")):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            level = int((index / "level").read_text().strip())
            text = (index / "size").read_text().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            caches.append((level, int(text.rstrip("KMG")) * scale))
        except (OSError, ValueError):
            continue
    return caches


@lru_cache(maxsize=1)
def last_level_cache() -> tuple[int, int]:
    """(level, bytes) of the last-level cache: level 3 if reported, else the largest (0, 0 if unknown)."""
    caches = cpu_caches()
    if not caches:
        return 0, 0
    level3 = [c for c in caches if c[0] == 3]
    return max(level3 or caches, key=lambda c: c[1])


def last_level_cache_bytes() -> int:
    """Size of the last-level CPU cache (0 if unknown)."""
    return last_level_cache()[1]


def on_gpu(device: str) -> bool:
    """Whether an engine's device (its Ready's) reads its weights from a GPU's memory ("cuda", "cuda:1")."""
    return device.startswith("cuda")


def fits_in_cache_note(weight_bytes: float, device: str = "cpu") -> str:
    """The flag for an engine whose weights fit in the last-level cache ("" when they do not, or
    the cache size is unknown): the DRAM limit does not bound it, and its GB/s may exceed it.
    The CPU's cache says nothing of an engine on a GPU: "" for a CUDA device."""
    level, size = last_level_cache()
    if on_gpu(device) or not size or not weight_bytes or weight_bytes > size:
        return ""
    name = f"L{level}" if level else "last-level"
    return (
        f"weights ({weight_bytes / 1e6:.1f} MB) fit in the {name} cache ({size / 1e6:.0f} MB): "
        f"the DRAM bandwidth limit does not bound this engine"
    )


def default_probe_bytes() -> int:
    """4x the last-level cache and at least 1 GiB, but at most a quarter of the free memory."""
    wanted = max(MIN_BYTES, 4 * last_level_cache_bytes())
    return int(min(wanted, psutil.virtual_memory().available // 4))


def measure_bandwidth(threads: int, n_bytes: int | None = None, passes: int = 5) -> Bandwidth:
    """The probe, in a spawned process of its own (the parent never holds the buffer)."""
    return measure_in_child(measure_here, threads, n_bytes, passes)


def measure_in_child(measure: Callable[..., Bandwidth], *args) -> Bandwidth:
    """`measure(*args)` (a module-level function) in a spawned process of its own: the parent
    never holds the probe's buffer, nor (for a GPU probe) a CUDA context."""
    return Bandwidth(**run_in_child(measure, *args))


def run_in_child(measure: Callable, *args) -> dict:
    """`measure(*args)`, a module-level function returning a dataclass, in a spawned process of its
    own (a probe's buffers, threads and libraries never land in the app's process): its fields."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    name = f"whistle-stop-{measure.__module__.rsplit('.', 1)[-1].replace('_', '-')}"
    child = context.Process(target=_probe_child, args=(send, measure, args), name=name, daemon=True)
    child.start()
    send.close()
    try:
        answer = receive.recv()
    except EOFError:
        answer = ("error", "the probe process ended without an answer")
    finally:
        receive.close()
        child.join()
    if answer[0] != "ok":
        raise RuntimeError(f"{child.name} probe failed: {answer[1]} (exit code {child.exitcode})")
    return answer[1]


def _probe_child(conn, measure: Callable[..., Bandwidth], args: tuple) -> None:
    try:
        conn.send(("ok", asdict(measure(*args))))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def measure_here(threads: int, n_bytes: int | None = None, passes: int = 5) -> Bandwidth:
    """Time `passes` sweeps over one matrix by each reader in this process; the faster reader's
    best and median GB/s."""
    threads = max(1, threads)
    n_bytes = n_bytes or default_probe_bytes()
    columns = 4096
    matrix = np.ones((max(1, n_bytes // (4 * columns)), columns), dtype=np.float32)  # ones: pages really touched
    vector = np.ones(columns, dtype=np.float32)
    results = {"sgemv": _sgemv_rates(matrix, vector, threads, passes)}
    kernel = _kernel_rates(matrix, vector, threads, passes)
    if kernel:
        results["own kernel"] = kernel
    reader = max(results, key=lambda name: max(results[name]))
    rates = results[reader]
    return Bandwidth(
        gb_s=max(rates),
        median_gb_s=float(np.median(rates)),
        bytes=int(matrix.nbytes),
        threads=threads,
        passes=len(rates),
        cpu=cpu_model(),
        measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        probe_pid=os.getpid(),
        reader=reader,
        readers={name: round(max(r), 2) for name, r in results.items()},
        compute_gflops=round(max(_gemm_rates(threads, passes)), 2),
    )


def _timed_passes(product, matrix: np.ndarray, passes: int) -> list[float]:
    product()  # thread start-up outside the timing
    rates = []
    for _ in range(max(1, passes)):
        start = time.perf_counter()
        result = product()
        elapsed = time.perf_counter() - start
        if result[0] != matrix.shape[1] or result[-1] != matrix.shape[1]:  # catches nonsense
            raise RuntimeError("bandwidth probe: wrong product")
        rates.append(matrix.nbytes / elapsed / 1e9)
    return rates


def _with_blas_threads(threads: int, measure: Callable[[], list[float]]) -> list[float]:
    blas = OpenBLAS()
    previous = blas.threads()
    blas.set_threads(threads)
    try:
        return measure()
    finally:
        if previous:
            blas.set_threads(previous)


def _sgemv_rates(matrix: np.ndarray, vector: np.ndarray, threads: int, passes: int) -> list[float]:
    return _with_blas_threads(threads, lambda: _timed_passes(lambda: matrix @ vector, matrix, passes))


GEMM_SIZE, GEMM_CALLS = 256, 16  # three 256 KB matrices stay in cache: BLAS's GEMM is compute-bound


def _gemm_rates(threads: int, passes: int) -> list[float]:
    """GFLOP/s of `passes` passes of GEMM_CALLS float32 GEMMs (each a few milliseconds)."""
    a = np.full((GEMM_SIZE, GEMM_SIZE), 0.5, np.float32)
    out = np.empty_like(a)

    def measure() -> list[float]:
        np.matmul(a, a, out=out)  # thread start-up outside the timing
        rates = []
        for _ in range(max(1, passes)):
            start = time.perf_counter()
            for _ in range(GEMM_CALLS):
                np.matmul(a, a, out=out)
            elapsed = time.perf_counter() - start
            rates.append(2 * GEMM_SIZE**3 * GEMM_CALLS / elapsed / 1e9)
        if out[0, 0] != 0.25 * GEMM_SIZE:  # catches nonsense
            raise RuntimeError("compute probe: wrong product")
        return rates

    return _with_blas_threads(threads, measure)


def _kernel_rates(matrix: np.ndarray, vector: np.ndarray, threads: int, passes: int) -> list[float]:
    """The project's decode kernel over the same matrix ([] without a C compiler)."""
    # Late: kernels/ sits above the machine (it builds for the level machine/isa.py names), and its C
    # build (a compiler run, ctypes) happens only in the probe's own spawned process.
    from ..kernels.native import KernelUnavailable, gemv, set_threads

    try:
        kernel = gemv("f32")
    except KernelUnavailable:
        return []
    set_threads(threads)
    out = np.empty(matrix.shape[0], np.float32)

    def product() -> np.ndarray:
        kernel(matrix.ctypes.data, vector.ctypes.data, None, out.ctypes.data, 1, matrix.shape[0], matrix.shape[1])
        return out

    return _timed_passes(product, matrix, passes)


def probe_key(threads: int) -> str:
    """A machine probe's cache key: the CPU model and the thread count."""
    return f"{cpu_model()}|threads={max(1, threads)}"


def read_probe_cache(file_name: str) -> dict:
    """A probe's cache file in cache_dir(): key -> entry ({} when absent or unreadable)."""
    try:
        data = json.loads((cache_dir() / file_name).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {}


def write_probe_cache(file_name: str, key: str, entry: dict) -> None:
    """One entry into a probe's cache file, the others kept (written atomically)."""
    cache = read_probe_cache(file_name)
    cache[key] = entry
    with atomic_write(cache_dir() / file_name, encoding="utf-8") as f:
        json.dump(cache, f, indent=1)


def cached_bandwidth(threads: int) -> Bandwidth | None:
    """The cached probe for this CPU and thread count, or None (never measures)."""
    entry = read_probe_cache(CACHE_FILE).get(probe_key(threads))
    if not isinstance(entry, dict):
        return None
    try:
        return Bandwidth.from_dict({**entry, "cached": True})
    except TypeError:  # an older or damaged entry: measure again
        return None


MIN_SIZED_BYTES = 4 << 20  # a smaller read would time mostly the call's own overhead


def fresh_bandwidth(threads: int, n_bytes: int | None = None, device: str = "cpu") -> Bandwidth:
    """Measured now: a profile's floor is of the same minutes as its runs, since a shared machine's
    bandwidth moves between phases. Without `n_bytes`, over the default matrix (1 GiB or more) and
    cached as the machine's figure. With it (an engine's bytes per token), over a matrix of that
    size and not cached: the caches keep part of a working set of a few times their size between
    passes (docs/methodology.md), so only a read of the same bytes is a floor that engine
    cannot beat. A CUDA engine's
    floor is its GPU's memory (machine/gpu_bandwidth.py), never the host's."""
    if on_gpu(device):
        from .gpu_bandwidth import measure_gpu_bandwidth

        return measure_gpu_bandwidth(None if n_bytes is None else max(int(n_bytes), MIN_SIZED_BYTES))
    if n_bytes is None:
        return probe_bandwidth(threads, refresh=True)
    return measure_bandwidth(threads, sized_probe_bytes(n_bytes))


def sized_probe_bytes(n_bytes: float) -> int:
    """An engine's bytes per token as a probe's size: at least MIN_SIZED_BYTES, at most a quarter
    of the free memory."""
    return int(min(max(n_bytes, MIN_SIZED_BYTES), psutil.virtual_memory().available // 4))


def probe_bandwidth(threads: int, n_bytes: int | None = None, refresh: bool = False) -> Bandwidth:
    """The cached result if there is one, else measure once and cache it."""
    if not refresh:
        cached = cached_bandwidth(threads)
        if cached is not None:
            return cached
    result = measure_bandwidth(threads, n_bytes)
    write_probe_cache(CACHE_FILE, probe_key(threads), {k: v for k, v in asdict(result).items() if k != "cached"})
    return result


def limit_ms_per_token(weight_bytes_per_token: float, gb_s: float) -> float:
    """The fastest a decode step can be if it must read every weight once: bytes / bandwidth."""
    return weight_bytes_per_token / (gb_s * 1e9) * 1e3
