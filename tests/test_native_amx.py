"""Prefill's AMX tiles (kernels/amx_prefill.c behind kernels/tiles.h), on every CPU.

The AMX kernel is built against tiles.h's plain-C model of the tiles at each instruction-set level
this CPU executes (so its tiling, padding, the 4-bit panels' unpacking and the per-thread tile
configuration run everywhere), and with the real instructions where the dispatch says AMX is
executable. Each build's products are held to tests/test_native_prefill.py's references on its odd
shapes (one token, 3, 17, 64 and 100: M off the tiles' 16 rows and past a call's 64 tokens; K off
the bf16 tiles' 32), the tiles taking every product of more than one token. The model itself is held
to numpy on each tile instruction, and on an AMX CPU to the hardware, bit for bit. A level this CPU
cannot execute is skipped with the reason. Every C call runs in a spawned child (tests/engine_process.py).
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

from whistle_stop.backends.engines.native import weights
from whistle_stop.backends.kernels import native
from whistle_stop.backends.machine.cpu import cpuinfo_field
from whistle_stop.backends.machine.isa import Isa, executable_levels, why_not

from .engine_process import in_child
from .test_native_prefill import SHAPES, _reference, products_apart_and_together

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="needs a C compiler")

TOKENS = (1, 3, 17, 64, 100)
INT_TYPES = (weights.WeightType.I8, weights.WeightType.Q4)
# name -> (level, tile model): the model over every level's build, and the real tiles
BUILDS = {
    "model-c": (Isa.C, True),
    "model-avx2": (Isa.AVX2, True),
    "model-avx512": (Isa.AVX512, True),
    "amx": (Isa.AMX, False),
}


def _executable(build: str) -> tuple[Isa, bool]:
    level, model = BUILDS[build]
    reason = why_not(level)
    if reason is not None:
        kind = "the tile model over the" if model else "the real tiles at the"
        pytest.skip(f"{kind} {level.value} level does not run here: {reason}")
    return level, model


def _library(level: Isa, model: bool) -> ctypes.CDLL:
    from whistle_stop.backends.engines.native import step

    lib = step.bind(native.load("gpt2_step", level, model))
    lib.gpt2_set_threads(2)  # two threads: each loads its own tile configuration
    for wtype in (weights.WeightType.BF16, *INT_TYPES):
        lib.gpt2_set_amx_min_tokens(int(wtype), 2)  # the tiles for every product of more than one token
    return lib


def _products(level: Isa, model: bool, wtype: weights.WeightType) -> tuple[str, list]:
    """In a child: (the build's prefill path for the type, [(M, N, K, ours, reference)])."""
    from whistle_stop.backends.engines.native import step

    lib = _library(level, model)
    rng = np.random.default_rng(int(wtype) + 10)
    out = []
    for n, k in SHAPES[wtype]:
        stored = weights.store(
            rng.normal(0, 0.5, (n, k)).astype(np.float32), rng.normal(0, 1, n).astype(np.float32), wtype
        )
        scale = None if stored.scale is None else stored.scale.ctypes.data
        mat = step.Mat(stored.data.ctypes.data, scale, stored.bias.ctypes.data)
        for m in TOKENS:
            x = rng.normal(0, 1, (m, k)).astype(np.float32)
            y = np.full((m, n), np.nan, np.float32)
            assert lib.gpt2_matmul(ctypes.byref(mat), int(wtype), x.ctypes.data, y.ctypes.data, m, n, k) == 0
            out.append((m, n, k, y, _reference(stored, wtype, x, wtype == weights.WeightType.BF16 and m > 1)))
    return lib.gpt2_paths(int(wtype)).decode(), out


@pytest.mark.parametrize("build", list(BUILDS))
@pytest.mark.parametrize("wtype", [weights.WeightType.BF16, *INT_TYPES], ids=lambda w: w.name.lower())
def test_the_amx_kernel_computes_its_reference_on_odd_shapes(build, wtype):
    level, model = _executable(build)
    path, products = in_child(_products, level, model, wtype)
    assert path.startswith("prefill: " + ("amx tile model (plain C)" if model else "amx") + " tiles (")
    for m, n, k, ours, reference in products:
        scale = np.abs(reference).max()
        np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-5 * scale, err_msg=f"M={m} N={n} K={k}")


