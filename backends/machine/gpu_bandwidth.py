"""A CUDA engine's floor: its bytes per token read by its GPU, not by the host.

A decode step on a GPU streams the weights from the GPU's own memory (an H100's HBM3 moves about
3 TB/s where its host's DRAM moves tens of GB/s): a floor probed on the host would be one such an
engine beats many times over, i.e. a wrong number. The probe does what decoding does, on the GPU:
a float32 matrix-vector product (cuBLAS's gemv, through torch) and a plain sum over the same
matrix, timed with CUDA events; the faster reader sets the limit. It runs in a spawned process of
its own (machine/bandwidth.measure_in_child), so the app never holds a CUDA context or the buffer.
The cores' rate beside it is a float32 GEMM on the same GPU (torch's default: no TF32).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from .bandwidth import Bandwidth, measure_in_child
from .cpu import cpu_model
from .gpu_compute_peak import cuda_seconds, gemm_rates

DEFAULT_GPU_BYTES = 1 << 30  # without an engine's size: 1 GiB, many times any GPU's L2
GPU_GEMM_SIZE = 4096


def measure_gpu_bandwidth(n_bytes: int | None = None, passes: int = 20) -> Bandwidth:
    """The GPU probe in a spawned process of its own; raises where torch sees no CUDA GPU."""
    return measure_in_child(measure_gpu_here, n_bytes, passes)


def measure_gpu_here(n_bytes: int | None = None, passes: int = 20) -> Bandwidth:
    """Time `passes` reads of one matrix on the GPU by each reader; the faster one's best and median."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(f"torch {torch.__version__} sees no CUDA GPU")
    device = torch.device("cuda")
    columns = 4096
    rows = max(1, (n_bytes or DEFAULT_GPU_BYTES) // (4 * columns))
    matrix = torch.ones((rows, columns), dtype=torch.float32, device=device)  # ones: every page written
    vector = torch.ones(columns, dtype=torch.float32, device=device)

    # reader -> (the product, the value every element of its output must hold)
    readers = {
        "cuBLAS gemv": (lambda: torch.mv(matrix, vector), float(columns)),  # [rows]
        "sum": (lambda: matrix.sum(dim=0), float(rows)),
    }  # [columns]
    nbytes = matrix.numel() * matrix.element_size()
    results = {name: _timed_reads(torch, *reader, nbytes, passes) for name, reader in readers.items()}
    reader = max(results, key=lambda name: max(results[name]))
    rates = sorted(results[reader])
    return Bandwidth(
        gb_s=rates[-1],
        median_gb_s=rates[len(rates) // 2],
        bytes=nbytes,
        threads=1,
        passes=len(rates),
        cpu=cpu_model(),
        measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        probe_pid=os.getpid(),
        reader=reader,
        readers={name: round(max(r), 2) for name, r in results.items()},
        compute_gflops=round(_gemm_gflops(torch, device, passes), 2),
        device="cuda",
        device_name=torch.cuda.get_device_name(device),
    )


def _timed_reads(torch, product: Callable, expected: float, nbytes: int, passes: int) -> list[float]:
    """GB/s of each pass, timed with CUDA events around the product alone; the warm-up's output is
    checked after the timing (a read-back syncs)."""
    out = product()  # warm-up: the library's handles and kernels load outside the timing
    rates = [nbytes / cuda_seconds(torch, product) / 1e9 for _ in range(max(1, passes))]
    if float(out[0]) != expected or float(out[-1]) != expected:  # catches nonsense
        raise RuntimeError("GPU bandwidth probe: wrong product")
    return rates


def _gemm_gflops(torch, device, passes: int) -> float:
    """The best pass of a float32 GEMM on the GPU, in GFLOP/s (a slow phase of the GPU shows)."""
    return max(gemm_rates(torch, device, torch.float32, GPU_GEMM_SIZE, max(1, passes)))
