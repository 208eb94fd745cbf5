"""The `profile` command's session: where each engine's time goes, engine by engine.

Each engine runs alone (its worker is closed before the next one starts): load, warm-up, the
measured repeats exactly as `bench` runs them (recorded: they give ms/token), then one more run
under the engine's own profiler (never recorded: it carries the profiler's overhead). The
profiled run's capture and its per-token timers become the engine's breakdown (see
profile/breakdown.py). The floor's bandwidth is probed (in its own process) once the engine has
loaded, right before its runs, and again right after its worker closes, and the faster of the two
is that engine's: a shared machine's bandwidth moves by tens of percent over minutes, so one probe
at the start of a half-hour profile judged later engines against another moment's memory system.
Each probe reads as many bytes as the engine reads per token (from its Ready): the caches keep part
of a working set a few times their size, so a 77 MB int4 model streams faster than a 1 GiB matrix
does, and only a read of the same size is a floor the engine cannot beat. The slower of the two
probes is kept too: the floor share it would have given shows how much of a gap is the machine
moving. The same probes time an in-cache GEMM: the cores' speed around each engine, since a slow
phase slows arithmetic too. Prefill's roofline divides the prompt's FLOPs by the CPU's peak for the
engine's arithmetic (machine/compute_peak.py, in a process of its own, the instructions it ran recorded),
a CUDA engine's by its GPU's (machine/gpu_compute_peak.py: cuBLAS GEMMs, probed once a profile), and its
bytes by the engine's faster bandwidth probe. The cores are probed right before each engine's runs, but
a peak only ever rises with a probe (a busy moment lowers it), so once every engine has run each one is
held to the run's final best, the same for all, and its own probe stays beside it (`peak_probed_gops`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..machine.bandwidth import Bandwidth, fits_in_cache_note, fresh_bandwidth, on_gpu
from ..machine.compute_peak import ComputePeaks, faster_peaks, probe_compute_peaks
from ..machine.gpu_compute_peak import measure_gpu_peaks
from ..profile.breakdown import EngineProfile, phase_breakdowns, top_ops
from ..results.records import RunRecord, decode_bytes_per_token, runs_of
from ..results.roofline import arithmetic_of, prefill_bytes, prefill_flops
from ..results.summary import is_measured
from ..sources.model_files import ModelFiles
from ..status import RunStatus
from .bench import BenchResult, bench_cell, finish_bench
from .config import BenchConfig
from .events import EventSink
from .orchestrator import Orchestrator
from .preparation import prepare_bench
from .recording import RecordContext, run_records


@dataclass(frozen=True)
class ProfileStarted:
    engine: str
    index: int  # 1-based
    total: int


@dataclass(frozen=True)
class ProfileEngineDone:
    # every engine's profile so far, the one just done last: copies with the run's best peak so far, so an
    # earlier row's roofline is held to the same peak as this one's, as the finished table holds them all
    so_far: tuple[EngineProfile, ...]

    @property
    def profile(self) -> EngineProfile:
        return self.so_far[-1]


@dataclass
class ProfileResult:
    bench: BenchResult  # the unprofiled measured runs (what ms/token comes from)
    profiles: list[EngineProfile] = field(default_factory=list)
    bandwidth: Bandwidth | None = None
    compute_peaks: ComputePeaks | None = None
    gpu_compute_peaks: ComputePeaks | None = None  # a CUDA engine's roofline's (probed once, at its first)

    @property
    def cancelled(self) -> bool:
        return self.bench.cancelled


class ProfileSession:
    """`prepare()` then `run()`; `cancel()` from any thread. Traces go to `trace_dir`."""

    def __init__(
        self,
        config: BenchConfig,
        trace_dir: Path,
        on_event: EventSink | None = None,
        bandwidth: Callable[..., Bandwidth | None] | None = None,
        compute_peaks: Callable[[int], ComputePeaks | None] | None = None,
        gpu_compute_peaks: Callable[[], ComputePeaks | None] | None = None,
    ) -> None:
        """`bandwidth(threads, n_bytes, device)`: one probe of the floor's bandwidth over an engine's
        n_bytes per token (default: measured afresh). `compute_peaks(threads)`: the arithmetic
        peaks of prefill's roofline (default: measured afresh, and cached as the machine's);
        `gpu_compute_peaks()`: a CUDA engine's (default: its GPU's GEMMs, measured afresh)."""
        self.config = config.validate()
        self.trace_dir = Path(trace_dir)
        self._orchestrator = Orchestrator(self.config, on_event)
        self.threads = self._orchestrator.threads
        self._bandwidth = bandwidth
        self._compute_peaks = compute_peaks or (lambda threads: probe_compute_peaks(threads, refresh=True))
        self._gpu_compute_peaks = gpu_compute_peaks or measure_gpu_peaks

    def prepare(self, progress=None, cancel=None) -> tuple[ModelFiles, list[int]]:
        return prepare_bench(self.config, self._orchestrator.specs, progress, cancel)

    def cancel(self) -> None:
        self._orchestrator.cancel()

    def run(self, model: ModelFiles | None = None, prompt_ids: list[int] | None = None) -> ProfileResult:
        if model is None or prompt_ids is None:
            model, prompt_ids = self.prepare()
        self.trace_dir.mkdir(parents=True, exist_ok=True)
        result = ProfileResult(BenchResult(self.config, model, list(prompt_ids)))
        cell = bench_cell(self.config, list(prompt_ids))
        orchestrator, names = self._orchestrator, self.config.backends
        probed: list[tuple[str, ComputePeaks | None]] = []  # each engine's device and its probe of its peaks
        with orchestrator.session(result.bench):
            for index, name in enumerate(names, start=1):
                if orchestrator.cancelled:
                    break
                orchestrator.emit(ProfileStarted(name, index, len(names)))
                profile, probes, device, peaks = self._profile_one(name, cell, result)
                probe = set_floor(profile, *probes)
                if probe is not None and probe.device == "cpu":  # the run's figure is the host's
                    result.bandwidth = faster(result.bandwidth, probe)
                result.profiles.append(profile)
                probed.append((device, peaks))
                # one table, one peak: the best so far (after the last engine, the run's final best)
                _hold_to_best_peaks(result, probed)
                # the window reads copies, not these
                orchestrator.emit(ProfileEngineDone(tuple(replace(p) for p in result.profiles)))
        finish_bench(result.bench, orchestrator)
        if result.bandwidth is not None:
            result.bench.environment["bandwidth"] = result.bandwidth.as_dict()
        if result.compute_peaks is not None:
            result.bench.environment["compute_peaks"] = result.compute_peaks.as_dict()
        if result.gpu_compute_peaks is not None:
            result.bench.environment["gpu_compute_peaks"] = result.gpu_compute_peaks.as_dict()
        return result

    def _peaks(self) -> ComputePeaks | None:
        try:
            return self._compute_peaks(self.threads)
        except Exception:  # no roofline is better than no profile (no C compiler, a failed probe)
            return None

    def _gpu_peaks(self) -> ComputePeaks | None:
        try:
            return self._gpu_compute_peaks()
        except Exception:  # no roofline is better than no profile (a failed probe)
            return None

    def _probe(self, n_bytes: float | None, device: str) -> Bandwidth | None:
        """A probe over n_bytes by the memory the engine reads from: the host's, or its GPU's. None
        without its bytes (a remote server's, the null engine's): no floor, and this host's memory is
        not a remote server's."""
        if not n_bytes:
            return None
        try:
            return (self._bandwidth or fresh_bandwidth)(self.threads, int(n_bytes), device=device)
        except Exception:  # no floor is better than no profile
            return None

    def _profile_one(
        self, name: str, cell, result: ProfileResult
    ) -> tuple[EngineProfile, tuple, str, ComputePeaks | None]:
        """The engine's profile, its two bandwidth probes (before its runs, after its close), its device,
        and its probe of that device's peaks (None where it took none, or the probe failed)."""
        orchestrator = self._orchestrator
        profile = EngineProfile(name, orchestrator.specs[name].precision)
        n_bytes, before, device, peaks = None, None, "cpu", None
        try:
            if not orchestrator.start(name, cell):
                return _failed(profile, result.bench.runs, name), (None, None), device, None
            ready = orchestrator.ready(name)
            device = ready.device if ready is not None and ready.device else "cpu"
            n_bytes = bytes_per_token(ready, len(cell.prompt_ids), cell.new_tokens)
            before = self._probe(n_bytes, device)  # the worker has loaded and sits quiet: its memory is in place
            if on_gpu(device):  # its GPU's peaks, once a profile (its prefill multiplies there)
                result.gpu_compute_peaks = peaks = result.gpu_compute_peaks or self._gpu_peaks()
            else:  # the cores' peaks at the same moment; the run's best kept, this probe's figures beside it
                peaks = self._peaks()
                if peaks is not None:
                    result.compute_peaks = peaks = faster_peaks(peaks, result.compute_peaks)
            profile = self._measure(name, cell, result, profile)
        finally:
            orchestrator.close(name)
        after = None if orchestrator.cancelled else self._probe(n_bytes, device)
        return profile, (before, after), device, peaks

    def _measure(self, name: str, cell, result: ProfileResult, profile: EngineProfile) -> EngineProfile:
        """Warm-up, the measured repeats and the profiled run of a started engine."""
        orchestrator = self._orchestrator
        orchestrator.warm_up(name, cell)
        for repeat in range(1, self.config.repeats + 1):
            if orchestrator.cancelled or not orchestrator.usable(name):
                break
            orchestrator.run_once(name, repeat, False, cell)
        measured = [r for r in runs_of(result.bench.runs, name) if is_measured(r)]  # bench's: not a failed run
        if orchestrator.cancelled or not orchestrator.usable(name) or not measured:
            return _failed(profile, result.bench.runs, name)
        outcome = orchestrator.run_profiled(name, cell, str(self.trace_dir / f"{name}.trace.json"))
        _fill_measured(profile, measured, orchestrator.ready(name), len(cell.prompt_ids), cell.new_tokens)
        _fill_prefill_work(profile, orchestrator.ready(name), result.bench.model, len(cell.prompt_ids))
        if outcome.status != RunStatus.OK:
            profile.status, profile.error = outcome.status, outcome.error
            return profile
        if outcome.profile is None:
            profile.status, profile.error = RunStatus.ERROR, "the profiled run sent no capture"
            return profile
        capture = outcome.profile
        phases = phase_breakdowns(outcome.tokens, capture, outcome.started_ns)
        profile.profiler, profile.note, profile.trace_file = capture.profiler, capture.note, capture.trace_file
        profile.decode, profile.prefill = phases.get("decode"), phases.get("prefill")
        profile.top_ops = top_ops(capture, phases)
        # as bench's record computes it: a speculative engine's first step may make several tokens (in the TTFT)
        context = RecordContext(self.config, result.bench.model, self.threads)
        ready = orchestrator.ready(name)
        profile.profiled_ms_per_token = run_records(context, name, ready, 0, True, cell, outcome)[0].ms_per_token
        return profile


