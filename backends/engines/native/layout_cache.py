"""The native engines' matrices at their stored type, cached per weights and stored type
(storage/artifact_cache), so converting them (transposing, rounding to bf16, quantising to int8 or
4 bits) is a one-time build, as ONNX Runtime's quantisation is, and not part of every cold start.
A load then reads them into this process's memory (never a view of the file), in one region advised for
huge pages (storage/huge_pages: the step reads every weight each token)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from ...progress import ProgressFn
from ...sources.model_files import ModelFiles
from ...storage import artifact_cache
from ...storage.huge_pages import HugeRegion, load_safetensors
from ..artifact_folders import NATIVE_LAYOUT_FILE, NATIVE_LAYOUT_KIND

# weights.py's layouts: a change of any stored type's layout bumps it, so an old cache is rebuilt
LAYOUT = 4  # 2: float32 and bf16 as panels of 32 rows; 3: int8 too; 4: 4-bit too


def cached_arrays(
    model: ModelFiles,
    dtype: str,
    make: Callable[[], dict[str, np.ndarray]],
    progress: ProgressFn,
    huge_pages: bool = True,
) -> tuple[dict[str, np.ndarray], artifact_cache.Artifact, HugeRegion]:
    """The stored matrices at `dtype` (step.stored_arrays' names), made by `make` and cached on first use,
    and the region they lie in (advised for huge pages unless `huge_pages` is False)."""

    def build(staging: Path) -> dict:
        progress(f"laying out the weights as {dtype} (once per model)", None)
        save_file(make(), str(staging / NATIVE_LAYOUT_FILE))
        return {"layout": LAYOUT}

    artefact = artifact_cache.ensure(
        NATIVE_LAYOUT_KIND, model.weights_hash, dtype, build, progress, meta={"layout": LAYOUT}
    )
    arrays, region = load_safetensors(artefact.folder / NATIVE_LAYOUT_FILE, huge=huge_pages)
    return arrays, artefact, region
