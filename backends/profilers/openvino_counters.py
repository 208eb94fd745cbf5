"""OpenVINO's performance counters for the OpenVINO engines.

Counters are a compile-time option, so a profiled run uses a second compiled model with
PERF_COUNT on; the engine swaps its infer request for the run and back. After each inference
the request's `profiling_info` lists every node; nodes that did not run in it (fused, optimised
out, shape-only work that a warm graph skips) are skipped. Reading the counters costs Python
time inside the step: it is measured and taken out of the step (ProfileCapture.profiler_ns).

A node's `real_time` is not that inference's: the CPU plugin reports the MEAN over every
execution of the node since the model was compiled (its PerfCount is total / count, in whole
microseconds). Read as per-step times, the decode steps inherited the prefill's long products,
so the counters summed past the measured step (docs/engines.md). Each node's running total
(mean x executions seen) is tracked instead, and a step gets the increase: over a phase the
increases telescope, so the phase's total is off by less than one microsecond per execution at
each end, whatever the truncation of the means.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from .capture import EngineProfiler, OpStat, ProfileCapture, span, write_trace
from .categories import OpFamily, classify


class OpenVinoCounters(EngineProfiler):
    name = "OpenVINO performance counters"

    def __init__(
        self, open_profiled: Callable[[], object], use_request: Callable[[object], None], current: object
    ) -> None:
        self._open, self._use, self._original = open_profiled, use_request, current
        self._request: Any = None  # an openvino.InferRequest once started
        self._totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        self._steps: dict[str, int] = defaultdict(int)
        self._executions: dict[str, int] = defaultdict(int)  # node -> executions seen (the plugin's count)
        self._running_ns: dict[str, int] = defaultdict(int)  # node -> mean x executions at the last reading
        self._spent: dict[str, int] = defaultdict(int)
        self._trace: list[dict] = []

    def start(self) -> None:
        self._request = self._open()
        self._use(self._request)

    @contextlib.contextmanager
    def step(self, phase: str) -> Iterator[None]:
        self._steps[phase] += 1
        began = time.perf_counter_ns()
        yield
        ended = time.perf_counter_ns()
        cursor = began
        for info in self._request.profiling_info:
            if str(info.status).split(".")[-1] != "EXECUTED":
                continue
            ns = self._this_execution_ns(info.node_name, round(info.real_time.total_seconds() * 1e9))
            entry = self._totals[(phase, info.node_type)]
            entry[0] += ns
            entry[1] += 1
            # laid end to end inside the step: OpenVINO reports durations, not start times (a step's
            # share of a truncated mean can come out a few microseconds below zero: drawn as empty)
            self._trace.append(span(info.node_type, cursor, max(ns, 0), node=info.node_name))
            cursor += max(ns, 0)
        # the step on a row of its own, above its nodes
        self._trace.append(span(f"whistle_stop::{phase}", began, ended - began, tid=threading.get_ident() + 1))
        self._spent[phase] += time.perf_counter_ns() - ended

    def _this_execution_ns(self, node: str, mean_ns: int) -> int:
        """This execution's share of the node's running total (the plugin reports the mean so far)."""
        self._executions[node] += 1
        total = mean_ns * self._executions[node]
        spent, self._running_ns[node] = total - self._running_ns[node], total
        return spent

    def finish(self, trace_path: str) -> ProfileCapture:
        self._use(self._original)
        written = write_trace(trace_path, self._trace)
        ops = tuple(
            OpStat(phase, name, classify(name, OpFamily.OPENVINO_NODES).value, ns, calls)
            for (phase, name), (ns, calls) in self._totals.items()
        )
        return ProfileCapture(
            self.name,
            ops,
            dict(self._steps),
            trace_file=written,
            profiler_ns=dict(self._spent),
            note="real time per executed node type (fused nodes appear under the kernel that ran)",
        )
