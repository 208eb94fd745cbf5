"""How the C kernels are built and bound: one shared header, keyed into the cache; the compiler's
errors kept whole; the step's ctypes structs checked against the C ones at load (in a child)."""

from __future__ import annotations

import ctypes
import shutil

import pytest

from whistle_stop.backends.kernels import native

from .engine_process import in_child

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="needs a C compiler")


def test_both_kernels_include_the_shared_products_and_their_key_follows_it(tmp_path, monkeypatch):
    for name in ("gemv", "gpt2_step"):
        files = native.sources(name)
        assert '#include "products.h"' in files[f"{name}.c"] and "products.h" in files
    assert "static inline void rows4_bf16_pairs" not in native.sources("gpt2_step")["gpt2_step.c"]  # not copied
    cc = native.compiler()
    key = native.cache_key("\n".join(native.sources("gemv").values()), cc)
    for path in native.sources("gemv"):
        shutil.copy(native._HERE / path, tmp_path / path)
    monkeypatch.setattr(native, "_HERE", tmp_path)
    assert native.cache_key("\n".join(native.sources("gemv").values()), cc) == key
    (tmp_path / "products.h").write_text((tmp_path / "products.h").read_text() + "\n/* changed */\n")
    assert native.cache_key("\n".join(native.sources("gemv").values()), cc) != key


def test_the_compilers_errors_survive_its_warnings(tmp_path):
    """Warnings come first; the error after a screenful of them is the line that says what broke."""
    source = tmp_path / "broken.c"
    source.write_text(
        "".join(f'#warning "noise {i} {"x" * 60}"\n' for i in range(20)) + "int f(void) { return undeclared_name; }\n"
    )
    with pytest.raises(native.KernelUnavailable) as caught:
        native.compile_and_link(native.compiler(), source, tmp_path / "libbroken.so")
    assert "undeclared_name" in str(caught.value) and "noise" not in str(caught.value)
    assert "noise 19" in caught.value.compiler_output and "undeclared_name" in caught.value.compiler_output


def test_compiler_errors_without_the_word_keep_the_whole_output():
    assert native.compiler_errors("  ld: cannot find -lfoo\n") == "ld: cannot find -lfoo"
    assert (
        native.compiler_errors("a.c:1: warning: w\na.c:2: error: e1\na.c:3: error: e2\n")
        == "a.c:2: error: e1; a.c:3: error: e2"
    )


class _Mat(ctypes.Structure):
    """gpt2_step.c's Mat with `scale` one int wide: every offset after it moves."""

    _fields_ = [("w", ctypes.c_void_p), ("scale", ctypes.c_int32), ("bias", ctypes.c_int32)]


_Mat.__name__ = "Mat"


def _bind(wrong: bool) -> str:
    from whistle_stop.backends.engines.native import step

    lib = step.library()  # bound once the real structs matched
    if wrong:
        step.bind(lib, (_Mat, step.Layer, step.Model))
    return "bound"


def test_the_steps_structs_are_checked_against_the_c_ones_at_load():
    from whistle_stop.backends.engines.native.step import LayoutMismatch

    assert in_child(_bind, False) == "bound"
    with pytest.raises(LayoutMismatch, match=r"Mat: C 24, ctypes 16; Mat\.bias: C 16:8, ctypes 12:4"):
        in_child(_bind, True)


def test_the_layout_check_names_missing_and_extra_fields():
    from whistle_stop.backends.engines.native import step

    class Mat(ctypes.Structure):
        _fields_ = [
            ("w", ctypes.c_void_p),
            ("scale", ctypes.c_void_p),
            ("bias", ctypes.c_void_p),
            ("extra", ctypes.c_int64),
        ]

    c_side = "Mat=24;Mat.w=0:8;Mat.scale=8:8;Mat.bias=16:8"
    step.check_layout(c_side, (step.Mat,))
    with pytest.raises(step.LayoutMismatch, match=r"Mat: C 24, ctypes 32; Mat\.extra: C absent, ctypes 24:8"):
        step.check_layout(c_side, (Mat,))
