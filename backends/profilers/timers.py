"""Timers around a module's functions: the profiler of an engine written in plain Python (numpy).

While profiling, each named function of the module is replaced by a timed wrapper (the module's
functions call each other through its globals, so nested calls are timed too); a function's
self time excludes the timed functions it calls. Every call is also a Chrome-trace event.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType

from .capture import EngineProfiler, OpStat, ProfileCapture, StepTrace, span, write_trace
from .categories import OpFamily, classify


class FunctionTimers(EngineProfiler):
    name = "timers around the runtime's functions"

    def __init__(self, module: ModuleType, functions: Sequence[str], family: OpFamily) -> None:
        self._module, self._names, self._family = module, list(functions), family
        self._originals: dict[str, Callable] = {}
        self._stack: list[int] = []  # time spent in timed children of each open call
        self._phase = "other"
        self._totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        self._trace = StepTrace()  # steps, and each timed call as a span

    def start(self) -> None:
        for name in self._names:
            original = getattr(self._module, name)
            self._originals[name] = original
            setattr(self._module, name, self._timed(name, original))

    def _timed(self, name: str, function: Callable) -> Callable:
        def timed(*args, **kwargs):
            began = time.perf_counter_ns()
            self._stack.append(0)
            try:
                return function(*args, **kwargs)
            finally:
                spent = time.perf_counter_ns() - began
                children = self._stack.pop()
                if self._stack:
                    self._stack[-1] += spent
                entry = self._totals[(self._phase, name)]
                entry[0] += spent - children
                entry[1] += 1
                self._trace.events.append(span(name, began, spent))

        timed.__wrapped__ = function  # type: ignore[attr-defined]  # how finish() finds the original
        return timed

    @contextlib.contextmanager
    def step(self, phase: str) -> Iterator[None]:
        self._phase = phase
        with self._trace.step(phase):
            yield

    def finish(self, trace_path: str) -> ProfileCapture:
        for name, original in self._originals.items():
            setattr(self._module, name, original)
        written = write_trace(trace_path, self._trace.events)
        ops = tuple(
            OpStat(phase, name, classify(name, self._family).value, ns, calls)
            for (phase, name), (ns, calls) in self._totals.items()
        )
        return ProfileCapture(
            self.name,
            ops,
            dict(self._trace.steps),
            trace_file=written,
            note="self time of each runtime function (the rest of a step is Python around them)",
        )