def _alone_and_together(level: Isa, model: bool) -> list[str]:
    """In a child: each token's integer products alone (decode's VNNI streams) against the same token's
    among 37 (the tiles), bit for bit; the mismatches."""
    return products_apart_and_together(_library(level, model), list(INT_TYPES), seed=5, n=9 * 2 * 32 + 5, k=160, m=37)


@pytest.mark.parametrize("build", ["model-avx512", "amx"])
def test_the_integer_tiles_equal_decodes_vnni_products_bit_for_bit(build):
    """What lets a verify pass (native-spec) take the tiles: each block's exact int32 product, then one
    fused multiply-add per block in block order, as decode's VNNI products make them."""
    level, model = _executable(build)
    if "avx512_vnni" not in cpuinfo_field("flags").split():
        pytest.skip("decode's integer products are VNNI's only on a CPU with AVX-512 VNNI")
    assert in_child(_alone_and_together, level, model) == []


def _all_products(level: Isa, model: bool) -> dict[str, list[np.ndarray]]:
    return {
        wtype.name: [y for *_, y, _ref in _products(level, model, wtype)[1]]
        for wtype in (weights.WeightType.BF16, *INT_TYPES)
    }


def test_the_tile_model_computes_what_the_real_tiles_do():
    """Integer products bit for bit. bf16 within float32 rounding: the hardware's tdpbf16ps rounds its
    sums otherwise than the SDM's pseudo-code (two rounded adds per pair), which the model follows;
    neither an add per pair, nor a pair's sum first, nor one rounding per pair matched it here."""
    if why_not(Isa.AMX) is not None:
        pytest.skip(f"the real tiles do not run here: {why_not(Isa.AMX)}")
    real, modelled = in_child(_all_products, Isa.AMX, False), in_child(_all_products, Isa.AVX512, True)
    for name in real:
        for a, b in zip(real[name], modelled[name], strict=True):
            if name == "BF16":
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6 * np.abs(a).max())
            else:
                np.testing.assert_array_equal(a, b)


# ---- the tile instructions alone: tiles.h's model against numpy, and against the hardware ----------

_PROBE = r"""
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "tiles.h"
/* Reads A (16 x 64 bytes) and B (16 x 64 bytes) from stdin, prints C for each instruction as hex dwords.
 * argv[1] "noconfig": a tile operation without a configuration. */
static const TileConfig CFG = {.palette = 1, .colsb = {64, 64, 64}, .rows = {16, 16, 16}};
int main(int argc, char **argv) {
    static unsigned char a[16 * 64], b[16 * 64];
    static unsigned int c[16 * 16];
    if (fread(a, 1, sizeof a, stdin) != sizeof a || fread(b, 1, sizeof b, stdin) != sizeof b) return 2;
#ifndef WS_TILE_MODEL
    if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) return 3;
#endif
    if (argc > 1) { TILE_ZERO(0); return 0; }
    TILE_CONFIG(&CFG);
    for (int op = 0; op < 5; op++) {
        TILE_LOAD(0, c, 64); /* C starts at the last op's result: accumulation is tested too */
        TILE_LOAD(1, a, 64);
        TILE_LOAD(2, b, 64);
        if (op == 0) { TILE_ZERO(0); TILE_DPBF16PS(0, 1, 2); }
        if (op == 1) { TILE_ZERO(0); TILE_DPBSUD(0, 1, 2); }
        if (op == 2) { TILE_DPBUSD(0, 1, 2); }
        if (op == 3) { TILE_ZERO(0); TILE_DPBSSD(0, 1, 2); }
        if (op == 4) { TILE_ZERO(0); TILE_DPBF16PS(0, 1, 2); TILE_DPBF16PS(0, 1, 2); }
        TILE_STORE(0, c, 64);
        for (int i = 0; i < 256; i++) printf("%08x%c", c[i], i % 16 == 15 ? '\n' : ' ');
    }
    TILE_RELEASE();
    return 0;
}
"""


def _probe(tmp_path: Path, model: bool) -> Path:
    source = tmp_path / "tiles_probe.c"
    source.write_text(_PROBE)
    binary = tmp_path / ("probe_model" if model else "probe_amx")
    flags = (
        ["-DWS_TILE_MODEL=1", "-march=x86-64"] if model else ["-march=native", "-mamx-tile", "-mamx-bf16", "-mamx-int8"]
    )
    kernels = Path(native.__file__).parent
    subprocess.run(
        [native.compiler(), "-O2", *flags, "-I", str(kernels), str(source), "-o", str(binary), "-lm"], check=True
    )
    return binary