def _failed(profile: EngineProfile, runs: list[RunRecord], name: str) -> EngineProfile:
    errors = [r for r in runs_of(runs, name) if r.status != RunStatus.OK]
    profile.status = errors[-1].status if errors else RunStatus.CANCELLED
    profile.error = errors[-1].error if errors else "cancelled"
    return profile


def faster(a: Bandwidth | None, b: Bandwidth | None) -> Bandwidth | None:
    """The faster of two probes (the stricter floor); either may be missing."""
    present = [x for x in (a, b) if x is not None]
    return max(present, key=lambda x: x.gb_s) if present else None


def set_floor(profile: EngineProfile, before: Bandwidth | None, after: Bandwidth | None) -> Bandwidth | None:
    """The engine's floor from the faster of its two probes (either may be missing), the slower kept
    beside it, and the cores' faster GEMM rate; returns the faster probe."""
    probes = sorted((p for p in (before, after) if p is not None), key=lambda p: p.gb_s)
    if probes:
        fastest = probes[-1]
        profile.probe_gb_s, profile.probe_label = fastest.gb_s, f"{fastest.label} at {fastest.measured_at}"
        profile.slower_probe_gb_s = probes[0].gb_s
        profile.floor_device = fastest.device
    profile.probe_compute_gflops = max((p.compute_gflops for p in probes if p.compute_gflops), default=None)
    return probes[-1] if probes else None


