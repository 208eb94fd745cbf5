"""ONNX Runtime, the classic way: past/present concatenated per step (ORT's GPT-2 export layout).

Each step feeds every layer's past keys and values [1, H, P, D] as plain numpy inputs and gets
back `present` [1, H, P + T, D] = concat(past, new), which becomes the next step's past. No
IOBinding, no preallocated buffer: ORT allocates every present anew and copies the whole cache
into it, so a decode step's cost grows with the sequence. Beside the `onnx` engine (in-place
cache, same weights, same session settings) it measures what passing state through a
session's inputs and outputs costs. fp32 only. Torch-free at run time: the artefact comes from
the shared cache (concat_cache.py), built in a child process when missing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnxruntime as ort

from ...engine import Engine, EngineInfo, EngineOptions
from ...progress import ProgressFn
from ...sources.model_files import ModelFiles
from ...storage.artifact_cache import Artifact
from . import cache as onnx_cache
from . import concat_cache
from .session import open_cached, open_session, threads_note, token_array

NOTE = "past/present concatenated per step (ORT's classic GPT-2 export): the cache is copied and grown every step"


class OnnxConcatEngine(Engine):
    def __init__(self, name: str, options: EngineOptions) -> None:
        super().__init__(name, options)
        self.session: ort.InferenceSession | None = None
        self._past: list[np.ndarray] = []  # the last step's presents: the next step's past
        self._length = 0  # positions in the past

    def load(self, model: ModelFiles, progress: ProgressFn) -> EngineInfo:
        config = model.gpt2_config.require_supported(self.name)
        self._context = config.n_positions
        # Prefill's past: zero positions (the graph's past axis admits 0), one array for every input.
        self._empty = np.zeros((1, config.n_head, 0, config.head_dim), np.float32)

        self.session, artefact, build_s = open_cached(
            lambda: concat_cache.ensure(model, progress),
            lambda: concat_cache.rebuild(model, progress),
            self.options.threads,
            "classic past/present",
            progress,
            bind=self.options.owns_process,
        )
        self._artefact = artefact
        # Names from the graph itself (concat_export.py's, in its order): importing that module
        # would import torch into the worker.
        self._past_names = [i.name for i in self.session.get_inputs() if i.name not in ("input_ids", "logit_index")]
        self._outputs = [o.name for o in self.session.get_outputs()]  # logits, then present_{i}_k/v
        notes = [
            f"providers={','.join(self.session.get_providers())}",
            "opt=ORT_ENABLE_ALL at load",
            f"cache={'built' if artefact.built else 'hit'}",
            threads_note(self.options.threads, self.options.owns_process),
            NOTE,
        ]
        if self.options.device not in ("", "cpu"):
            notes.append(f"device={self.options.device} not honoured: CPU execution provider only")
        weight_bytes = int(artefact.details.get("weight_bytes_per_token") or config.weight_bytes(4, 4))
        return EngineInfo(
            device="cpu",
            dtype="fp32",
            weight_bytes_per_token=weight_bytes,
            kv_bytes_per_position=config.kv_bytes_per_position(4),
            build_s=build_s,
            artifact_cache="miss" if build_s > 0 or artefact.built else "hit",
            notes="; ".join(notes),
        )

    @property
    def past(self) -> tuple[np.ndarray, ...]:
        """The cache as the next step will feed it: past_{i}_k, past_{i}_v for every layer, [1, H, P, D]."""
        return tuple(self._past)

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        ids = self._ids(token_ids)
        logits, self._past = self._run(ids, np.array([ids.shape[1] - 1], np.int64), None)
        self._length = ids.shape[1]
        return logits[0]

    def decode(self, token_id: int) -> np.ndarray:
        if not self._past:
            raise RuntimeError("decode() before prefill()")
        if self._length >= self._context:
            raise ValueError(f"the sequence is at the model's context limit ({self._context} tokens)")
        ids = np.array([[token_id]], np.int64)
        logits, self._past = self._run(ids, np.zeros(1, np.int64), self._past)
        self._length += 1
        return logits[0]

    def forward_logits(self, token_ids: Sequence[int]) -> np.ndarray:
        """All positions' logits [T, vocab] (logit_index = 0..T-1), from an empty past. The state
        lives in our arrays, not in the session, so a sequence in progress is left as it was."""
        ids = self._ids(token_ids)
        return self._run(ids, np.arange(ids.shape[1], dtype=np.int64), None)[0]

    def _ids(self, token_ids: Sequence[int]) -> np.ndarray:
        if self.session is None:
            raise RuntimeError("the engine is not loaded")
        return token_array(token_ids, self._context)

    def _run(
        self, ids: np.ndarray, rows: np.ndarray, past: list[np.ndarray] | None
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """One session.run: (logits [K, vocab], presents). `past` None: a new sequence."""
        feed = {"input_ids": ids, "logit_index": rows}
        feed.update(zip(self._past_names, past if past is not None else [self._empty] * len(self._past_names)))
        logits, *presents = self.session.run(self._outputs, feed)
        return logits, presents

    def _open(self, artefact: Artifact, profile_prefix: str = "") -> ort.InferenceSession:
        # The `onnx` engine's very session settings: the two differ only in how the cache travels.
        return open_session(
            onnx_cache.model_path(artefact), self.options.threads, profile_prefix, self.options.owns_process
        )

    def profiler(self):
        """ORT's own session profiling, on a second session opened for the profiled run."""
        from ...profilers.ort_ops import OrtProfiler

        def use(session: ort.InferenceSession) -> None:
            self.session = session

        return OrtProfiler(lambda prefix: self._open(self._artefact, prefix), use, self.session)

    def close(self) -> None:
        self._past = []
        self.session = None
