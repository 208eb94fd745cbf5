"""A benchmark session: resolve the model, run every engine fairly, and build the records.

The CLI calls `BenchSession.run()` directly; the GUI calls it from a thread and consumes the
same events through `on_event`, so every number on screen is one `bench` would write.
"""

from __future__ import annotations

import time

from ..machine.compute_peak import ComputePeaks
from ..results import engine_history
from ..results.agreement import fill_agreement
from ..results.environment import add_cached_probes, collect_environment
from ..results.machine_state import machine_state_section
from ..results.roofline_curves import ENVIRONMENT_KEY as ROOFLINE_KEY
from ..results.roofline_curves import prefill_curves
from ..sources.model_files import ModelFiles
from .calibration import DEFAULT_TOKENS as CALIBRATION_TOKENS
from .calibration import calibrate_harness
from .config import BenchConfig, Cell
from .events import EventSink, HarnessCalibrated, HarnessCalibrating, RunRecorded, SessionStarted
from .orchestrator import Orchestrator
from .preparation import prepare_bench
from .result import BenchResult

# The names callers import from here (the session's public API lives in several modules).
__all__ = ["BenchConfig", "BenchResult", "BenchSession", "RunRecorded", "SessionStarted", "bench_cell", "finish_bench"]


def bench_cell(config: BenchConfig, prompt_ids: list[int]) -> Cell:
    """A bench's one cell: the prompt and the configured number of new tokens."""
    return Cell(tuple(prompt_ids), config.new_tokens)


def finish_bench(result: BenchResult, orchestrator: Orchestrator) -> None:
    """After the workers are closed: agreement with the reference, and environment.json's content
    (bench's, quality's and profile's alike)."""
    config, cancelled = result.config, orchestrator.cancelled
    result.cancelled = cancelled
    fill_agreement(result.runs, result.tokens, config.reference_backend)
    result.environment = collect_environment(
        result.model,
        config.as_dict(),
        {
            "prompt_tokens": len(result.prompt_ids),
            "threads_resolved": orchestrator.threads,
            "threads_resolution": orchestrator.threads_resolution,
            "reference": config.reference_backend,
            "cancelled": cancelled,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "machine_state": machine_state_section(result.runs),
            **({"adaptive_repeats": orchestrator.adaptive} if orchestrator.adaptive else {}),
        },
    )
    add_cached_probes(result.environment, orchestrator.threads)
    add_roofline(result, orchestrator.engine_facts())


def add_roofline(result: BenchResult, engines: dict[str, dict]) -> None:
    """The engines' facts and, where the machine's peaks are known (an earlier sweep or profile probed
    them), prefill's roofline at the bench's prompt length: what `compare` normalises by."""
    env = result.environment
    env["engines"] = engines
    peaks = env.get("compute_peaks")
    if not peaks or not engines:
        return
    try:
        config = result.model.gpt2_config
    except (AttributeError, ValueError):
        return  # a remote model: no architecture to count FLOPs of
    gb_s = (env.get("bandwidth") or {}).get("gb_s")
    env[ROOFLINE_KEY] = prefill_curves(config, engines, ComputePeaks.from_dict(peaks), gb_s, [len(result.prompt_ids)])


def _remember(result: BenchResult) -> None:
    """Each engine's build, cold start and speed for the next estimate; a cache that cannot be
    written costs the estimate, never the bench."""
    try:
        engine_history.remember(result.runs, result.model.weights_hash)
    except OSError:
        pass


class BenchSession:
    """`prepare()` then `run()`; `cancel()` from any thread."""

    def __init__(self, config: BenchConfig, on_event: EventSink | None = None) -> None:
        self.config = config.validate()
        self._orchestrator = Orchestrator(self.config, on_event)
        self.threads = self._orchestrator.threads

    def prepare(self, progress=None, cancel=None) -> tuple[ModelFiles, list[int]]:
        """Resolve the model and the prompt; raise UsageError for anything that cannot run."""
        return prepare_bench(self.config, self._orchestrator.specs, progress, cancel)

    def run(self, model: ModelFiles | None = None, prompt_ids: list[int] | None = None) -> BenchResult:
        if model is None or prompt_ids is None:
            model, prompt_ids = self.prepare()
        result = BenchResult(self.config, model, list(prompt_ids))
        self._orchestrator.emit(SessionStarted(model, list(prompt_ids), self.config))
        with self._orchestrator.session(result):
            self._orchestrator.run_bench(bench_cell(self.config, prompt_ids))
        finish_bench(result, self._orchestrator)
        if self.config.calibrate_harness and not result.cancelled:  # after the engines closed: nothing competes
            self._orchestrator.emit(HarnessCalibrating(CALIBRATION_TOKENS))
            result.environment["harness"] = calibrate_harness(
                model,
                prompt_ids,
                self.config.sampling,
                tokens=CALIBRATION_TOKENS,
                threads=self.threads,
                timeouts=self.config.timeouts,
                cancelled=lambda: self._orchestrator.cancelled,
            )
            self._orchestrator.emit(HarnessCalibrated(result.environment["harness"]))
        _remember(result)
        return result

    def cancel(self) -> None:
        """Stop after the current token of every running engine; no further runs start."""
        self._orchestrator.cancel()

    @property
    def adaptive_lines(self) -> list[str]:
        """--repeats auto: the rounds it ran, why it stopped, each engine's repeats and width."""
        return self._orchestrator.adaptive_lines

    @property
    def reference(self) -> str:
        return self.config.reference_backend
