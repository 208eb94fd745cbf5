"""CTranslate2's Generator on a model converted by its own transformers converter.

CTranslate2 has no per-step logits API with a KV cache (forward_batch recomputes the whole
sequence), so this engine streams tokens from `generate_tokens`: greedy is its argmax, the same
as the shared sampler's; sampling uses CTranslate2's own sampler with the same settings, and
the run's notes say so. `end_token=[]` with `max_length=N` gives exactly N tokens.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from ..engine import Capabilities, Engine, EngineInfo, EngineOptions, StampedToken
from ..sampling import Sampler
from ..sources.model_files import ModelFiles
from ..storage import artifact_cache
from ..storage.paths import TOKENIZER_DIR
from .artifact_folders import CT2_KIND

# CTranslate2's PyPI wheels carry two GEMM backends and pick one per process at import
# (src/cpu/backend.cc): Intel MKL when CT2_USE_MKL says so, or by default on a GenuineIntel CPU,
# otherwise oneDNN (DNNL). fp32 is faster through oneDNN and int8 through MKL on Intel, but MKL
# does not use its fast int8 kernels on other vendors' CPUs (docs/engines.md).
_MKL_ON_INTEL = {"float32": "0", "int8": "1"}
_QUANTIZATION = {"float32": None, "int8": "int8"}
FORMAT = "ct2-1"


def cpu_vendor() -> str:
    """The x86 vendor string (GenuineIntel, AuthenticAMD, ...), '' where it cannot be read."""
    import platform

    from ..machine.cpu import cpuinfo_field

    return cpuinfo_field("vendor_id") or ("GenuineIntel" if "Intel" in platform.processor() else "")


def choose_use_mkl(compute_type: str, vendor: str) -> str:
    """CT2_USE_MKL for this compute type: as measured per vendor (see above)."""
    return _MKL_ON_INTEL[compute_type] if vendor == "GenuineIntel" else "0"


def gemm_note(compute_type: str, use_mkl: str, vendor: str, source: str) -> str:
    """Which GEMM backend CTranslate2 uses (the rule of its backend.cc for wheels built with MKL
    and oneDNN), why, and the setting that fixes a slow choice."""
    mkl = use_mkl.strip().lower() in ("1", "true", "on") if use_mkl else vendor == "GenuineIntel"
    note = (
        f"GEMM backend {'MKL' if mkl else 'oneDNN'} (CT2_USE_MKL={use_mkl or 'unset'}, {source}; "
        f"CPU {vendor or 'unknown'})"
    )
    if mkl and compute_type == "int8" and vendor != "GenuineIntel":
        note += "; MKL's int8 GEMM is slow on non-Intel CPUs (16x slower than oneDNN on an AMD EPYC): set CT2_USE_MKL=0"
    return note


def _import_ctranslate2(compute_type: str) -> tuple[object, str]:
    """Import ctranslate2 with the GEMM backend measured best for `compute_type` on this CPU."""
    vendor = cpu_vendor()
    if "ctranslate2" in sys.modules:
        source = "ctranslate2 was already imported"
    elif "CT2_USE_MKL" in os.environ:
        source = "set by the user"
    else:
        os.environ["CT2_USE_MKL"] = choose_use_mkl(compute_type, vendor)
        source = "chosen for this CPU and compute type"
    note = gemm_note(compute_type, os.environ.get("CT2_USE_MKL", ""), vendor, source)
    return importlib.import_module("ctranslate2"), note


class CTranslate2Engine(Engine):
    capabilities = Capabilities(own_loop=True)  # CTranslate2's generator makes the tokens

    def __init__(self, name: str, options: EngineOptions, compute_type: str = "float32") -> None:
        super().__init__(name, options)
        if compute_type not in _MKL_ON_INTEL:
            raise ValueError(f"unsupported CTranslate2 compute type {compute_type!r}")
        self.compute_type = compute_type
        self.ct2, self._backend_note = _import_ctranslate2(compute_type)
        self.generator = None
        self.vocab: list[str] = []
        self.folder: Path | None = None

    def load(self, model: ModelFiles, progress) -> EngineInfo:
        config = model.gpt2_config.require_supported(self.name)
        threads = self.options.threads or os.cpu_count() or 1
        version = self.ct2.__version__
        artefact = artifact_cache.ensure(
            CT2_KIND,
            model.weights_hash,
            self.compute_type,
            lambda out: convert(model, out, self.compute_type, progress),
            progress,
            meta={"format": FORMAT, "ctranslate2": version, "compute_type": self.compute_type},
        )
        self.folder = artefact.folder
        self.vocab = json.loads((self.folder / "vocabulary.json").read_text())
        self.generator = self.ct2.Generator(
            str(self.folder), device="cpu", compute_type=self.compute_type, inter_threads=1, intra_threads=threads
        )
        notes = [self._backend_note, f"threads={threads}", f"ctranslate2 {version}", "tokens from generate_tokens"]
        # KV cache: float32 for both (int8 quantises the weights; activations stay float32).
        return EngineInfo(
            device="cpu",
            dtype="fp32" if self.compute_type == "float32" else "int8",
            weight_bytes_per_token=stored_weight_bytes(self.folder / "model.bin"),
            kv_bytes_per_position=config.kv_bytes_per_position(4),
            build_s=artefact.build_s,
            artifact_cache=artefact.cache_state,
            samples_natively=True,
            notes="; ".join(notes),
        )

    def stream(
        self, token_ids: Sequence[int], new_tokens: int, sampler: Sampler, cancel: threading.Event | None = None
    ) -> Iterator[StampedToken]:
        params = sampler.params
        options = {"max_length": new_tokens, "end_token": [], "sampling_topk": 1}
        if not params.is_greedy:
            self.ct2.set_random_seed(params.seed)
            options.update(
                sampling_topk=params.top_k, sampling_topp=params.top_p, sampling_temperature=params.temperature
            )
            self.run_notes = (
                "sampled by CTranslate2's own sampler (same temperature/top-k/top-p/seed, "
                "its own random numbers: tokens differ from the shared sampler's)"
            )
        made: dict[int, int] = {}  # step -> when CTranslate2's decoding thread made it

        def stamp(step) -> bool:  # called on that thread, before generate_tokens queues the step
            made[step.step] = time.perf_counter_ns()
            return False

        prompt = [self.vocab[i] for i in token_ids]
        steps = self.generator.generate_tokens(prompt, callback=stamp, **options)
        try:
            for index, step in enumerate(steps):
                yield StampedToken(step.token_id, made.pop(step.step))
                if index + 1 >= new_tokens or (cancel is not None and cancel.is_set()):
                    return
        finally:
            steps.close()  # stops CTranslate2's generation thread

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        raise NotImplementedError("CTranslate2 keeps its KV cache inside generate_tokens; use stream()")

    def decode(self, token_id: int) -> np.ndarray:
        raise NotImplementedError("CTranslate2 keeps its KV cache inside generate_tokens; use stream()")

    def forward_logits(self, token_ids: Sequence[int]) -> np.ndarray:
        tokens = [[self.vocab[i] for i in token_ids]]
        return np.array(self.generator.forward_batch(tokens), dtype=np.float32)[0]

    def close(self) -> None:
        self.generator = None  # joins its threads now rather than at interpreter exit


def model_variables(path: Path) -> tuple[dict[str, int], dict[str, str]]:
    """({variable: stored bytes}, {alias: variable}) of a CTranslate2 model.bin, read from its
    headers only (the layout of ctranslate2.specs.model_spec's _serialize: the data is skipped)."""

    def number(handle, fmt: str) -> int:
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, handle.read(size))[0]

    def string(handle) -> str:
        return handle.read(number(handle, "H")).rstrip(b"\0").decode("utf-8")

    sizes, aliases = {}, {}
    with path.open("rb") as handle:
        number(handle, "I")  # binary version
        string(handle)  # spec name
        number(handle, "I")  # revision
        for _ in range(number(handle, "I")):
            name = string(handle)
            handle.seek(4 * number(handle, "B"), os.SEEK_CUR)  # the shape
            number(handle, "B")  # dtype id
            size = number(handle, "I")
            sizes[name] = size
            handle.seek(size, os.SEEK_CUR)
        for _ in range(number(handle, "I")):
            alias = string(handle)
            aliases[alias] = string(handle)
    return sizes, aliases


