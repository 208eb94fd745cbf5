"""OpenVINO's counters are running means: the adapter turns them back into each execution's time.
Pure Python (a request that reports as the CPU plugin does), so no OpenVINO is needed."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from whistle_stop.backends.profilers.openvino_counters import OpenVinoCounters


@dataclass
class _Info:
    node_name: str
    node_type: str
    status: str
    real_time: datetime.timedelta


class _MeanReportingRequest:
    """Like the CPU plugin's PerfCount: each node reports total // count in whole microseconds."""

    def __init__(self) -> None:
        self.totals: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        self.ran: set[str] = set()
        self.types = {"lm_head": "FullyConnected", "qkv": "FullyConnected", "shape": "ShapeOf"}

    def infer(self, us: dict[str, int]) -> None:
        self.ran = set(us)
        for node, spent in us.items():
            self.totals[node] = self.totals.get(node, 0) + spent
            self.counts[node] = self.counts.get(node, 0) + 1

    @property
    def profiling_info(self) -> list[_Info]:
        return [
            _Info(
                node,
                self.types[node],
                "Status.EXECUTED" if node in self.ran else "Status.NOT_RUN",
                datetime.timedelta(microseconds=self.totals[node] // self.counts[node]),
            )
            for node in self.totals
        ]


def test_each_step_gets_its_own_time_not_the_running_mean(tmp_path):
    request = _MeanReportingRequest()
    counters = OpenVinoCounters(lambda: request, lambda r: None, None)
    counters.start()
    with counters.step("prefill"):
        request.infer({"lm_head": 1501, "qkv": 97, "shape": 33})
    decode_lm_head = [603, 598, 611, 600, 607, 599, 602]
    for spent in decode_lm_head:
        with counters.step("decode"):
            request.infer({"lm_head": spent, "qkv": 21})  # the shape work runs only once
    capture = counters.finish(str(tmp_path / "trace.json"))
    ops = {(op.phase, op.name): op.total_ns for op in capture.ops}
    assert ops[("prefill", "FullyConnected")] == (1501 + 97) * 1000
    assert ops[("prefill", "ShapeOf")] == 33 * 1000
    decode = ops[("decode", "FullyConnected")]
    truth = (sum(decode_lm_head) + 21 * len(decode_lm_head)) * 1000
    # the means are truncated to whole microseconds: off by under 1 us per execution at each end
    assert abs(decode - truth) <= 2 * 2 * (len(decode_lm_head) + 1) * 1000
    assert ("decode", "ShapeOf") not in ops
    # read as per-step times, the running means would have charged the decode steps the prefill's share
    naive = sum((1501 + sum(decode_lm_head[: k + 1])) // (k + 2) + 21 for k in range(len(decode_lm_head))) * 1000
    assert naive - truth > 1000 * 1000
