"""A CUDA engine's prefill roofline: its GPU's arithmetic peaks, not the host's.

A prefill on a GPU multiplies on the GPU (an H100 does tens of dense fp32 TFLOP/s, hundreds in bf16,
where the host's cores do hundreds of GFLOP/s), so a roofline from the CPU's peaks would be one such an
engine beats many times over. For each arithmetic the CUDA engines use, the probe times a square GEMM
large enough to fill the GPU through torch (cuBLAS), with CUDA events, and keeps the best pass:

  fp32   SGEMM with TF32 off (torch's default, and what keeps fp32 engines equal to transformers')
  bf16   bf16 inputs on the tensor cores, float32 sums

No int8: no CUDA engine here multiplies in int8. As the GPU's bandwidth probe, it runs in a spawned
process of its own (machine/bandwidth.run_in_child), so the app never holds a CUDA context.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict

from .bandwidth import run_in_child
from .compute_peak import Arithmetic, ComputePeaks, Peak

GPU_PEAK_SIZE = 8192  # 2 x 8192^3 = 1.1 TFLOP a pass: several ms even on an H100, many waves of tiles
_DTYPES = {Arithmetic.FP32: "float32", Arithmetic.BF16: "bfloat16"}
_INSTRUCTIONS = {Arithmetic.FP32: "cuBLAS SGEMM, no TF32", Arithmetic.BF16: "cuBLAS bf16 GEMM, tensor cores"}


def measure_gpu_peaks(passes: int = 10) -> ComputePeaks:
    """The probe in a spawned process of its own; raises where torch sees no CUDA GPU."""
    return ComputePeaks(**run_in_child(measure_gpu_peaks_here, passes))


def measure_gpu_peaks_here(passes: int = 10, size: int = GPU_PEAK_SIZE) -> ComputePeaks:
    """Each arithmetic's GEMM passes in this process; `cpu` names the GPU the peaks are of."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"torch {torch.__version__} sees no CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 products as the fp32 engines make them
    device = torch.device("cuda")
    name = torch.cuda.get_device_name(device)
    now, pid = time.strftime("%Y-%m-%dT%H:%M:%S%z"), os.getpid()
    peaks = {}
    for arithmetic, dtype in _DTYPES.items():
        rates = gemm_rates(torch, device, getattr(torch, dtype), size, max(1, passes))
        isa = f"{name}: {_INSTRUCTIONS[arithmetic]}"
        peak = Peak(round(max(rates), 1), round(statistics.median(rates), 1), isa, measured_at=now, probe_pid=pid)
        peaks[arithmetic.value] = asdict(peak)
    return ComputePeaks(peaks, 1, max(1, passes), name, now, probe_pid=pid)


def gemm_rates(torch, device, dtype, size: int, passes: int) -> list[float]:
    """GFLOP/s of each pass of a size x size GEMM on the GPU; the product is checked after the timing."""
    a = torch.full((size, size), 0.5, dtype=dtype, device=device)  # 0.25 x size sums exactly in any of them
    out = torch.empty_like(a)
    torch.matmul(a, a, out=out)  # warm-up: cuBLAS's handle and kernels load outside the timing
    rates = [2 * size**3 / cuda_seconds(torch, lambda: torch.matmul(a, a, out=out)) / 1e9 for _ in range(passes)]
    if float(out[0, 0]) != 0.25 * size or float(out[-1, -1]) != 0.25 * size:  # catches nonsense
        raise RuntimeError("GPU compute probe: wrong product")
    return rates


def cuda_seconds(torch, run: Callable) -> float:
    """Seconds of one `run()` on the GPU, between two CUDA events around it (synced before reading)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3