def _hold_to_best_peaks(result: ProfileResult, probed: list[tuple[str, ComputePeaks | None]]) -> None:
    """Every profile's roofline at the best peaks the run knows now, each with its own probe beside it."""
    for profile, (device, peaks) in zip(result.profiles, probed):
        set_roofline(profile, device_peaks(result, device), peaks)


def device_peaks(result: ProfileResult, device: str) -> ComputePeaks | None:
    """The best peaks the run knows for an engine on `device`: its GPU's, or the CPU's."""
    return result.gpu_compute_peaks if on_gpu(device) else result.compute_peaks


def set_roofline(profile: EngineProfile, peaks: ComputePeaks | None, own: ComputePeaks | None = None) -> None:
    """The peak prefill's roofline holds the engine to (its device's best: the CPU's or its GPU's): its
    arithmetic's, or fp32's where the device has no instructions for it (its products then run in fp32);
    beside it what the engine's `own` probe of that peak read (none without one, or with other instructions)."""
    if peaks is None or not profile.prefill_arithmetic:
        return
    found = peaks.peak(arithmetic_of(profile.prefill_arithmetic, profile.precision))
    if found is not None:
        arithmetic, peak = found
        profile.peak_arithmetic, profile.peak_gops, profile.peak_isa = arithmetic.value, peak.gops, peak.isa
        probed = (own.peaks if own is not None else {}).get(arithmetic.value) or {}
        profile.peak_probed_gops = probed.get("probed_gops") if probed.get("isa") == peak.isa else None


