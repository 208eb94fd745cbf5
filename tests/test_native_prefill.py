"""The native step's matrix products on every path its builds dispatch to (kernels/prefill.h): the
CPU's own build (here AVX-512 with BF16 and VNNI products), AVX-512 without them, AVX2 and plain C,
each built with its flags and run in a spawned child (the C code never runs in pytest's process).

Each product is held to a numpy reference of what its path computes: float32 sums for float32
weights; for bf16 weights the tokens rounded to bf16 where the build's prefill multiplies bf16
(float32 otherwise); for int8 and 4-bit the activations quantised per block of 32 as decode
quantises them, so the integer sums must agree to float rounding. Shapes are odd on purpose: one
token (decode's path), 3, 17 and 64 tokens, and K and N that are not multiples of the tiles, the
panels or the 64-byte steps."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest

from whistle_stop.backends.engines.native import weights
from whistle_stop.backends.kernels import native
from whistle_stop.backends.machine.cpu import cpuinfo_field

from .engine_process import in_child

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="needs a C compiler")

TOKENS = (1, 3, 17, 64)
# (N, K) per type: N never a multiple of a 32-row panel; K off the float tiles' 16 and the panels'
# 64-byte steps (bf16 K even: its panels hold whole pairs); integer K a multiple of the format's
# block of 32. And a K of more than 512 bytes a row for each type.
SHAPES = {
    weights.WeightType.F32: ((37, 72), (70, 201)),
    weights.WeightType.BF16: ((37, 72), (70, 202), (33, 334)),
    weights.WeightType.I8: ((37, 96), (70, 160), (33, 544)),
    weights.WeightType.Q4: ((37, 96), (70, 160), (33, 544)),
}
BF16_ARITHMETIC = 1  # gpt2_prefill_arithmetic's value for bf16 products


def _cpu_has(*flags: str) -> bool:
    have = set(cpuinfo_field("flags").split())
    return all(flag in have for flag in flags)


# name -> (compile flags replacing -march=native, what this CPU needs to run the build)
BUILDS = {
    "native": ((), ()),
    "avx512 without bf16 and vnni": (
        ("-march=native", "-mno-avx512bf16", "-mno-avx512vnni"),
        ("avx512f", "avx512bw"),
    ),
    "avx2": (("-march=x86-64-v3",), ("avx2", "fma")),
    "plain C": (("-mno-avx2", "-mno-fma"), ()),
}


def _build(name: str, tmp_path: Path) -> Path:
    extra, needs = BUILDS[name]
    if not _cpu_has(*needs):
        pytest.skip(f"this CPU cannot run the {name} build")
    library = tmp_path / f"libgpt2_step_{name.replace(' ', '_')}.so"
    flags = list(native.FLAGS) if not extra else [f for f in native.FLAGS if f != "-march=native"] + list(extra)
    source = Path(native.__file__).with_name("gpt2_step.c")
    subprocess.run([native.compiler(), *flags, str(source), "-o", str(library), *native.LIBS], check=True)
    return library


def _quantised(x: np.ndarray) -> np.ndarray:
    """x [M][K] as decode quantises it: int8 per block of 32 (scale amax / 127, round to nearest even), dequantised."""
    blocks = x.reshape(x.shape[0], -1, weights.QBLOCK)
    scale = (np.abs(blocks).max(axis=2) / np.float32(127)).astype(np.float32)
    inv = np.where(scale > 0, np.float32(1) / np.where(scale > 0, scale, 1), 0).astype(np.float32)
    q = np.rint(blocks * inv[:, :, None])
    return (q * scale[:, :, None]).reshape(x.shape).astype(np.float64)


def _bf16(x: np.ndarray) -> np.ndarray:
    return (weights.to_bf16_bits(x).astype(np.uint32) << 16).view(np.float32)


def _reference(
    stored: weights.StoredMatrix, wtype: weights.WeightType, x: np.ndarray, bf16_products: bool
) -> np.ndarray:
    n, k = len(stored.bias), x.shape[1]
    if wtype == weights.WeightType.F32:
        w, xs = weights.from_panels(stored.data, n, k).astype(np.float64), x.astype(np.float64)
    elif wtype == weights.WeightType.BF16:
        w = (weights.from_panels(stored.data, n, k).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        xs = (_bf16(x) if bf16_products else x).astype(np.float64)
    elif wtype == weights.WeightType.I8:
        unsigned = weights.from_panels(stored.data, n, k).astype(np.float64)  # value + 128
        w, xs = (unsigned - weights.I8_SHIFT) * stored.scale[:, None], _quantised(x)
    else:
        w, xs = weights.unpack_q4(stored.data, n, k).astype(np.float64), _quantised(x)
    assert w.shape == (n, k)
    return xs @ w.T + stored.bias


def _products(library: str, wtype: weights.WeightType) -> list[tuple[int, int, int, np.ndarray, np.ndarray]]:
    """In a child: (M, N, K, ours, reference) for every shape, with this build's products."""
    from whistle_stop.backends.engines.native import step

    lib = step.bind(ctypes.CDLL(library))
    lib.gpt2_set_threads(2)
    bf16_products = lib.gpt2_prefill_arithmetic(int(wtype)) == BF16_ARITHMETIC
    rng = np.random.default_rng(int(wtype))
    out = []
    for n, k in SHAPES[wtype]:
        stored = weights.store(
            rng.normal(0, 0.5, (n, k)).astype(np.float32), rng.normal(0, 1, n).astype(np.float32), wtype
        )
        mat = step.Mat(
            stored.data.ctypes.data, None if stored.scale is None else stored.scale.ctypes.data, stored.bias.ctypes.data
        )
        for m in TOKENS:
            x = rng.normal(0, 1, (m, k)).astype(np.float32)
            y = np.full((m, n), np.nan, np.float32)
            assert lib.gpt2_matmul(ctypes.byref(mat), int(wtype), x.ctypes.data, y.ctypes.data, m, n, k) == 0
            # one token is decode's product: float32 arithmetic whatever the type's prefill uses
            out.append((m, n, k, y, _reference(stored, wtype, x, bf16_products and m > 1)))
    return out


