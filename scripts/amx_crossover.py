"""Where prefill's AMX tiles start to pay: each type's layer products at M tokens, tiles against vectors.

    python -m scripts.amx_crossover [--tokens 2,4,8,12,16,24,32,48,64,128] [--rounds 9] [--threads 2]

One AMX build of the native step (kernels/gpt2_step.c with amx_prefill.c) in this process, gpt2's four
layer matrices (qkv, proj, fc, fc2) of four layers at each stored type, random; per M, a pass over
the 48 products (the four layers three times: as many as gpt2's 12) with the tiles and a pass with
the AVX-512 tiles alternate `--rounds` times (gpt2_set_amx_min_tokens toggles the dispatch: the same
library, weights and activations), and the median of the rounds' ratios is the figure. A ratio under
1 means the tiles are faster; the crossover is the least M from which they stay faster. The fastest
pass of each (`best`) is printed too: on a shared machine a busy phase only ever slows a pass. Run it
alone: the figures are the machine's.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time

import numpy as np

from whistle_stop.backends.engines.native import step, weights
from whistle_stop.backends.machine.isa import Isa

D, INNER, LAYERS, REPEATS = 768, 3072, 4, 3
SHAPES = ((3 * D, D), (D, D), (INNER, D), (D, INNER))  # (N, K) of qkv, proj, fc, fc2


def _matrices(wtype: weights.WeightType, rng: np.random.Generator) -> list[tuple[step.Mat, object, int, int]]:
    out = []
    for _ in range(LAYERS):
        for n, k in SHAPES:
            stored = weights.store(rng.normal(0, 0.02, (n, k)).astype(np.float32), np.zeros(n, np.float32), wtype)
            scale = None if stored.scale is None else stored.scale.ctypes.data
            out.append((step.Mat(stored.data.ctypes.data, scale, stored.bias.ctypes.data), stored, n, k))
    return out


def _pass_ms(lib: ctypes.CDLL, wtype: weights.WeightType, mats: list, x: np.ndarray, y: np.ndarray, m: int) -> float:
    start = time.perf_counter()
    for _ in range(REPEATS):
        for mat, _stored, n, k in mats:
            lib.gpt2_matmul(ctypes.byref(mat), int(wtype), x.ctypes.data, y.ctypes.data, m, n, k)
    return (time.perf_counter() - start) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", default="2,4,8,12,16,24,32,48,64,128")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--types", default="bf16,i8,q4", help="of bf16, i8, q4")
    args = parser.parse_args()
    lib = step.library(Isa.AMX)
    lib.gpt2_set_threads(args.threads)
    rng = np.random.default_rng(0)
    tokens = [int(t) for t in args.tokens.split(",")]
    x = rng.normal(0, 1, (max(tokens), INNER)).astype(np.float32)
    y = np.empty((max(tokens), INNER), np.float32)
    print(f"tiles: {lib.gpt2_amx_tiles().decode()}; {args.threads} threads, median of {args.rounds} alternations")
    print("| type | M | vectors ms | tiles ms | tiles/vectors (median) | best vectors | best tiles | best ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for wtype in (weights.WeightType[name.upper()] for name in args.types.split(",")):
        mats = _matrices(wtype, rng)
        for m in tokens:
            ratios, vector_ms, tile_ms = [], [], []
            for _ in range(args.rounds):
                lib.gpt2_set_amx_min_tokens(int(wtype), 0)
                vector_ms.append(_pass_ms(lib, wtype, mats, x, y, m))
                lib.gpt2_set_amx_min_tokens(int(wtype), 2)
                tile_ms.append(_pass_ms(lib, wtype, mats, x, y, m))
                ratios.append(tile_ms[-1] / vector_ms[-1])
            print(
                f"| {wtype.name.lower()} | {m} | {statistics.median(vector_ms):.2f} | {statistics.median(tile_ms):.2f} "
                f"| {statistics.median(ratios):.3f} | {min(vector_ms):.2f} | {min(tile_ms):.2f} "
                f"| {min(tile_ms) / min(vector_ms):.3f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
