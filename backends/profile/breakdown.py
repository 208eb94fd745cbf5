"""One engine's profile: its measured steps broken into categories, against the memory floor.

Inputs are the run's own timers (per token: the engine call `engine_ns` and the harness around
it, `harness_ns`) and the profiler's capture. Per phase (the prefill, then every decode step),
averaged over the phase's steps:

    kernels by category   what the runtime's profiler attributes to operations (self time)
    framework + Python    the engine call minus those kernels: dispatch, views, bindings, Python
                          (an engine with no per-op profiler shows its call as "engine (not split)")
    harness               sampling, detokenizing and sending (events.Token.harness_ns)
    unattributed          the measured step minus all of the above (kernels a profiler counts
                          twice, or a step it did not see); shown, never spread over the others

The floor is the time the memory system alone needs per decoded token: the bytes that must
move (weights at their stored size + the KV cache read at that position) over the measured
bandwidth. Prefill's is a roofline (results/roofline.py): the larger of its FLOPs over the CPU's
peak for the engine's arithmetic and its bytes over the same bandwidth. Profiled runs are never
benchmark records: the unprofiled run's ms/token stands beside the profiled one, and the
difference is the profiler's own overhead.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ..machine.bandwidth import limit_ms_per_token
from ..profilers.capture import ProfileCapture
from ..profilers.categories import ORDER, Category
from ..results.roofline import Roofline
from ..results.stats import first_step_tokens
from ..status import RunStatus

TOP_OPS = 10


@dataclass(frozen=True)
class PhaseBreakdown:
    phase: str  # "prefill" or "decode"
    steps: int
    step_ms: float  # mean measured step in the profiled run: engine call + harness
    categories: dict[str, float]  # every Category value -> ms per step

    def share(self, category: Category) -> float:
        return self.categories.get(category.value, 0.0) / self.step_ms if self.step_ms > 0 else 0.0

    @property
    def attributed_ms(self) -> float:
        return sum(v for k, v in self.categories.items() if k != Category.UNATTRIBUTED.value)


@dataclass(frozen=True)
class OpShare:
    phase: str
    name: str
    category: str
    ms_per_step: float
    calls_per_step: float
    share: float  # of the phase's mean step


@dataclass
class EngineProfile:
    engine: str
    precision: str = ""
    profiler: str = "none"
    note: str = ""
    status: RunStatus = RunStatus.OK
    error: str = ""
    # the median of the unprofiled measured runs' RunRecord.ms_per_token, bench's figure: each run's median
    # ITL, or, where steps make several tokens (speculative), its time per decoded token after the first step
    ms_per_token: float | None = None
    profiled_ms_per_token: float | None = None  # the profiled run's RunRecord.ms_per_token
    ttft_ms: float | None = None  # the median TTFT of the unprofiled measured runs
    cpu_ms_per_token: float | None = None  # unprofiled run: the worker's CPU time per generated token
    bytes_per_token: float | None = None  # weights (stored size) + KV read at the mean decode position
    # probe_*: the bandwidth probes' figures the floor divides by, never the engine's own rate (runs.csv's
    # bandwidth_gb_s); files.read_profile maps the names profile.json had before
    probe_gb_s: float | None = None  # the faster of the engine's two probes: the floor's (the stricter)
    probe_label: str = ""  # that probe in one line, and when
    floor_device: str = "cpu"  # whose memory the floor's probes read: "cpu" (the host's) or "cuda" (the GPU's)
    slower_probe_gb_s: float | None = None  # the slower of the two: how far the machine moved in the engine's slot
    probe_compute_gflops: float | None = None  # the cores' GEMM rate at the two probes, the faster: low in a slow phase
    floor_note: str = ""  # set when the weights fit in the last-level cache: DRAM does not bound the engine
    prefill_arithmetic: str = ""  # what its prefill multiplies (EngineInfo's, or its precision's fastest)
    peak_arithmetic: str = ""  # whose peak holds it: its own, or fp32's where the CPU has no instructions for it
    peak_gops: float | None = None  # that peak, 1e9 operations per second (the machine's best seen)
    peak_probed_gops: float | None = None  # what this profile's own probe of it read (a slower phase reads less)
    peak_isa: str = ""  # the instructions the peak ran
    prefill_flops: float | None = None  # the prompt's matrix products and attention (results.roofline.prefill_flops)
    prefill_bytes: float | None = None  # the weights once and the prompt's keys and values written
    # A speculative engine (medians of its measured runs): bytes_per_token is then what target and
    # draft read per decoded token (the effective floor's), and this the target's own per token (the
    # single-token floor's, which such an engine may beat)
    single_token_bytes: float | None = None
    spec_acceptance: float | None = None
    spec_tokens_per_pass: float | None = None
    spec_draft_ms_per_token: float | None = None
    spec_verify_ms_per_token: float | None = None
    decode: PhaseBreakdown | None = None
    prefill: PhaseBreakdown | None = None
    top_ops: list[OpShare] = field(default_factory=list)
    trace_file: str = ""

    @property
    def floor_ms(self) -> float | None:
        if not self.bytes_per_token or not self.probe_gb_s:
            return None
        return limit_ms_per_token(self.bytes_per_token, self.probe_gb_s)

    @property
    def roofline(self) -> Roofline | None:
        if not self.prefill_flops or not self.peak_gops:
            return None
        return Roofline(self.prefill_flops, self.prefill_bytes or 0.0, self.peak_gops, self.probe_gb_s or 0.0)

    @property
    def roofline_ms(self) -> float | None:
        """The shortest this prompt's prefill can take at the probed peak and bandwidth."""
        roofline = self.roofline
        return roofline.ms if roofline else None

    @property
    def ttft_share(self) -> float | None:
        """Roofline / measured TTFT: how close the prefill runs to the machine's limit (decode's floor share's twin)."""
        roofline = self.roofline_ms
        return roofline / self.ttft_ms if roofline and self.ttft_ms else None

    @property
    def ttft_share_at_probe(self) -> float | None:
        """The roofline share had this profile's own probe of the peak set it: with `ttft_share`, the
        range a slower phase of the machine (the cores' clocks, a neighbour) leaves the figure in."""
        roofline = self.roofline
        if roofline is None or not self.peak_probed_gops or not self.ttft_ms:
            return None
        return replace(roofline, peak_gops=self.peak_probed_gops).ms / self.ttft_ms

    @property
    def single_token_floor_ms(self) -> float | None:
        """A speculative engine's target alone: its bytes per token over the same bandwidth."""
        if not self.single_token_bytes or not self.probe_gb_s:
            return None
        return limit_ms_per_token(self.single_token_bytes, self.probe_gb_s)

    @property
    def overhead_pct(self) -> float | None:
        if not self.ms_per_token or self.profiled_ms_per_token is None:
            return None
        return 100 * (self.profiled_ms_per_token / self.ms_per_token - 1)

    @property
    def floor_share(self) -> float | None:
        """Floor / measured ms per token: how close the engine runs to the memory system's limit."""
        floor = self.floor_ms
        return floor / self.ms_per_token if floor and self.ms_per_token else None

    @property
    def floor_share_at_slower(self) -> float | None:
        """The floor share had the slower probe set the floor: with `floor_share`, the range the
        machine's own movement during the engine's slot leaves the figure in."""
        if not self.floor_share or not self.slower_probe_gb_s or not self.probe_gb_s:
            return None
        return self.floor_share * self.probe_gb_s / self.slower_probe_gb_s


