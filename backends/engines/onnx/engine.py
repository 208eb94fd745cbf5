"""ONNX Runtime engines: the project's own GPT-2 export with a key/value cache (fp32, int8, int4).

Torch-free at run time: the artefacts come from the cache (onnx/cache.py), built in a child
process when missing. The KV cache is one preallocated buffer per layer for keys and one for values, bound through
an IOBinding as both past and present, so ORT's GroupQueryAttention appends to it in place: no
step copies the cache, and a decode step rebinds nothing (its inputs are small numpy arrays
written in place). Logits land in a preallocated buffer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnxruntime as ort

from ...engine import Engine, EngineInfo, EngineOptions
from ...errors import UsageError
from ...progress import ProgressFn
from ...sources.model_files import ModelFiles
from ...storage.artifact_cache import Artifact
from . import cache as onnx_cache
from .session import open_cached, open_session, threads_note, token_array

_MATRIX_BYTES = {"fp32": 4, "int8": 1, "int4": 0.5}


class OnnxEngine(Engine):
    def __init__(self, name: str, options: EngineOptions, variant: str = "fp32") -> None:
        super().__init__(name, options)
        if variant not in onnx_cache.VARIANTS:
            raise UsageError(f"unknown ONNX variant {variant!r}; known: {', '.join(onnx_cache.VARIANTS)}")
        self.variant = variant
        self.session: ort.InferenceSession | None = None
        self._decode_binding: ort.IOBinding | None = None
        self._length = 0  # tokens in the KV cache

    def load(self, model: ModelFiles, progress: ProgressFn) -> EngineInfo:
        config = model.gpt2_config.require_supported(self.name)
        self._context = config.n_positions
        layers = config.n_layer
        # Zeroed pages are only mapped once written, so the full-context buffers cost RSS only
        # for the positions a run really fills.
        shape = (1, config.n_head, self._context, config.head_dim)
        self._buffers = [np.zeros(shape, np.float32) for _ in range(2 * layers)]
        self._cache_values = [ort.OrtValue.ortvalue_from_numpy(b) for b in self._buffers]
        self._past_names = [f"past_{i}_{kv}" for i in range(layers) for kv in "kv"]
        self._present_names = [f"present_{i}_{kv}" for i in range(layers) for kv in "kv"]
        self._logits = np.empty((1, config.vocab_size), np.float32)
        # Decode-step inputs, bound once and overwritten in place each step.
        self._next_id = np.zeros((1, 1), np.int64)
        self._past_length = np.zeros(1, np.int64)
        self._row_zero = np.zeros(1, np.int64)

        self.session, artefact, build_s = open_cached(
            lambda: onnx_cache.ensure(model, self.variant, progress),
            lambda: onnx_cache.rebuild(model, self.variant, progress),
            self.options.threads,
            self.variant,
            progress,
            bind=self.options.owns_process,
        )
        self._artefact = artefact
        build = artefact.details
        notes = [
            f"providers={','.join(self.session.get_providers())}",
            "opt=ORT_ENABLE_ALL at load",
            f"cache={'built' if artefact.built else 'hit'}",
            threads_note(self.options.threads, self.options.owns_process),
            "iobinding, in-place KV cache (GroupQueryAttention)",
        ]
        if "quantisation" in build:
            notes.append(build["quantisation"])
        if self.options.device not in ("", "cpu"):
            notes.append(f"device={self.options.device} not honoured: CPU execution provider only")
        # The initializers as stored (scales and zero points included); the estimate from the
        # shapes only for a manifest without the figure.
        weight_bytes = int(build.get("weight_bytes_per_token") or config.weight_bytes(_MATRIX_BYTES[self.variant], 4))
        return EngineInfo(
            device="cpu",
            dtype=self.variant,
            weight_bytes_per_token=weight_bytes,
            kv_bytes_per_position=config.kv_bytes_per_position(4),  # fp32 KV buffers for every variant
            build_s=build_s,
            artifact_cache="miss" if build_s > 0 or artefact.built else "hit",
            notes="; ".join(notes),
        )

    def profiler(self):
        """ORT's own session profiling, on a second session opened for the profiled run."""
        from ...profilers.ort_ops import OrtProfiler

        return OrtProfiler(lambda prefix: self._open(self._artefact, prefix), self._use_session, self.session)

    def _use_session(self, session: ort.InferenceSession) -> None:
        self.session = session
        self._decode_binding = None  # bound to the other session; the next prefill binds again

    def _open(self, artefact: Artifact, profile_prefix: str = "") -> ort.InferenceSession:
        return open_session(
            onnx_cache.model_path(artefact), self.options.threads, profile_prefix, self.options.owns_process
        )

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        ids = self._ids(token_ids)
        self._run(ids, np.array([ids.shape[1] - 1], np.int64), self._logits)
        self._decode_binding = self._binding(self._next_id, self._row_zero, self._logits)
        return self._logits[0].copy()

    def decode(self, token_id: int) -> np.ndarray:
        if self._decode_binding is None:
            raise RuntimeError("decode() before prefill()")
        if self._length >= self._context:
            raise ValueError(f"the sequence is at the model's context limit ({self._context} tokens)")
        self._next_id[0, 0] = token_id
        self._past_length[0] = self._length
        self.session.run_with_iobinding(self._decode_binding)
        self._length += 1
        return self._logits[0].copy()

    def forward_logits(self, token_ids: Sequence[int]) -> np.ndarray:
        """All positions' logits [T, vocab] from the same graph (logit_index = 0..T-1).
        It reuses the KV cache, so a sequence in progress has to be prefilled again."""
        ids = self._ids(token_ids)
        self._decode_binding = None
        return self._run(ids, np.arange(ids.shape[1], dtype=np.int64), None)

    def _ids(self, token_ids: Sequence[int]) -> np.ndarray:
        if self.session is None:
            raise RuntimeError("the engine is not loaded")
        return token_array(token_ids, self._context)

    def _run(self, ids: np.ndarray, rows: np.ndarray, logits: np.ndarray | None) -> np.ndarray:
        """A new sequence from position 0 (prefill or scoring)."""
        self._past_length[0] = 0
        binding = self._binding(ids, rows, logits)
        self.session.run_with_iobinding(binding)
        self._length = ids.shape[1]
        return logits if logits is not None else binding.get_outputs()[0].numpy()

    def _binding(self, ids: np.ndarray, rows: np.ndarray, logits: np.ndarray | None) -> ort.IOBinding:
        binding = self.session.io_binding()
        binding.bind_cpu_input("input_ids", ids)  # no copy: the arrays stay ours, read at run time
        binding.bind_cpu_input("logit_index", rows)
        binding.bind_cpu_input("past_length", self._past_length)
        if logits is not None:
            binding.bind_output("logits", "cpu", 0, np.float32, list(logits.shape), logits.ctypes.data)
        else:
            binding.bind_output("logits", "cpu")  # first: get_outputs() follows binding order
        for past, present, value in zip(self._past_names, self._present_names, self._cache_values):
            binding.bind_ortvalue_input(past, value)
            binding.bind_ortvalue_output(present, value)  # the same buffer: updated in place
        return binding

    def close(self) -> None:
        self._decode_binding = None
        self._cache_values = []
        self.session = None
