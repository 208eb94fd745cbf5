"""What torch.compile (inductor) needs of the machine, told without importing torch.

Inductor writes C++ for the CPU and builds it with the compiler that `torch._inductor.config.cpp.cxx`
names: $CXX, else g++ (clang++ on macOS, cl on Windows). It runs `<compiler> --version` and raises
deep inside the first compiled call when that fails, so the registry asks this module first
(`EngineSpec.requirement`) and says so in one line instead. On CUDA it writes Triton kernels, and
Triton builds its launcher with a C compiler at the first compiled call.
"""

from __future__ import annotations

import os
import sys


def cxx_compiler() -> str:
    """The compiler inductor will call here, as `torch._inductor.config.cpp.cxx` names it."""
    if sys.platform == "win32":
        return os.environ.get("CXX", "cl")
    return os.environ.get("CXX", "clang++" if sys.platform == "darwin" else "g++")


def triton_c_compiler() -> str | None:
    """The C compiler Triton builds its CUDA launcher with (triton/runtime/build.py): $CC, else gcc,
    else clang; None when there is none."""
    import shutil

    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")


def compile_requirement(compile: bool = False, device: str | None = None, **_engine_args: object) -> str:
    """Why this engine cannot run here, or "" when it can: a compiled decode on the CPU needs
    inductor's C++ compiler; on CUDA, inductor writes Triton kernels, and Triton needs a C compiler
    for its launcher at the first compiled call."""
    import shutil  # here: the registry's import stays light for a worker's cold start

    if not compile:
        return ""
    if (device or "cpu").startswith("cuda"):
        cc = triton_c_compiler()
        if cc is not None and shutil.which(cc) is not None:
            return ""
        if "CC" in os.environ:
            return f"needs a C compiler for Triton's kernels on CUDA ($CC={cc!r} not found)"
        return "needs a C compiler for Triton's kernels on CUDA (gcc or clang not found: install one, or set $CC)"
    compiler = cxx_compiler()
    if shutil.which(compiler) is not None:
        return ""
    if "CXX" in os.environ:
        return f"needs a C++ compiler for torch.compile on the CPU ($CXX={compiler!r} not found)"
    return f"needs a C++ compiler for torch.compile on the CPU ({compiler} not found: install it, or set $CXX)"
