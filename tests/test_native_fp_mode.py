"""The native kernels never change the floating-point mode of the process that loads them.

Linked with -ffast-math, GCC before 13 adds crtfastmath.o, whose constructor turns on flush-to-zero
and denormals-are-zero for the loading thread: the worker's sampler (numpy, same thread) would then
compute with subnormals read and written as zero. The kernels are compiled with fast maths and
linked without it (kernels/native.py). Checked in a spawned child: loading native code here would
change pytest's own process.
"""

from __future__ import annotations

import platform
import subprocess

import numpy as np
import pytest

from tests.engine_process import in_child
from whistle_stop.backends.kernels import native

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="needs a C compiler")

X86 = platform.machine().lower() in ("x86_64", "amd64")

# A library that does what crtfastmath.o does (FTZ | DAZ in MXCSR on load): the probe must see it.
_SETS_FTZ = """
#include <xmmintrin.h>
__attribute__((constructor)) static void set_ftz_daz(void) { _mm_setcsr(_mm_getcsr() | 0x8040); }
int ws_loaded(void) { return 1; }
"""


def subnormals_survive() -> dict[str, bool]:
    """Whether numpy's float32 arithmetic keeps subnormals: as inputs (DAZ zeroes them) and as results (FTZ)."""
    tiny = np.array([1e-40], np.float32)  # below float32's smallest normal, 1.18e-38
    small = np.array([1e-38], np.float32)
    return {"inputs": bool((tiny * np.float32(1.0))[0] != 0), "results": bool((small * np.float32(0.25))[0] != 0)}


def _after_loading(libraries: list[str]) -> dict[str, dict[str, bool]]:
    """In a fresh process: the check before and after opening `libraries` (kernel names or .so paths)."""
    import ctypes

    before = subnormals_survive()
    for library in libraries:
        if library.endswith(".so"):
            ctypes.CDLL(library)
        else:
            native.load(library)
    return {"before": before, "after": subnormals_survive()}


def test_loading_the_kernels_keeps_subnormals():
    seen = in_child(_after_loading, ["gemv", "gpt2_step"])
    assert seen["before"] == {"inputs": True, "results": True}
    assert seen["after"] == {"inputs": True, "results": True}, "a kernel library changed the process's FP mode"


@pytest.mark.skipif(not X86, reason="MXCSR is x86's")
def test_the_check_sees_a_library_that_sets_ftz(tmp_path):
    """The probe itself: a library that sets FTZ/DAZ as crtfastmath.o does is caught."""
    source = tmp_path / "sets_ftz.c"
    source.write_text(_SETS_FTZ)
    library = tmp_path / "libsets_ftz.so"
    subprocess.run([native.compiler(), "-O2", "-fPIC", "-shared", str(source), "-o", str(library)], check=True)
    seen = in_child(_after_loading, [str(library)])
    assert seen["before"] == {"inputs": True, "results": True}
    assert seen["after"] == {"inputs": False, "results": False}


def test_the_cache_key_follows_both_steps_flags(monkeypatch):
    """Built libraries are keyed by compile and link flags: a change of either builds afresh."""
    cc, source = native.compiler(), "int f(void) { return 1; }"
    key = native.cache_key(source, cc)
    monkeypatch.setattr(native, "LINK_FLAGS", native.LINK_FLAGS + ("-ffast-math",))
    linked_otherwise = native.cache_key(source, cc)
    monkeypatch.setattr(native, "COMPILE_FLAGS", native.COMPILE_FLAGS + ("-fno-fast-math",))
    assert len({key, linked_otherwise, native.cache_key(source, cc)}) == 3


def test_a_built_kernel_is_linked_without_fast_math(tmp_path):
    """The recipe itself: compile (fast maths) and link (none) in two steps, nothing of crtfastmath.o."""
    source = tmp_path / "k.c"
    source.write_text("float scale(float x) { return x * 0.5f; }\n")
    library = tmp_path / "libk.so"
    native.compile_and_link(native.compiler(), source, library)
    assert library.exists() and not source.with_suffix(".o").exists()
    assert "-ffast-math" in native.COMPILE_FLAGS and "-ffast-math" not in native.LINK_FLAGS
    symbols = subprocess.run(["nm", str(library)], capture_output=True, text=True)
    if symbols.returncode == 0:  # (binutils' nm, where there is one)
        assert "set_fast_math" not in symbols.stdout