def _fill_prefill_work(profile: EngineProfile, ready, model: ModelFiles, prompt_tokens: int) -> None:
    """The prompt's FLOPs and bytes, and the arithmetic the engine says its prefill uses; none without
    its bytes (a remote server's machine is not one this profile probes; the null engine computes nothing)."""
    if ready is None or not ready.weight_bytes_per_token:
        return
    profile.prefill_arithmetic = arithmetic_of(ready.prefill_arithmetic, profile.precision).value
    profile.prefill_flops = prefill_flops(model.gpt2_config, prompt_tokens)
    profile.prefill_bytes = prefill_bytes(ready.weight_bytes_per_token, ready.kv_bytes_per_position, prompt_tokens)


def _fill_measured(
    profile: EngineProfile, measured: list[RunRecord], ready, prompt_tokens: int, new_tokens: int
) -> None:
    """ms/token, TTFT and CPU per token as bench computes them (medians of the measured runs)."""

    def median(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    profile.ms_per_token = median(r.ms_per_token for r in measured)
    profile.ttft_ms = median(r.ttft_ms for r in measured)
    cpu = median(r.cpu_s_per_token for r in measured)
    profile.cpu_ms_per_token = None if cpu is None else cpu * 1e3
    profile.bytes_per_token = bytes_per_token(ready, prompt_tokens, new_tokens)
    if profile.bytes_per_token:
        profile.floor_note = fits_in_cache_note(ready.weight_bytes_per_token, ready.device or "cpu")
    effective = median(r.spec_bytes_per_token for r in measured)
    if effective is not None:  # a speculative engine: its floor is per decoded token, target and draft together
        profile.single_token_bytes, profile.bytes_per_token = profile.bytes_per_token, effective
    profile.spec_acceptance = median(r.spec_acceptance for r in measured)
    profile.spec_tokens_per_pass = median(r.spec_tokens_per_pass for r in measured)
    profile.spec_draft_ms_per_token = median(r.spec_draft_ms_per_token for r in measured)
    profile.spec_verify_ms_per_token = median(r.spec_verify_ms_per_token for r in measured)


def bytes_per_token(ready, prompt_tokens: int, new_tokens: int) -> float | None:
    """What a decode step reads, as bench's GB/s counts it (results.records.decode_bytes_per_token);
    None when the engine does not say its weights."""
    if ready is None or not ready.weight_bytes_per_token:
        return None
    return decode_bytes_per_token(ready.weight_bytes_per_token, ready.kv_bytes_per_position, prompt_tokens, new_tokens)