def _operands() -> tuple[np.ndarray, np.ndarray, bytes]:
    """A and B as bytes: bf16 values that are exact in bf16 (so the sums are checkable), read as bytes too."""
    rng = np.random.default_rng(3)
    a = (rng.integers(-64, 64, (16, 32)) / 8).astype(np.float32)
    b = (rng.integers(-64, 64, (16, 32)) / 8).astype(np.float32)
    a16, b16 = (a.view(np.uint32) >> 16).astype(np.uint16), (b.view(np.uint32) >> 16).astype(np.uint16)
    return a16, b16, a16.tobytes() + b16.tobytes()


def _run_probe(binary: Path, data: bytes) -> list[np.ndarray]:
    done = subprocess.run([str(binary)], input=data, capture_output=True, check=True)
    rows = [[int(v, 16) for v in line.split()] for line in done.stdout.decode().splitlines()]
    return [np.array(rows[16 * i : 16 * (i + 1)], np.uint32) for i in range(5)]


def test_the_tile_model_computes_each_instructions_documented_products(tmp_path):
    a16, b16, data = _operands()
    out = _run_probe(_probe(tmp_path, model=True), data)
    af = (a16.astype(np.uint32) << 16).view(np.float32).astype(np.float64)  # [16 m][32: 16 pairs]
    bf = (b16.astype(np.uint32) << 16).view(np.float32).astype(np.float64)  # [16 k][32: 16 n pairs]
    bf16 = np.einsum("mkp,knp->mn", af.reshape(16, 16, 2), bf.reshape(16, 16, 2))  # exact: small multiples of 1/64
    np.testing.assert_array_equal(out[0].view(np.float32), bf16.astype(np.float32))
    np.testing.assert_array_equal(out[4].view(np.float32), (2 * bf16).astype(np.float32))
    ab, bb = (
        np.frombuffer(a16.tobytes(), np.uint8).reshape(16, 16, 4),
        np.frombuffer(b16.tobytes(), np.uint8).reshape(16, 16, 4),
    )
    signed = {True: lambda v: v.view(np.int8).astype(np.int64), False: lambda v: v.astype(np.int64)}

    def dp(a_signed: bool, b_signed: bool) -> np.ndarray:
        return np.einsum("mki,kni->mn", signed[a_signed](ab), signed[b_signed](bb))

    sud = dp(True, False)
    np.testing.assert_array_equal(out[1].view(np.int32), sud.astype(np.int32))
    np.testing.assert_array_equal(out[2].view(np.int32), (sud + dp(False, True)).astype(np.int32))  # accumulates
    np.testing.assert_array_equal(out[3].view(np.int32), dp(True, True).astype(np.int32))


def test_the_tile_model_traps_as_the_hardware_does_without_a_configuration(tmp_path):
    """A thread's first tile operation before its configuration: SIGILL, on every CPU."""
    done = subprocess.run([str(_probe(tmp_path, model=True)), "noconfig"], input=_operands()[2], capture_output=True)
    assert done.returncode == -signal.SIGILL


def test_the_tile_model_equals_the_hardware_bit_for_bit(tmp_path):
    if why_not(Isa.AMX) is not None:
        pytest.skip(f"the real tiles do not run here: {why_not(Isa.AMX)}")
    data = _operands()[2]
    rng = np.random.default_rng(11)
    for operands in (data, rng.integers(0, 256, len(data), np.uint8).tobytes()):  # and any bytes: NaNs, denormals
        real, model = (
            _run_probe(_probe(tmp_path, model=False), operands),
            _run_probe(_probe(tmp_path, model=True), operands),
        )
        for op in (1, 2, 3):
            np.testing.assert_array_equal(real[op], model[op])
        if operands is data:
            np.testing.assert_array_equal(real[0], model[0])
            np.testing.assert_array_equal(real[4], model[4])


def test_the_levels_this_cpu_executes_are_named():
    """Says in the test output which levels ran here (pytest -rA shows it)."""
    levels = executable_levels()
    print("executable levels here:", ", ".join(level.value for level in levels))
    print(
        "not here:", "; ".join(f"{lvl.value}: {why_not(lvl)}" for lvl in Isa if lvl != Isa.AUTO and lvl not in levels)
    )
    assert Isa.C in levels
