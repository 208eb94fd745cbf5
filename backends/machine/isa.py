"""The native kernels' instruction-set levels: which this CPU can execute, the best, and each one's build.

A level is what a kernel of backends/kernels/ is compiled for. `AUTO` is the best level this CPU can
execute; the others can be forced (the `--native-isa` option, the tests running every level):

    amx     -march=native, and the AMX translation unit (tile products) built with -mamx-*
    avx512  -march=native without AMX (AVX-512 with whatever BF16/VNNI the CPU has)
    avx2    x86-64-v3: AVX2 and FMA, no AVX-512
    c       the x86-64 baseline: the kernels' plain-C paths

AMX needs more than the CPU's flags: Linux hands out the tiles' state only to a process that asks
(arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)), and only a kernel that supports it can say yes.
The level is executable when the kernel lists XTILEDATA among the features it can grant
(ARCH_GET_XCOMP_SUPP, which changes nothing); the AMX kernels ask for the permission themselves.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
from enum import Enum
from functools import cache

from .cpu import cpuinfo_field


class Isa(str, Enum):
    """An instruction-set level of the native kernels (AUTO: the best this CPU can execute)."""

    AUTO = "auto"
    AMX = "amx"
    AVX512 = "avx512"
    AVX2 = "avx2"
    C = "c"


class IsaUnavailable(ValueError):
    """A forced level this CPU (or its kernel) cannot execute."""


LEVELS = (Isa.AMX, Isa.AVX512, Isa.AVX2, Isa.C)  # best first; AUTO is the first one executable

# /proc/cpuinfo flags each level needs, beyond the levels below it
_NEEDS: dict[Isa, tuple[str, ...]] = {
    Isa.AVX2: ("avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "movbe", "abm"),  # x86-64-v3
    Isa.AVX512: ("avx512f", "avx512bw", "avx512vl", "avx512dq"),
    Isa.AMX: ("amx_tile", "amx_bf16", "amx_int8"),
}
_BELOW = {Isa.AMX: Isa.AVX512, Isa.AVX512: Isa.AVX2, Isa.AVX2: Isa.C}

# Only the AMX translation unit is built with these; the rest of an AMX build has them turned off.
AMX_UNIT_FLAGS = ("-march=native", "-mamx-tile", "-mamx-bf16", "-mamx-int8")
_NO_AMX = ("-mno-amx-tile", "-mno-amx-bf16", "-mno-amx-int8")

# Linux's arch_prctl codes (asm/prctl.h) and the tiles' state component
_SYS_ARCH_PRCTL = 158  # x86_64
_ARCH_GET_XCOMP_SUPP = 0x1021
XFEATURE_XTILEDATA = 18


def _x86_64() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


@cache
def kernel_grants_amx() -> bool:
    """Whether this Linux kernel can give a process the AMX tiles' state (ARCH_GET_XCOMP_SUPP lists
    XTILEDATA): asking changes nothing, so it is asked here, in any process."""
    if not _x86_64():
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        features = ctypes.c_uint64(0)
        done = libc.syscall(ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_int(_ARCH_GET_XCOMP_SUPP), ctypes.byref(features))
    except (OSError, AttributeError):
        return False
    return done == 0 and bool(features.value >> XFEATURE_XTILEDATA & 1)


def _flags(flags: str | None) -> set[str]:
    return set((cpuinfo_field("flags") if flags is None else flags).split())


def why_not(level: Isa, flags: str | None = None) -> str | None:
    """Why this CPU cannot execute `level` (one clause), or None when it can. `flags`: a
    /proc/cpuinfo flags line in place of this CPU's (what another CPU would say)."""
    if level == Isa.AUTO:
        return None
    if level == Isa.C:
        return None
    if not _x86_64():
        return f"the {level.value} level is x86-64's and this CPU is {platform.machine()}"
    have = _flags(flags)
    missing = [flag for lower in _chain(level) for flag in _NEEDS.get(lower, ()) if flag not in have]
    if missing:
        return f"this CPU lacks {', '.join(missing)}"
    if level == Isa.AMX and flags is None and not kernel_grants_amx():
        return "this Linux kernel does not grant the AMX tiles' state (arch_prctl ARCH_GET_XCOMP_SUPP lacks XTILEDATA)"
    return None


def _chain(level: Isa) -> list[Isa]:
    """`level` and every level below it."""
    chain = [level]
    while chain[-1] in _BELOW:
        chain.append(_BELOW[chain[-1]])
    return chain


def executable_levels(flags: str | None = None) -> tuple[Isa, ...]:
    """The levels this CPU can execute, best first (C always)."""
    return tuple(level for level in LEVELS if why_not(level, flags) is None)


def best_level(flags: str | None = None) -> Isa:
    return executable_levels(flags)[0]


def resolve(level: Isa | str, flags: str | None = None) -> Isa:
    """`level` as a level to build: AUTO the best executable one; IsaUnavailable, one line, for one
    this CPU cannot execute (or a name that is no level)."""
    try:
        level = Isa(level)
    except ValueError:
        raise IsaUnavailable(
            f"{level!r} is no instruction-set level; choose one of {', '.join(i.value for i in Isa)}"
        ) from None
    if level == Isa.AUTO:
        return best_level(flags)
    reason = why_not(level, flags)
    if reason is not None:
        can = ", ".join(i.value for i in executable_levels(flags))
        raise IsaUnavailable(
            f"the {level.value} instruction-set level cannot run here: {reason} (this CPU runs: {can})"
        )
    return level


def compile_flags(level: Isa) -> tuple[str, ...]:
    """The main translation unit's target flags for a level (AUTO: the best executable one's)."""
    level = best_level() if level == Isa.AUTO else level
    if not _x86_64():
        return ("-march=native",) if level != Isa.C else ()
    if level in (Isa.AMX, Isa.AVX512):
        return ("-march=native", *_NO_AMX)
    if level == Isa.AVX2:
        return ("-march=x86-64-v3", "-mtune=native", "-mno-avx512f")
    return ("-march=x86-64", "-mtune=native")
