"""whistle-stop's own C runtime: one call per token (backends/kernels/gpt2_step.c).

The weights come from a zero-copy map of model.safetensors (as the numpy engine's) and are put
in the step's layout once at load: [out, in] rows at float32, bf16, int8 (a scale per row) or
4-bit (a scale per block of 32). Nothing here imports torch. The kernel is built on first use
with the machine's C compiler (cached per CPU); without one the engine says so at load.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from ...engine import Engine, EngineInfo, EngineOptions
from ...kernels.native import KernelUnavailable, build_report
from ...machine.isa import Isa, IsaUnavailable, executable_levels, resolve
from ...sources.model_files import ModelFiles
from ...sources.weights import mmap_numpy
from ...storage.huge_pages import describe as huge_pages_note
from ..native_options import NativeOptions
from ..numpy_runtime.model import nest_params
from . import layout_cache
from .step import TIMERS, KvCache, NativeGPT2, bind_team, library, stored_arrays
from .weights import QBLOCK, WeightType

_DTYPES = {"fp32": WeightType.F32, "bf16": WeightType.BF16, "int8": WeightType.I8, "int4": WeightType.Q4}
_ARITHMETIC = ("fp32", "bf16", "int8")  # gpt2_prefill_arithmetic's values
_KV_NOTE = {
    KvCache.F32: "KV cache float32",
    KvCache.I8: "KV cache int8 (each head's row of keys or values with a float32 scale; --native-kv int8)",
}
_HOW = {
    WeightType.F32: "float32 weights",
    WeightType.BF16: "bf16 weights",
    WeightType.I8: (
        f"int8 weights (symmetric, a float32 scale per row); activations quantised to int8 per "
        f"block of {QBLOCK} for the products (int32 sums), in prefill, decode and scoring alike"
    ),
    WeightType.Q4: (
        f"4-bit weights (symmetric, a float32 scale per block of {QBLOCK}); activations quantised "
        f"to int8 per block of {QBLOCK} for the products (int32 sums), in prefill, decode and "
        f"scoring alike"
    ),
}


def isa_note(asked: str, level: Isa) -> str:
    """Which instruction-set level the kernels run at, and why: asked for, or auto's pick."""
    runs = ", ".join(i.value for i in executable_levels())
    why = "as asked (--native-isa)" if asked != Isa.AUTO.value else "auto: the best level this CPU executes"
    return f"instruction set {level.value} ({why}; this CPU executes {runs})"


class NativeEngine(Engine):
    def __init__(self, name: str, options: EngineOptions, dtype: str = "fp32") -> None:
        super().__init__(name, options)
        self.dtype = dtype
        self.wtype = _DTYPES[dtype]
        settings = options.settings if isinstance(options.settings, NativeOptions) else NativeOptions()
        self.kv = KvCache(settings.kv or KvCache.F32.value)
        self.huge_pages = settings.pages != "4kb"
        self.isa = settings.level  # checked at load: the worker's CPU is the one that counts
        self.model: NativeGPT2 | None = None

    def load(self, model: ModelFiles, progress) -> EngineInfo:
        config = model.gpt2_config.require_supported(self.name)
        if self.wtype in (WeightType.I8, WeightType.Q4) and (config.n_embd % QBLOCK or config.n_inner % QBLOCK):
            raise ValueError(f"{self.name} needs n_embd and n_inner multiples of {QBLOCK}")
        if self.wtype == WeightType.BF16 and (config.n_embd % 2 or config.n_inner % 2):
            raise ValueError(f"{self.name} needs even n_embd and n_inner (its panels hold whole bf16 pairs)")
        progress("preparing the native step (built on first use only)", None)
        try:
            level = resolve(self.isa)
        except IsaUnavailable as exc:
            raise ValueError(f"{self.name}: --native-isa {self.isa}: {exc}") from None
        try:
            lib = library(level)
        except KernelUnavailable as exc:
            raise RuntimeError(f"{self.name} needs a C compiler to build its kernel: {exc}") from exc
        lib.gpt2_set_threads(self.options.threads)
        bound = self.options.owns_process and bind_team(lib)
        progress("mapping weights", None)
        began = time.perf_counter()
        params = nest_params(mmap_numpy(model.safetensors), config.n_layer)
        arrays, layout, region = layout_cache.cached_arrays(
            model, self.dtype, lambda: stored_arrays(params, self.wtype), progress, self.huge_pages
        )
        self.model = NativeGPT2(params, config, self.wtype, lib, kv=self.kv, stored=arrays)
        read_s = time.perf_counter() - began - layout.build_s
        laid_out = f"; laid out now in {layout.build_s:.2f} s, once per model (build s)" if layout.build_s else ""
        notes = [
            _HOW[self.wtype],
            isa_note(self.isa, level),
            lib.gpt2_paths(int(self.wtype)).decode(),
            _KV_NOTE[self.kv],
            huge_pages_note(region),
            f"weights read in their layout from the cache in {read_s:.2f} s{laid_out}",
            f"OpenMP threads={lib.gpt2_threads()}" + (", each bound to a CPU of its own" if bound else ""),
            "one C call per token (backends/kernels/gpt2_step.c)",
        ]
        # the kernel's compile and the weights' layout on first use are build time, not load
        kernel_s, kernel_cache = build_report("gpt2_step")
        build_s = kernel_s + layout.build_s
        cache_state = "miss" if "miss" in (kernel_cache, layout.cache_state) else layout.cache_state
        return EngineInfo(
            device="cpu",
            dtype=self.dtype,
            weight_bytes_per_token=self.model.matrix_bytes + config.weight_bytes(0, 4),  # scales included
            kv_bytes_per_position=self.model.kv_bytes_per_position,
            prefill_arithmetic=_ARITHMETIC[lib.gpt2_prefill_arithmetic(int(self.wtype))],
            notes="; ".join(notes),
            build_s=build_s,
            artifact_cache=cache_state,
            isa=level.value,
        )

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        return self.model.prefill(np.asarray(token_ids, dtype=np.int32))

    def decode(self, token_id: int) -> np.ndarray:
        return self.model.decode(int(token_id))

    def forward_logits(self, token_ids: Sequence[int]) -> np.ndarray:
        """Every position's logits; the cache is reused, so the sequence in progress ends here."""
        logits = self.model.forward(np.asarray(token_ids, dtype=np.int32), 0, True)
        self.model.pos = 0
        return logits

    def profiler(self):
        from ...profilers.native_timers import NativeStepTimers

        return NativeStepTimers(self.model, TIMERS)

    def close(self) -> None:
        self.model = None
