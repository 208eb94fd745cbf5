"""`llamacpp-lookup`: llama.cpp with prompt-lookup decoding, llama-cpp-python's own speculation.

llama-cpp-python's `LlamaPromptLookupDecoding` is a draft model without weights: it looks the last
n-gram of the sequence up in the sequence itself (prompt and tokens so far) and proposes what
followed it there. `Llama.generate` checks the proposals in one llama_decode and keeps the prefix
its sampler agrees with. It pays off where text repeats itself (code, quotes, tables: the bundled
"Repeating code" example, `--prompt-example repeating-code`). Tokens come from llama.cpp's own loop
and sampler (greedy: the argmax, as the shared sampler's), several per pass, each yielded as the loop
hands it over.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence

import numpy as np
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

from ...engine import Capabilities, EngineInfo, EngineOptions, StampedToken
from ...sampling import Sampler
from ...sources.model_files import ModelFiles
from ...speculation import SpeculationStats
from .engine import LlamaCppEngine

NGRAM = 2  # llama-cpp-python's defaults: the n-gram looked up ...
PROPOSED = 10  # ... and how many tokens that followed it are proposed


class _CountedLookup(LlamaPromptLookupDecoding):
    """The lookup, with what it proposed and how long it took counted."""

    def __init__(self) -> None:
        super().__init__(max_ngram_size=NGRAM, num_pred_tokens=PROPOSED)
        self.calls = self.proposed = self.ns = 0

    def __call__(self, input_ids, /, **kwargs):
        began = time.perf_counter_ns()
        out = super().__call__(input_ids, **kwargs)
        self.ns += time.perf_counter_ns() - began
        self.calls += 1
        self.proposed += len(out)
        return out


class LlamaCppLookupEngine(LlamaCppEngine):
    capabilities = Capabilities(own_loop=True)  # llama-cpp-python's generate makes the tokens

    def __init__(self, name: str, options: EngineOptions, quant: str = "f32") -> None:
        super().__init__(name, options, quant)
        self.lookup = _CountedLookup()
        self.weight_bytes = 0

    def llama_args(self) -> dict:
        # With a draft model llama-cpp-python keeps every position's logits, but sizes that array from the
        # logits_all argument: left False, it has n_batch (512) rows and any sequence past them fails.
        return {"draft_model": self.lookup, "logits_all": True}

    def load(self, model: ModelFiles, progress) -> EngineInfo:
        info = super().load(model, progress)
        self.weight_bytes = info.weight_bytes_per_token
        info.notes = "; ".join(
            [
                info.notes.replace("logits per token via llama_decode", "tokens from Llama.generate"),
                f"prompt lookup: the last {NGRAM}-gram found earlier in the sequence proposes the next "
                f"{PROPOSED} tokens; one llama_decode checks them",
                "llama-cpp-python keeps every position's logits with a draft model (n_ctx x vocab floats)",
            ]
        )
        info.samples_natively = True
        info.multi_token_steps = True
        return info

    def stream(
        self, token_ids: Sequence[int], new_tokens: int, sampler: Sampler, cancel: threading.Event | None = None
    ) -> Iterator[int]:
        params = sampler.params
        if params.is_greedy:
            settings = {"temp": 0.0}
        else:
            self.run_notes = "sampled by llama.cpp's own sampler (its draws)"
            self.llm.set_seed(params.seed)
            settings = {"temp": params.temperature, "top_k": params.top_k, "top_p": params.top_p, "min_p": 0.0}
        self.llm.reset()  # a fresh sequence: no prefix of an earlier run's cache is reused
        lookup, evals = self.lookup, _TimedEval(self.llm)
        lookup.calls = lookup.proposed = lookup.ns = 0
        count = 0
        try:
            for token in self.llm.generate(list(token_ids), repeat_penalty=1.0, **settings):
                count += 1
                yield StampedToken.now(token, evals.calls - 1)  # the pass that decided it (the prompt's: 0)
                if count >= new_tokens or (cancel is not None and cancel.is_set()):
                    return
        finally:
            evals.remove()
            passes = max(0, evals.calls - 1)  # the first is the prompt's
            decoded = max(0, count - 1)
            self.speculation = SpeculationStats(
                tokens=decoded,
                target_passes=passes,
                drafted=lookup.proposed,
                accepted=max(0, min(lookup.proposed, decoded - passes)),
                draft_ns=lookup.ns,
                verify_ns=evals.ns - evals.first_ns,
                bytes_read=passes * self.weight_bytes,
            )

    def prefill(self, token_ids: Sequence[int]) -> np.ndarray:
        raise NotImplementedError("prompt lookup runs in Llama.generate's own loop; use stream()")

    def decode(self, token_id: int) -> np.ndarray:
        raise NotImplementedError("prompt lookup runs in Llama.generate's own loop; use stream()")


class _TimedEval:
    """Llama.eval (one llama_decode per call) counted and timed on the instance, for the run's counts."""

    def __init__(self, llm) -> None:
        self.llm, self.original = llm, llm.eval
        self.calls = self.ns = self.first_ns = 0

        def timed(tokens):
            began = time.perf_counter_ns()
            try:
                return self.original(tokens)
            finally:
                took = time.perf_counter_ns() - began
                self.calls += 1
                self.ns += took
                if self.calls == 1:
                    self.first_ns = took

        llm.eval = timed

    def remove(self) -> None:
        vars(self.llm).pop("eval", None)  # the class's own again
