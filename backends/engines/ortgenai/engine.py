"""ONNX Runtime GenAI: Microsoft's generation loop (search, sampling, KV cache in C++) over our export.

GenAI has no per-step logits API worth driving token by token here (it keeps the cache and picks
tokens itself), so, like the CTranslate2 engine, this one streams tokens from GenAI's own loop:
greedy is its argmax, the same as the shared sampler's; sampling uses GenAI's own sampler with the
same settings and seed, and the run's notes say so. Each run sets its search options:
max_length = prompt + new tokens. GenAI ends its loop at end-of-text (it has no switch against
that, and min_length would mask the token instead), so the stream reads that token on into the
sequence itself and goes on, as every engine does.
Threads are overlaid on genai_config.json's session options at load (the cached file is unchanged).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from importlib.metadata import version

import numpy as np

from ...engine import Capabilities, Engine, EngineInfo, EngineOptions
from ...errors import UsageError
from ...progress import ProgressFn
from ...sampling import Sampler
from ...sources.model_files import ModelFiles
from ...storage.artifact_cache import Artifact
from . import cache as genai_cache
from .build import quantisation_note
from .genai_config import threads_overlay

_MATRIX_BYTES = {"fp32": 4, "int8": 1 + 4 / 32, "int4": 0.5 + 4 / 32}  # fallback estimate, scales included


class OrtGenAIEngine(Engine):
    capabilities = Capabilities(own_loop=True)  # GenAI's C++ loop makes the tokens

    def __init__(self, name: str, options: EngineOptions, variant: str = "fp32") -> None:
        super().__init__(name, options)
        if variant not in genai_cache.VARIANTS:
            raise UsageError(f"unknown GenAI variant {variant!r}; known: {', '.join(genai_cache.VARIANTS)}")
        import onnxruntime_genai as og  # here, not at import: the registry lists engines without it

        self.og = og
        self.variant = variant
        self.model = None
        self.folder = None
        self._scorer = None  # a plain ORT session for forward_logits, opened when first asked
        self._context = 0
        self._vocab = 0

    def load(self, model: ModelFiles, progress: ProgressFn) -> EngineInfo:
        config = model.gpt2_config.require_supported(self.name)
        self._context, self._vocab = config.n_positions, config.vocab_size
        artefact = genai_cache.ensure(model, self.variant, progress)
        build_s = artefact.build_s
        try:
            self.model = self._open(artefact)
        except Exception as exc:  # noqa: BLE001 - GenAI raises RuntimeError/OrtException for a bad model
            if artefact.built:
                raise
            why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
            progress(f"cached GenAI {self.variant} model is unusable ({why}); rebuilding", None)
            artefact = genai_cache.rebuild(model, self.variant, progress)
            build_s += artefact.build_s
            self.model = self._open(artefact)
        self.folder = artefact.folder
        threads = self.options.threads
        notes = [
            f"onnxruntime-genai {version('onnxruntime-genai')}",
            "CPU provider",
            f"threads={threads or 'ort default'} (intra-op, genai_config session options)",
            "KV cache: past/present concatenated per step",
            "tokens from GenAI's own loop",
        ]
        if self.variant != "fp32":
            notes.append(quantisation_note(self.variant))
        if self.options.device not in ("", "cpu"):
            notes.append(f"device={self.options.device} not honoured: CPU provider only")
        weight_bytes = int(
            artefact.details.get("weight_bytes_per_token") or config.weight_bytes(_MATRIX_BYTES[self.variant], 4)
        )
        return EngineInfo(
            device="cpu",
            dtype=self.variant,
            weight_bytes_per_token=weight_bytes,
            kv_bytes_per_position=config.kv_bytes_per_position(4),  # fp32 KV for every variant
            build_s=build_s,
            artifact_cache="miss" if build_s > 0 or artefact.built else "hit",
            samples_natively=True,
            notes="; ".join(notes),
        )

    def _open(self, artefact: Artifact):
        config = self.og.Config(str(artefact.folder))
        config.clear_providers()  # CPU
        config.overlay(threads_overlay(self.options.threads))
        return self.og.Model(config)

    def stream(
        self, token_ids: Sequence[int], new_tokens: int, sampler: Sampler, cancel: threading.Event | None = None
    ) -> Iterator[int]:
        if self.model is None:
            raise RuntimeError("the engine is not loaded")
        ids = np.asarray(list(token_ids), dtype=np.int32)
        length = len(ids) + new_tokens
        if len(ids) == 0 or length > self._context:
            raise ValueError(f"{len(ids)} prompt + {new_tokens} new tokens: need 1..{self._context} in all")
        params = sampler.params
        self.run_notes = ""  # a greedy run after a sampled one is the shared argmax again
        # A seed always: without one, each Generator seeds its sampler from std::random_device, whose
        # RDSEED retries took 12-15 ms a request on a VM that traps it (the Zen 5 EPYC), greedy or not.
        options = {
            "max_length": length,
            "num_beams": 1,
            "do_sample": False,
            "top_k": 1,
            "random_seed": params.seed,
        }
        if not params.is_greedy:
            options.update(
                do_sample=True, top_k=params.top_k or self._vocab, top_p=params.top_p, temperature=params.temperature
            )
            self.run_notes = (
                "sampled by GenAI's own sampler (same temperature/top-k/top-p/seed, "
                "its own random numbers: tokens differ from the shared sampler's)"
            )
        search = self.og.GeneratorParams(self.model)
        search.set_search_options(**options)
        generator = self.og.Generator(self.model, search)
        try:
            generator.append_tokens(ids[None])  # the prompt's forward pass runs here
            for index in range(new_tokens):
                generator.generate_next_token()
                token = int(generator.get_next_tokens()[0])
                yield token
                if index + 1 == new_tokens or (cancel is not None and cancel.is_set()):
                    return
                if generator.is_done():  # end-of-text, left out of its sequence: its forward pass runs here
                    generator.append_tokens(np.asarray([[token]], dtype=np.int32))
        finally:
            del generator  # frees its KV cache now

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        raise NotImplementedError("GenAI keeps its KV cache inside its own loop; use stream()")

    def decode(self, token_id: int) -> np.ndarray:
        raise NotImplementedError("GenAI keeps its KV cache inside its own loop; use stream()")

    def forward_logits(self, token_ids: Sequence[int]) -> np.ndarray:
        """Every position's logits [T, vocab] from the same graph, run by plain ONNX Runtime with an
        empty past (GenAI itself returns the last position's only)."""
        from ..onnx.session import open_session, token_array

        ids = token_array(token_ids, self._context)
        if self._scorer is None:
            self._scorer = open_session(self.folder / genai_cache.MODEL_FILE, self.options.threads)
        feeds = {"input_ids": ids}
        for entry in self._scorer.get_inputs()[1:]:
            _, heads, _, head = entry.shape
            feeds[entry.name] = np.zeros((1, heads, 0, head), np.float32)
        return self._scorer.run(["logits"], feeds)[0][0]

    def close(self) -> None:
        self._scorer = None
        self.model = None
