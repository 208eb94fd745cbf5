"""The torch-free engine: numpy GPT-2 over a zero-copy memory map of model.safetensors.

Its reason to exist is cold start: importing numpy and mapping the file take milliseconds, and
the OS pages the weights in on the first token. Nothing here may import torch, even indirectly.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

from ..engine import Engine, EngineInfo, EngineOptions, gpt2_weight_bytes
from ..models import ModelFiles
from ..weights import mmap_numpy, read_header
from .gpt2_numpy import GPT2, file_mapping, nest_params


def blas_name() -> str:
    """numpy's BLAS as built (e.g. 'scipy-openblas 0.3.31'); cheap, it reads numpy's build record."""
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:  # the build record's layout is numpy's business, not worth failing a load
        return "unknown"


class OpenBLAS:
    """numpy's own OpenBLAS, reached through ctypes (the library is already loaded, so this is cheap).

    Needed because OPENBLAS_NUM_THREADS is read once, when numpy is imported, and a worker child
    imports numpy before it sets the thread variables. None of this is public numpy API, so every
    step may fail and leave BLAS as it is."""

    _PREFIXES = ("scipy_openblas_", "openblas_")  # numpy's wheels rename the symbols; other builds do not
    _SUFFIXES = ("64_", "")

    def __init__(self) -> None:
        self.lib = None
        for path in self._candidates():
            try:
                lib = ctypes.CDLL(str(path))
            except OSError:
                continue
            if self._symbol(lib, "get_num_threads") is not None:
                self.lib = lib
                return

    @staticmethod
    def _candidates() -> list[Path]:
        if sys.platform.startswith("linux"):  # what is really mapped: right whatever the packaging
            try:
                maps = Path("/proc/self/maps").read_text().splitlines()
                found = {line.split()[-1] for line in maps if "openblas" in line and ".so" in line}
                return [Path(p) for p in sorted(found)]
            except OSError:
                pass
        root = Path(np.__file__).parent
        return [p for folder in (root.parent / "numpy.libs", root / ".dylibs") if folder.is_dir()
                for p in sorted(folder.iterdir()) if "openblas" in p.name.lower()]

    def _symbol(self, lib, stem: str):
        for prefix in self._PREFIXES:
            for suffix in self._SUFFIXES:
                function = getattr(lib, f"{prefix}{stem}{suffix}", None)
                if function is not None:
                    return function
        return None

    def threads(self) -> int | None:
        get = self._symbol(self.lib, "get_num_threads") if self.lib else None
        return int(get()) if get is not None else None

    def set_threads(self, count: int) -> None:
        setter = self._symbol(self.lib, "set_num_threads") if self.lib else None
        if setter is not None:
            setter(ctypes.c_int(count))

    def core(self) -> str:
        get = self._symbol(self.lib, "get_corename") if self.lib else None
        if get is None:
            return ""
        get.restype = ctypes.c_char_p
        return (get() or b"").decode(errors="replace")


def _read_ahead(weight) -> None:
    """Ask the kernel to start reading the whole file now (as llama.cpp does): on a cold page cache
    the I/O then overlaps with the rest of start-up instead of stalling each first touch. It
    returns at once and costs ~0.03 ms when the file is already cached."""
    mapping = file_mapping(weight)
    if isinstance(mapping, mmap.mmap) and hasattr(mapping, "madvise") and hasattr(mmap, "MADV_WILLNEED"):
        try:
            mapping.madvise(mmap.MADV_WILLNEED)
        except OSError:  # advice only
            pass


class NumpyEngine(Engine):
    def __init__(self, options: EngineOptions) -> None:
        super().__init__(options)
        self.model: GPT2 | None = None

    def load(self, model: ModelFiles, progress) -> EngineInfo:
        config = model.config
        activation = config.get("activation_function", "gelu_new")
        if activation not in ("gelu_new", "gelu_pytorch_tanh"):  # the same tanh formula; others are not built
            raise ValueError(f"the numpy engine implements gelu_new only, this model uses {activation!r}")
        progress("mapping weights", None)
        flat = mmap_numpy(model.safetensors)
        _read_ahead(flat["wte.weight"])
        self.model = GPT2(nest_params(flat, config["n_layer"]), n_head=config["n_head"],
                          eps=np.float32(config.get("layer_norm_epsilon", 1e-5)), max_seq=model.context)
        widened = sorted({info.dtype for info in read_header(model.safetensors).values()} - {"F32"})
        notes = ["mmap zero-copy" if not widened else f"{'/'.join(widened)} widened to fp32 (copied)"]
        return EngineInfo(device="cpu", dtype="fp32", weight_bytes_per_token=gpt2_weight_bytes(config, 4, 4),
                          notes="; ".join(notes + self._set_threads()))

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

    def close(self) -> None:
        self.model = None  # drops the views; the map closes with its last reference
