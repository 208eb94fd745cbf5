"""The torch-free engine: numpy GPT-2 over a zero-copy memory map of model.safetensors.

Its reason to exist is cold start: importing numpy and mapping the file take milliseconds, and
the OS pages the weights in on the first token. Nothing here may import torch, even indirectly.
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence

import numpy as np

from ...engine import Engine, EngineInfo, EngineOptions
from ...machine.blas import OpenBLAS, blas_name
from ...sources.model_files import ModelFiles
from ...sources.weights import mmap_numpy, read_header
from .model import GPT2, file_mapping, nest_params


def _read_ahead(weight) -> None:
    """Ask the kernel to start reading the whole file now (as llama.cpp does): on a cold page cache
    the I/O then overlaps with the rest of start-up instead of stalling each first touch. It
    returns at once and costs next to nothing when the file is already cached."""
    mapping = file_mapping(weight)
    if isinstance(mapping, mmap.mmap) and hasattr(mapping, "madvise") and hasattr(mmap, "MADV_WILLNEED"):
        try:
            mapping.madvise(mmap.MADV_WILLNEED)
        except OSError:  # advice only
            pass


# The runtime's functions a profile times (engines/numpy_runtime/model.py; categories.py names them).
PROFILED_FUNCTIONS = ("linear", "lm_head", "attention", "softmax", "kv_write", "layer_norm", "gelu_new")


class NumpyEngine(Engine):
    def __init__(self, name: str, options: EngineOptions) -> None:
        super().__init__(name, options)
        self.model: GPT2 | None = None

    def load(self, model: ModelFiles, progress) -> EngineInfo:
        config = model.gpt2_config.require_supported(self.name)  # its gelu_new is every admitted activation
        progress("mapping weights", None)
        flat = mmap_numpy(model.safetensors)
        _read_ahead(flat["wte.weight"])
        self.model = GPT2(
            nest_params(flat, config.n_layer),
            n_head=config.n_head,
            eps=np.float32(config.layer_norm_epsilon),
            max_seq=config.n_positions,
        )
        widened = sorted({info.dtype for info in read_header(model.safetensors).values()} - {"F32"})
        notes = ["mmap zero-copy" if not widened else f"{'/'.join(widened)} widened to fp32 (copied)"]
        return EngineInfo(
            device="cpu",
            dtype="fp32",
            weight_bytes_per_token=config.weight_bytes(4, 4),
            kv_bytes_per_position=config.kv_bytes_per_position(4),
            notes="; ".join(notes + self._set_threads()),
        )

    def _set_threads(self) -> list[str]:
        blas = OpenBLAS()
        if self.options.threads > 0:
            blas.set_threads(self.options.threads)
        core = blas.core()
        name = blas_name() + (f" ({core})" if core else "")
        actual = blas.threads()
        if actual is None:
            return [f"BLAS={name}", "BLAS threads unknown (could not reach OpenBLAS)"]
        asked = self.options.threads
        return [f"BLAS={name}", f"threads={actual}" + (f" (asked {asked})" if asked and asked != actual else "")]

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        return self.model.prefill(np.asarray(token_ids, dtype=np.intp))

    def decode(self, token_id: int) -> np.ndarray:
        return self.model.decode(int(token_id))

    def forward_logits(self, token_ids: Sequence[int]) -> np.ndarray:
        return self.model.forward_logits(np.asarray(token_ids, dtype=np.intp))

    def profiler(self):
        """Timers around the runtime's own functions (numpy has no profiler of its own)."""
        from ...profilers.categories import OpFamily
        from ...profilers.timers import FunctionTimers
        from . import model

        return FunctionTimers(model, PROFILED_FUNCTIONS, OpFamily.NUMPY_FUNCTIONS)

    def close(self) -> None:
        self.model = None  # drops the views; the map closes with its last reference
