"""Speculative decoding on the own C runtime: `native-spec` (target `native`, draft `native-int8`)
and its variants, any two native engines through SpeculativeOptions.

Both models live in this worker, each with its own KV cache (engines/native/step.py). The draft
proposes tokens one C call each; the target checks the last token and every draft in one call that
reads its weights once and makes each position's logits exactly as a one-token decode would
(gpt2_step.c's decode_products), so greedy output is the target's own, token for token. The loop
and the rule are engines/speculative/; tokens are yielded as each pass decides them (bursts).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

import numpy as np

from ... import registry
from ...engine import Capabilities, Engine, EngineInfo, EngineOptions
from ...progress import ProgressFn
from ...sampling import Sampler
from ...sources.model_files import ModelFiles, resolve_model
from ..native_options import NativeOptions
from ..speculative.decoder import ReadCost, SpeculativeDecoder
from ..speculative_options import SpeculativeOptions
from .engine import NativeEngine

DEFAULT_K = 8
_NATIVE = f"{NativeEngine.__module__}:{NativeEngine.__name__}"


def native_engine(name: str, role: str, options: EngineOptions) -> NativeEngine:
    """The registry's native engine `name`, constructed here (the target or the draft)."""
    spec = registry.get(name)
    if spec.target != _NATIVE:
        raise ValueError(f"the {role} must be an own-runtime (native) engine; {name} is not")
    # the native engines' own settings (an instruction-set level), where given, hold for both models
    settings = options.settings if isinstance(options.settings, NativeOptions) else None
    return NativeEngine(spec.name, EngineOptions(options.threads, settings=settings), **spec.engine_args)


class NativeSpeculativeEngine(Engine):
    capabilities = Capabilities(own_loop=True)  # several tokens per target pass, decided in its own loop

    def __init__(self, name: str, options: EngineOptions, target: str, draft: str) -> None:
        super().__init__(name, options)
        settings = options.settings if isinstance(options.settings, SpeculativeOptions) else SpeculativeOptions()
        self.target_name, self.draft_name = settings.target or target, settings.draft or draft
        self.draft_model = settings.draft_model or ""
        self.k_max = settings.k or DEFAULT_K
        self.target = native_engine(self.target_name, "target", options)
        self.draft = native_engine(self.draft_name, "draft", options)
        self.decoder: SpeculativeDecoder | None = None

    def load(self, model: ModelFiles, progress: ProgressFn) -> EngineInfo:
        target = self.target.load(model, progress)
        draft_files = resolve_model(self.draft_model, progress) if self.draft_model else model
        if draft_files.gpt2_config.vocab_size != model.gpt2_config.vocab_size:
            raise ValueError(f"the draft model {draft_files.model_id} has another vocabulary than {model.model_id}")
        draft = self.draft.load(draft_files, progress)
        context = min(model.gpt2_config.n_positions, draft_files.gpt2_config.n_positions)
        self.decoder = SpeculativeDecoder(
            self.target.model,
            self.draft.model,
            ReadCost(target.weight_bytes_per_token, target.kv_bytes_per_position),
            ReadCost(draft.weight_bytes_per_token, draft.kv_bytes_per_position),
            context,
            self.k_max,
        )
        of_model = f" of {draft_files.model_id}" if self.draft_model else ""
        notes = [
            f"target {self.target_name} ({target.dtype}), draft {self.draft_name} ({draft.dtype}{of_model})",
            f"at most {self.k_max} drafts per target pass, adapted to the acceptance and the measured times",
            "a verify pass reads the target's weights once for its last token and the drafts, each position's "
            "logits made as a one-token decode makes them (greedy output is the target's own)",
            "sampled runs: the accept/reject rule (the target's distribution; its own draws)",
            f"target: {target.notes}",
        ]
        return EngineInfo(
            device="cpu",
            dtype=target.dtype,
            weight_bytes_per_token=target.weight_bytes_per_token,  # the single-token floor's bytes (the target's)
            kv_bytes_per_position=target.kv_bytes_per_position,
            notes="; ".join(notes),
            build_s=target.build_s + draft.build_s,
            artifact_cache=target.artifact_cache,
            samples_natively=True,
            multi_token_steps=True,
            isa=target.isa,  # both models' kernels are one build
        )

    def stream(
        self, token_ids: Sequence[int], new_tokens: int, sampler: Sampler, cancel: threading.Event | None = None
    ) -> Iterator[int]:
        decoder = self.decoder
        try:
            yield from decoder.generate(token_ids, new_tokens, sampler, cancel)
        finally:
            self.speculation, self.run_notes = decoder.stats(), decoder.notes()

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        return self.target.prefill(token_ids)

    def decode(self, token_id: int) -> np.ndarray:
        return self.target.decode(token_id)

    def forward_logits(self, token_ids: Sequence[int]) -> np.ndarray:
        return self.target.forward_logits(token_ids)

    def close(self) -> None:
        self.target.close()
        self.draft.close()
        self.decoder = None