@pytest.mark.parametrize("build", list(BUILDS))
@pytest.mark.parametrize("wtype", list(weights.WeightType), ids=lambda w: w.name.lower())
def test_every_path_computes_its_reference_on_odd_shapes(build, wtype, tmp_path):
    library = _build(build, tmp_path)
    for m, n, k, ours, reference in in_child(_products, str(library), wtype):
        scale = np.abs(reference).max()
        np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-5 * scale, err_msg=f"M={m} N={n} K={k}")


def products_apart_and_together(lib, wtypes: list, seed: int, n: int, k: int, m: int) -> list[str]:
    """Each token's product alone (decode's path) against the same token's among m (prefill's tiles), bit for
    bit, for each weight type; the mismatches. Shared with the AMX tests, which hold the tiles to the same rule."""
    from whistle_stop.backends.engines.native import step

    rng = np.random.default_rng(seed)
    mismatched = []
    for wtype in wtypes:
        w, bias = rng.normal(0, 0.5, (n, k)).astype(np.float32), rng.normal(0, 1, n).astype(np.float32)
        stored = weights.store(w, bias, wtype)
        scale = None if stored.scale is None else stored.scale.ctypes.data
        mat = step.Mat(stored.data.ctypes.data, scale, stored.bias.ctypes.data)
        x = rng.normal(0, 1, (m, k)).astype(np.float32)
        together = np.empty((m, n), np.float32)
        assert lib.gpt2_matmul(ctypes.byref(mat), int(wtype), x.ctypes.data, together.ctypes.data, m, n, k) == 0
        for r in range(m):
            alone = np.empty(n, np.float32)
            assert lib.gpt2_matmul(ctypes.byref(mat), int(wtype), x[r].ctypes.data, alone.ctypes.data, 1, n, k) == 0
            if not np.array_equal(alone, together[r]):
                mismatched.append(f"{wtype.name} token {r}: max |diff| {np.abs(alone - together[r]).max()}")
    return mismatched


def _tokens_apart_and_together(library: str) -> list[str]:
    """In a child: for float32, int8 and 4-bit (whose tiles of several tokens are decode's own products on
    every build), and bf16 where the build's prefill widens its pairs as decode does (no BF16 products),
    each token's product alone (decode: two streams of panels, then single panels) against the same
    token's among 11 (tiles), bit for bit; the mismatches."""
    from whistle_stop.backends.engines.native import step

    lib = step.bind(ctypes.CDLL(library))
    lib.gpt2_set_threads(2)
    wtypes = [weights.WeightType.F32, weights.WeightType.I8, weights.WeightType.Q4]
    if lib.gpt2_prefill_arithmetic(int(weights.WeightType.BF16)) != BF16_ARITHMETIC:
        wtypes.append(weights.WeightType.BF16)
    # nine panels and a short one per thread: streams of four, then singles
    return products_apart_and_together(lib, wtypes, seed=7, n=9 * 2 * 32 + 5, k=96, m=11)


@pytest.mark.parametrize("build", list(BUILDS))
def test_a_tokens_product_alone_equals_it_among_others_bit_for_bit(build, tmp_path):
    """What a speculative verify pass relies on, on every build's paths (the engines' test runs one)."""
    assert in_child(_tokens_apart_and_together, str(_build(build, tmp_path))) == []


def _paths(library: str) -> list[tuple[str, int]]:
    from whistle_stop.backends.engines.native import step

    lib = step.bind(ctypes.CDLL(library))
    return [(lib.gpt2_paths(int(w)).decode(), lib.gpt2_prefill_arithmetic(int(w))) for w in weights.WeightType]


def test_each_build_says_which_path_its_prefill_takes(tmp_path):
    """The notes name the instructions, and the arithmetic follows them: bf16 products only where
    the build has them, int8 for the integer types on every build (decode's products or VNNI's)."""
    plain = in_child(_paths, str(_build("plain C", tmp_path)))
    assert [a for _, a in plain] == [0, 0, 2, 2]
    assert all(text.startswith("prefill: ") and "; decode: " in text for text, _ in plain)
    assert all("plain C integer panel tiles" in text for text, _ in plain[2:])
    if _cpu_has("avx512f", "avx512bw", "avx512_bf16", "avx512_vnni"):
        fast = in_child(_paths, str(_build("native", tmp_path)))
        assert "avx512-bf16" in fast[1][0] and fast[1][1] == BF16_ARITHMETIC
        assert "avx512-vnni" in fast[2][0] and "avx512-vnni" in fast[3][0]
    if _cpu_has("avx2", "fma"):
        avx2 = in_child(_paths, str(_build("avx2", tmp_path)))
        assert "avx2 float32 panel tiles" in avx2[0][0] and "avx2 panel tiles" in avx2[1][0]
        assert [a for _, a in avx2] == [0, 0, 2, 2]
    if _cpu_has("avx512f", "avx512bw"):
        widened = in_child(_paths, str(_build("avx512 without bf16 and vnni", tmp_path)))
        assert "widened" in widened[1][0] and widened[1][1] == 0
