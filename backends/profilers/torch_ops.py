"""torch.profiler for the PyTorch engines (hf, torch-static, nanogpt).

Each engine call runs inside a `record_function("whistle_stop::<phase>")` range; every aten op's
self CPU time (its children excluded) is summed under the phase of the range that encloses it.
Intra-op worker threads do not record ops of their own, so self times on the calling thread
are wall times. The trace is torch's own `export_chrome_trace`.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from .capture import EngineProfiler, OpStat, ProfileCapture
from .categories import OpFamily, classify

_MARK = "whistle_stop::"


class TorchProfiler(EngineProfiler):
    name = "torch.profiler"

    def __init__(self) -> None:
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self._profile = profile(activities=activities)

    def start(self) -> None:
        self._profile.__enter__()

    @contextlib.contextmanager
    def step(self, phase: str) -> Iterator[None]:
        with record_function(_MARK + phase):
            yield

    def finish(self, trace_path: str) -> ProfileCapture:
        self._profile.__exit__(None, None, None)
        written = ""
        try:
            self._profile.export_chrome_trace(trace_path)
            written = trace_path
        except Exception:  # a trace is a convenience; the breakdown does not depend on it
            pass
        totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        steps: dict[str, int] = defaultdict(int)
        for event in self._profile.events():
            if event.name.startswith(_MARK):
                steps[event.name[len(_MARK) :]] += 1
                continue
            phase = _phase_of(event)
            if phase is None:
                continue
            entry = totals[(phase, event.name)]
            entry[0] += int(event.self_cpu_time_total * 1000)  # us -> ns
            entry[1] += 1
        ops = tuple(
            OpStat(phase, name, classify(name, OpFamily.TORCH).value, ns, calls)
            for (phase, name), (ns, calls) in totals.items()
        )
        return ProfileCapture(
            self.name, ops, dict(steps), trace_file=written, note="self CPU time per aten op on the calling thread"
        )


def _phase_of(event) -> str | None:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(_MARK):
            return parent.name[len(_MARK) :]
        parent = parent.cpu_parent
    return None
