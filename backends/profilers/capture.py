"""What a profiler adapter hands back from one profiled run, and the interface adapters implement.

An adapter lives in the worker (the child process) next to its engine. The child wraps each
engine call (the prefill, then every decode) in `step(phase)`; the adapter sums what its
runtime's own profiler saw inside each step per operation, and writes the runtime's trace in
the Chrome trace format (Perfetto, chrome://tracing). Everything here is small and picklable:
it travels to the parent in one `ProfileCaptured` event.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

PHASES = ("prefill", "decode")


@dataclass(frozen=True)
class OpStat:
    """One operation's time summed over every step of one phase (self time: children excluded)."""

    phase: str  # "prefill" or "decode"
    name: str  # the runtime's own operation name ("aten::addmm", "MatMulInteger", "linear")
    category: str  # a categories.Category value
    total_ns: int
    calls: int


@dataclass(frozen=True)
class ProfileCapture:
    profiler: str  # "torch.profiler", "onnxruntime session profiling", "timers", "none"
    ops: tuple[OpStat, ...] = ()
    steps: dict[str, int] = field(default_factory=dict)  # phase -> engine calls profiled
    # phase -> ns the runtime itself accounts for a whole step (ORT's model_run, llama.cpp's eval):
    # what lies between it and the ops is the runtime's own overhead; absent where not reported
    runtime_ns: dict[str, int] = field(default_factory=dict)
    trace_file: str = ""  # the Chrome trace written, or "" when none could be
    note: str = ""  # what this profiler cannot see
    # phase -> ns the adapter itself spent inside the steps (reading counters): taken out of them
    profiler_ns: dict[str, int] = field(default_factory=dict)


class EngineProfiler(ABC):
    """One profiled run: `start()`, a `step(phase)` around each engine call, then `finish()`."""

    name: str = "profiler"

    def start(self) -> None:  # noqa: B027 - a hook: only profilers with set-up override it
        """Begin profiling (called once, before the run's first engine call)."""

    @contextlib.contextmanager
    def step(self, phase: str) -> Iterator[None]:
        """Wrap one engine call; the default only marks nothing (adapters override)."""
        yield

    @abstractmethod
    def finish(self, trace_path: str) -> ProfileCapture:
        """Stop, write the trace to `trace_path` (Chrome trace JSON) and summarise per phase."""


def span(name: str, began_ns: int, spent_ns: int, tid: int | None = None, **args) -> dict:
    """One Chrome-trace "complete" event on this process's timeline (perf_counter_ns stamps)."""
    event = {
        "name": name,
        "ph": "X",
        "ts": began_ns / 1000,
        "dur": spent_ns / 1000,
        "pid": os.getpid(),
        "tid": threading.get_ident() if tid is None else tid,
    }
    if args:
        event["args"] = args
    return event


def write_trace(path: str, events: list[dict], **other) -> str:
    """Write events as Chrome-trace JSON (Perfetto, chrome://tracing); the path, or "" if it could not be
    written (a trace is a convenience: the breakdown does not depend on it)."""
    try:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(
                {"traceEvents": events, "displayTimeUnit": "ms", **({"otherData": other} if other else {})}, handle
            )
        return path
    except OSError:
        return ""


class StepTrace:
    """Counts the engine's prefill/decode steps and keeps one trace span per step, plus any spans
    its owner adds: for the adapters whose runtime has no tracer of its own (timers, llama.cpp)."""

    def __init__(self) -> None:
        self.steps: dict[str, int] = defaultdict(int)
        self.events: list[dict] = []

    @contextlib.contextmanager
    def step(self, phase: str) -> Iterator[None]:
        self.steps[phase] += 1
        began = time.perf_counter_ns()
        try:
            yield
        finally:
            self.events.append(span(f"whistle_stop::{phase}", began, time.perf_counter_ns() - began))
