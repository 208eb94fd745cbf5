"""A C step's own timers: the step sums nanoseconds per category on its main thread.

Each of the step's operations ends at a barrier, so the main thread's time between two of them
is that operation's wall time. What a step spends outside the C call (ctypes, the logits array)
is left to "framework + Python" by the breakdown. The engine names its timers and their
categories (in the C code's order); this module knows no engine.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np

from .capture import EngineProfiler, OpStat, ProfileCapture, StepTrace, write_trace
from .categories import Category


class TimedStep(Protocol):
    def set_timers(self, timers: np.ndarray | None) -> None:
        """Sum each category's nanoseconds into `timers` (int64, one per timer) from now on; None: stop."""


class NativeStepTimers(EngineProfiler):
    name = "the native step's own timers"

    def __init__(self, model: TimedStep, timers: Sequence[tuple[str, Category]]) -> None:
        """`timers`: each of the step's timers, in its order, with the breakdown's category."""
        self._model = model
        self._names = [name for name, _ in timers]
        self._categories = dict(timers)
        self._timers = np.zeros(len(timers), np.int64)
        self._totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        self._trace = StepTrace()

    def start(self) -> None:
        self._model.set_timers(self._timers)

    @contextlib.contextmanager
    def step(self, phase: str) -> Iterator[None]:
        before = self._timers.copy()
        with self._trace.step(phase):
            yield
        for name, spent in zip(self._names, (self._timers - before).tolist()):
            entry = self._totals[(phase, name)]
            entry[0] += int(spent)
            entry[1] += 1

    def finish(self, trace_path: str) -> ProfileCapture:
        self._model.set_timers(None)
        written = write_trace(trace_path, self._trace.events)
        ops = tuple(
            OpStat(phase, name, self._categories[name].value, ns, calls)
            for (phase, name), (ns, calls) in self._totals.items()
        )
        return ProfileCapture(
            self.name,
            ops,
            dict(self._trace.steps),
            trace_file=written,
            note="wall time of each category inside the C step, on its main thread",
        )
