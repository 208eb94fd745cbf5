"""llama.cpp through llama-cpp-python: our own GGUF, quantised by llama.cpp, driven token by token.

Each step is `Llama.eval` (llama_decode) followed by a copy of the last position's logits, so
the shared sampler picks tokens exactly as for every other engine. Files are cached per
weights hash: cache/gguf/<hash>/f32/model.gguf is written by gguf_export, the other variants
are made from it by llama.cpp's own quantiser (llama_model_quantize).
"""

from __future__ import annotations

import ctypes
import json
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import llama_cpp
import numpy as np
from llama_cpp import _logger as llama_logger

from ...engine import Engine, EngineInfo, EngineOptions
from ...sources.model_files import ModelFiles
from ...storage import artifact_cache
from ..artifact_folders import GGUF_FILE, GGUF_KIND
from ..llamacpp_options import LlamaCppOptions
from . import gguf_export
from .weight_buffers import WeightBuffers, buffer_sizes, choose, describe_sizes, plain_buffers

llama_logger.set_verbose(False)  # llama.cpp logs every tensor at load and quantisation otherwise

_FTYPES = {
    "f32": llama_cpp.LLAMA_FTYPE_ALL_F32,
    "f16": llama_cpp.LLAMA_FTYPE_MOSTLY_F16,
    "bf16": llama_cpp.LLAMA_FTYPE_MOSTLY_BF16,
    "q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0,
    "q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0,
}
_DTYPES = {"f32": "fp32", "f16": "f16", "bf16": "bf16", "q8_0": "int8", "q4_0": "int4"}
INFO_FILE = "info.json"


class LlamaCppEngine(Engine):
    def __init__(self, name: str, options: EngineOptions, quant: str = "f32") -> None:
        super().__init__(name, options)
        if quant not in _FTYPES:
            raise ValueError(f"unsupported llama.cpp quantisation {quant!r}")
        self.quant = quant
        self.llm: llama_cpp.Llama | None = None
        self.folder: Path | None = None
        self.context = 0

    def load(self, model: ModelFiles, progress) -> EngineInfo:
        config = model.gpt2_config.require_supported(self.name)
        threads = self.options.threads or os.cpu_count() or 1
        artefact = gguf_artifact(model, self.quant, threads, progress)
        self.folder = artefact.folder
        info = json.loads((self.folder / INFO_FILE).read_text())
        self.context = config.n_positions
        # llama.cpp keeps its KV cache in f16 by default; f32 weights get an f32 cache so that
        # this variant computes in fp32 throughout, like the other fp32 engines.
        kv = {"type_k": llama_cpp.GGML_TYPE_F32, "type_v": llama_cpp.GGML_TYPE_F32} if self.quant == "f32" else {}
        settings = self.options.settings if isinstance(self.options.settings, LlamaCppOptions) else LlamaCppOptions()
        buffers = choose(self.folder / GGUF_FILE, self.quant, threads, WeightBuffers(settings.weight_buffers or "auto"))
        with buffer_sizes() as sizes, plain_buffers(not buffers.extra):
            self.llm = llama_cpp.Llama(
                model_path=str(self.folder / GGUF_FILE),
                n_ctx=self.context,
                n_batch=min(512, self.context),
                n_ubatch=min(512, self.context),
                n_threads=threads,
                n_threads_batch=threads,
                verbose=False,
                **kv,
                **self.llama_args(),
            )
        self.n_vocab = self.llm.n_vocab()
        types = ", ".join(f"{n} {t}" for t, n in sorted(info["tensor_types"].items(), key=lambda x: -x[1]))
        notes = [
            f"threads={threads}",
            f"llama-cpp-python {llama_cpp.__version__}",
            f"tensors: {types}",
            f"weight buffers: {describe_sizes(sizes)}",
            buffers.reason,
            "KV cache f32" if kv else "KV cache f16 (llama.cpp default)",
            "logits per token via llama_decode",
        ]
        self.weight_buffers = dict(sizes)
        # The GGUF's tensors as stored (q8_0: 34 bytes per 32 weights, q4_0: 18), see write_info.
        return EngineInfo(
            device="cpu",
            dtype=_DTYPES[self.quant],
            weight_bytes_per_token=int(info["weight_bytes_per_token"]),
            kv_bytes_per_position=config.kv_bytes_per_position(4 if kv else 2),
            build_s=artefact.build_s + buffers.probe_s,
            artifact_cache="miss" if buffers.probe_s else artefact.cache_state,
            notes="; ".join(notes),
        )

    def llama_args(self) -> dict:
        """More arguments for llama_cpp.Llama (a draft model, for prompt lookup); logits_all=False: the last
        position's logits are all that prefill and decode read."""
        return {"logits_all": False}

    def _eval(self, token_ids: Sequence[int]) -> np.ndarray:
        if self.llm.n_tokens + len(token_ids) > self.context:
            raise ValueError(
                f"sequence of {self.llm.n_tokens + len(token_ids)} tokens exceeds the context of {self.context}"
            )
        self.llm.eval(token_ids)
        pointer = llama_cpp.llama_get_logits_ith(self.llm.ctx, -1)
        return np.ctypeslib.as_array(pointer, shape=(self.n_vocab,)).astype(np.float32, copy=True)

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        self.llm.reset()  # the next eval drops the old sequence from the KV cache
        return self._eval(list(token_ids))

    def decode(self, token_id: int) -> np.ndarray:
        return self._eval([int(token_id)])

    def profiler(self):
        """llama.cpp's own timers: its graph evaluation as a whole, per phase."""
        from ...profilers.llamacpp_timings import LlamaPerfProfiler

        return LlamaPerfProfiler(self.llm.ctx)

    def close(self) -> None:
        if self.llm is not None:
            self.llm.close()
            self.llm = None


