"""Seeded random GPT-2 weights in the exact shapes of a bundled config, saved as safetensors.

Made with numpy only, so the torch-free engine can use them too. Keys follow the hub's
`gpt2/model.safetensors` (no `transformer.` prefix, Conv1D weights stored [in, out]).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from ..storage.atomic import atomic_write

SEED = 0
# The file's layout, in its cache folder's name: 2 holds one metadata key (see write_random_model), so
# a folder written with several, whose header and hash differed per machine, is not reused.
FILE_FORMAT = 2


def gpt2_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    d, v, n = config["n_embd"], config["vocab_size"], config["n_positions"]
    inner = config.get("n_inner") or 4 * d
    shapes: dict[str, tuple[int, ...]] = {"wte.weight": (v, d), "wpe.weight": (n, d)}
    for i in range(config["n_layer"]):
        h = f"h.{i}."
        shapes.update(
            {
                h + "ln_1.weight": (d,),
                h + "ln_1.bias": (d,),
                h + "attn.c_attn.weight": (d, 3 * d),
                h + "attn.c_attn.bias": (3 * d,),
                h + "attn.c_proj.weight": (d, d),
                h + "attn.c_proj.bias": (d,),
                h + "ln_2.weight": (d,),
                h + "ln_2.bias": (d,),
                h + "mlp.c_fc.weight": (d, inner),
                h + "mlp.c_fc.bias": (inner,),
                h + "mlp.c_proj.weight": (inner, d),
                h + "mlp.c_proj.bias": (d,),
            }
        )
    shapes.update({"ln_f.weight": (d,), "ln_f.bias": (d,)})
    return shapes


def random_gpt2_weights(config: dict, seed: int = SEED) -> dict[str, np.ndarray]:
    """GPT-2's own initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2L)."""
    rng = np.random.default_rng(seed)
    std = config.get("initializer_range", 0.02)
    residual_std = std / np.sqrt(2 * config["n_layer"])
    tensors = {}
    for name, shape in gpt2_shapes(config).items():
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
            tensors[name] = np.ones(shape, np.float32)
        elif len(shape) == 1:
            tensors[name] = np.zeros(shape, np.float32)
        else:
            scale = residual_std if name.endswith("c_proj.weight") else std
            tensors[name] = rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)
    return tensors


def write_random_model(config: dict, folder: Path, seed: int = SEED) -> None:
    """config.json + model.safetensors in `folder`; the weights file is written last, atomically."""
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_write(folder / "config.json") as f:
        json.dump(config, f, indent=2)
    tmp = folder / ".model.safetensors.partial"
    # One metadata key: safetensors writes its metadata map in a per-process random order, so with
    # several the same weights made a different file, and a different weights hash, on each machine.
    save_file(random_gpt2_weights(config, seed), str(tmp), metadata={"format": "pt"})
    tmp.replace(folder / "model.safetensors")