def median_decode_ms(tokens: Sequence) -> float | None:
    """The median inter-token gap of one run's decode steps (tokens 1..N-1): bench's ms/token for an
    engine whose steps make one token each (records.fill_metrics gives it for every engine)."""
    gaps = [(b.t_ns - a.t_ns) / 1e6 for a, b in zip(tokens, tokens[1:])]
    return statistics.median(gaps) if gaps else None


def phase_breakdowns(tokens: Sequence, capture: ProfileCapture, start_ns: int) -> dict[str, PhaseBreakdown]:
    """Prefill (token 0) and decode (tokens 1..) of one profiled run, broken into categories.
    `start_ns`: the run's start (RunStarted.t_ns), where prefill's step (the TTFT) begins."""
    kernels: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for op in capture.ops:
        kernels[op.phase][op.category] += op.total_ns
    out = {}
    # Tokens that came with the first step (a speculative pass over the prompt) are the TTFT's, as
    # bench's ms/token counts only the tokens decoded after it.
    first = first_step_tokens([getattr(t, "step", None) for t in tokens]) or 1
    for phase, chosen in (("prefill", tokens[:1]), ("decode", tokens[first:])):
        timed = [t for t in chosen if t.harness_ns is not None]
        if not timed:
            continue
        count = len(timed)
        harness = sum(t.harness_ns for t in timed) / count / 1e6
        split = all(t.engine_ns is not None for t in timed)
        engine = sum(t.engine_ns for t in timed) / count / 1e6 if split else None
        step = (
            sum((t.engine_ns or 0) + t.harness_ns for t in timed) / count / 1e6
            if split
            else _mean_gap_ms(tokens, phase, start_ns, first)
        )
        steps = capture.steps.get(phase) or count
        own = capture.profiler_ns.get(phase, 0) / steps / 1e6  # the adapter's own time inside each step
        if engine is not None:
            engine -= own
            step -= own
        values = {c.value: 0.0 for c in ORDER}
        seen = 0.0
        for category, ns in kernels.get(phase, {}).items():
            if category == Category.FRAMEWORK.value:
                continue  # views and dispatch ops: counted in the residual below
            values[category] += ns / steps / 1e6
            seen += ns / steps / 1e6
        runtime = capture.runtime_ns.get(phase)
        if engine is None:  # a generator we cannot step into: engine time = the gap minus the harness
            values[Category.ENGINE_UNSPLIT.value] = max(0.0, step - harness)
        elif capture.ops:
            values[Category.FRAMEWORK.value] = max(0.0, engine - seen)
        elif runtime is not None:  # the runtime times its own evaluation, without a per-op split
            values[Category.ENGINE_UNSPLIT.value] = runtime / steps / 1e6
            values[Category.FRAMEWORK.value] = max(0.0, engine - runtime / steps / 1e6)
        else:
            values[Category.ENGINE_UNSPLIT.value] = engine
        values[Category.HARNESS.value] = harness
        values[Category.UNATTRIBUTED.value] = step - sum(values.values())
        out[phase] = PhaseBreakdown(phase, count, step, values)
    return out