def ensure_gguf(model: ModelFiles, quant: str, threads: int, progress) -> Path:
    """The cached, validated GGUF folder for `quant` (f32 written by us, the rest by llama.cpp)."""
    return gguf_artifact(model, quant, threads, progress).folder


def gguf_artifact(model: ModelFiles, quant: str, threads: int, progress) -> artifact_cache.Artifact:
    """The GGUF artefact for `quant`, with its cache state and build time."""

    def build(out: Path) -> None:
        if quant == "f32":
            progress("writing GGUF (f32)", None)
            gguf_export.write_gguf(model, out / GGUF_FILE)
        else:
            source = ensure_gguf(model, "f32", threads, progress) / GGUF_FILE
            progress(f"quantising GGUF to {quant} with llama.cpp", None)
            quantize(source, out / GGUF_FILE, quant, threads)
        write_info(out / GGUF_FILE, out / INFO_FILE)

    meta = {"format": gguf_export.FORMAT, "quant": quant}
    if quant != "f32":  # the quantiser's choices may change between llama.cpp versions
        meta["llama_cpp_python"] = llama_cpp.__version__
    return artifact_cache.ensure(GGUF_KIND, model.weights_hash, quant, build, progress, meta=meta)


def quantize(source: Path, target: Path, quant: str, threads: int) -> None:
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = _FTYPES[quant]
    params.nthread = threads
    code = llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params))
    if code != 0 or not target.exists():
        raise RuntimeError(f"llama.cpp could not quantise {source.name} to {quant} (code {code})")


def write_info(gguf_path: Path, info_path: Path) -> None:
    """Tensor types and the weight bytes read per token (all but the position table: one row)."""
    import gguf

    reader = gguf.GGUFReader(str(gguf_path))
    types = Counter(t.tensor_type.name.lower() for t in reader.tensors)
    weight_bytes = sum(int(t.n_bytes) for t in reader.tensors if t.name != "position_embd.weight")
    info_path.write_text(json.dumps({"tensor_types": dict(types), "weight_bytes_per_token": weight_bytes}))
    del reader  # closes its memory map before the folder is renamed
