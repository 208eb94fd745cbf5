"""llama.cpp's own timings (llama_perf_context) for the llama.cpp engines.

llama.cpp reports the time its decode calls spent evaluating the graph, for prompt batches
("p_eval") and single tokens ("eval"), but no per-operation split. So its whole evaluation is
one category ("engine (not split)"), and what the engine call spends outside it (the Python
binding, llama-cpp-python's copies of the logits) is framework + Python. The trace holds the
engine calls as spans.
"""

from __future__ import annotations

import contextlib

import llama_cpp

from .capture import EngineProfiler, ProfileCapture, StepTrace, write_trace


class LlamaPerfProfiler(EngineProfiler):
    name = "llama.cpp timings (llama_perf_context)"

    def __init__(self, ctx) -> None:
        self._ctx = ctx
        self._trace = StepTrace()

    def start(self) -> None:
        llama_cpp.llama_perf_context_reset(self._ctx)

    def step(self, phase: str) -> contextlib.AbstractContextManager[None]:  # type: ignore[override]  # the trace's own
        return self._trace.step(phase)

    def finish(self, trace_path: str) -> ProfileCapture:
        data = llama_cpp.llama_perf_context(self._ctx)
        runtime = {"prefill": int(data.t_p_eval_ms * 1e6), "decode": int(data.t_eval_ms * 1e6)}
        written = write_trace(
            trace_path,
            self._trace.events,
            llama_perf={
                "t_p_eval_ms": data.t_p_eval_ms,
                "n_p_eval": data.n_p_eval,
                "t_eval_ms": data.t_eval_ms,
                "n_eval": data.n_eval,
            },
        )
        return ProfileCapture(
            self.name,
            (),
            dict(self._trace.steps),
            runtime,
            written,
            note="llama.cpp times its graph evaluation as a whole (no per-op split)",
        )