def _mean_gap_ms(tokens: Sequence, phase: str, start_ns: int, first: int = 1) -> float:
    """The mean measured step of a phase from the stamps alone: prefill's is the TTFT (run start ->
    first token), decode's the mean time per token decoded after the first step's `first` tokens."""
    if phase == "prefill":
        return (tokens[0].t_ns - start_ns) / 1e6 if tokens else 0.0
    decoded = len(tokens) - first
    return (tokens[-1].t_ns - tokens[first - 1].t_ns) / 1e6 / decoded if decoded > 0 else 0.0


def top_ops(capture: ProfileCapture, phases: dict[str, PhaseBreakdown], limit: int = TOP_OPS) -> list[OpShare]:
    """The most expensive operations per step, decode first (it is what ms/token measures)."""
    shares = []
    for op in capture.ops:
        breakdown = phases.get(op.phase)
        steps = capture.steps.get(op.phase) or (breakdown.steps if breakdown else 0)
        if not steps or breakdown is None:
            continue
        ms = op.total_ns / steps / 1e6
        shares.append(
            OpShare(
                op.phase,
                op.name,
                op.category,
                ms,
                op.calls / steps,
                ms / breakdown.step_ms if breakdown.step_ms else 0.0,
            )
        )
    shares.sort(key=lambda s: (s.phase != "decode", -s.ms_per_step))
    return shares[:limit]
