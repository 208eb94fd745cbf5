"""This CPU's facts: its model, its features (/proc/cpuinfo), the ones the kernels choose between."""

from __future__ import annotations

import platform
from pathlib import Path


def cpuinfo_field(name: str) -> str:
    """The first value of `name` in /proc/cpuinfo ("model name", "vendor_id"), '' where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(name):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


# The CPU features the engines' kernels choose between (vector width, int8 and bf16 products).
NOTABLE_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx_vnni",
    "avx512_bf16",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
    "asimd",
    "asimddp",
    "sve",
)


def cpu_flags() -> list[str]:
    """The notable features this CPU has, in NOTABLE_FLAGS' order ([] where /proc/cpuinfo says none)."""
    present = set(cpuinfo_field("flags").split()) | set(cpuinfo_field("Features").split())
    return [flag for flag in NOTABLE_FLAGS if flag in present]


def cpu_model() -> str:
    return cpuinfo_field("model name") or platform.processor() or platform.machine()