def stored_weight_bytes(path: Path) -> int:
    """Weights one decode step reads, at their stored size (int8 weights with their scales): every
    variable of model.bin except the position table (one row per step) and, when the output
    projection is a copy of its own rather than an alias, the embedding table (one row too)."""
    sizes, aliases = model_variables(path)
    own_projection = any(name.endswith("projection/weight") for name in sizes)
    total = 0
    for name, size in sizes.items():
        if "position_encodings" in name or (own_projection and name.startswith("decoder/embeddings")):
            continue
        total += size
    return total


def convert(model: ModelFiles, out: Path, compute_type: str, progress) -> None:
    """TransformersConverter on the local folder (plus the shipped tokenizer it insists on)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    progress(f"converting to CTranslate2 ({compute_type})", None)
    converters = importlib.import_module("ctranslate2.converters")
    with tempfile.TemporaryDirectory(prefix="ct2-source-") as source:
        for path in (
            model.folder / "config.json",
            model.safetensors,
            TOKENIZER_DIR / "vocab.json",
            TOKENIZER_DIR / "merges.txt",
        ):
            _link_or_copy(path, Path(source) / path.name)
        converter = converters.TransformersConverter(source, low_cpu_mem_usage=True)
        converter.convert(str(out), quantization=_QUANTIZATION[compute_type], force=True)


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.symlink(source, target)
    except OSError:  # e.g. Windows without symlink rights
        shutil.copyfile(source, target)
