"""ONNX Runtime's own session profiling for the ONNX engines.

A profiled run uses a second session opened with `enable_profiling` (ORT only profiles from a
session's creation); the engine swaps it in for the run and back afterwards. ORT writes a
Chrome-trace JSON: one "model_run" event per `run` call and one "<node>_kernel_time" event per
executed node, with the node's op type in args.op_name. The i-th model_run is the i-th engine
call, whose phase the child told us; nodes belong to the model_run that contains them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from .capture import EngineProfiler, OpStat, ProfileCapture
from .categories import OpFamily, classify


class OrtProfiler(EngineProfiler):
    name = "onnxruntime session profiling"

    def __init__(
        self, open_profiled: Callable[[str], object], use_session: Callable[[object], None], current: object
    ) -> None:
        """`open_profiled(prefix)`: a new InferenceSession with profiling on, files at `prefix`;
        `use_session(s)`: make the engine run on `s`; `current`: the session to restore."""
        self._open, self._use, self._original = open_profiled, use_session, current
        self._folder = tempfile.mkdtemp(prefix="whistle-stop-ort-profile-")
        self._session: Any = None  # an onnxruntime.InferenceSession once started
        self._phases: list[str] = []

    def start(self) -> None:
        self._session = self._open(os.path.join(self._folder, "ort"))
        self._use(self._session)

    @contextlib.contextmanager
    def step(self, phase: str) -> Iterator[None]:
        self._phases.append(phase)
        yield

    def finish(self, trace_path: str) -> ProfileCapture:
        try:
            written = self._session.end_profiling()
            self._use(self._original)
            with open(written, encoding="utf-8") as handle:
                events = json.load(handle)
            shutil.copyfile(written, trace_path)  # already Chrome-trace JSON
        finally:
            self._session = None
            shutil.rmtree(self._folder, ignore_errors=True)
        return summarise(events, self._phases, self.name, trace_path)


def summarise(events: list[dict], phases: list[str], profiler: str, trace_path: str = "") -> ProfileCapture:
    """Per-phase op totals from ORT's profile events, given the phase of each `run` call in order."""
    runs = sorted(
        (e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"), key=lambda e: e["ts"]
    )
    starts = [r["ts"] for r in runs]
    runtime: dict[str, int] = defaultdict(int)
    steps: dict[str, int] = defaultdict(int)
    for index, run in enumerate(runs):
        phase = phases[index] if index < len(phases) else "other"
        runtime[phase] += int(run["dur"] * 1000)
        steps[phase] += 1
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for event in events:
        if event.get("cat") != "Node" or not str(event.get("name", "")).endswith("_kernel_time"):
            continue
        index = bisect_right(starts, event["ts"]) - 1
        if index < 0 or event["ts"] > runs[index]["ts"] + runs[index]["dur"]:
            continue  # outside every model_run (session initialisation)
        phase = phases[index] if index < len(phases) else "other"
        op = (event.get("args") or {}).get("op_name", event["name"])
        entry = totals[(phase, op)]
        entry[0] += int(event["dur"] * 1000)  # us -> ns
        entry[1] += 1
    ops = tuple(
        OpStat(phase, op, classify(op, OpFamily.ORT).value, ns, calls) for (phase, op), (ns, calls) in totals.items()
    )
    return ProfileCapture(
        profiler,
        ops,
        dict(steps),
        dict(runtime),
        trace_path,
        note="kernel time per node (op type); model_run - nodes = ORT's executor overhead",
    )
