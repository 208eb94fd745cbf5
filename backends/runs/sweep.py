"""Sweeps: every engine over a grid of (prompt tokens, new tokens), resumable.

Workers load once for the whole sweep; every engine is warmed up in every cell (each prompt length
has its own first-call costs: shape-specific kernels, buffers, caches), then the cell's repeats
run in the orchestrator's fair order, as in a bench. After each cell the records are written atomically
with the list of completed cells, so running the same command again after a cancel or a crash
continues where it stopped; other settings in the folder are refused (or `restart`).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

from ..errors import UsageError
from ..machine.bandwidth import Bandwidth, cached_bandwidth, on_gpu, probe_bandwidth
from ..machine.compute_peak import ComputePeaks, cached_compute_peaks, probe_compute_peaks
from ..machine.gpu_bandwidth import measure_gpu_bandwidth
from ..machine.gpu_compute_peak import measure_gpu_peaks
from ..results.agreement import fill_agreement
from ..results.environment import collect_environment
from ..results.export import write_results
from ..results.machine_state import machine_state_section
from ..results.roofline_curves import ENVIRONMENT_KEY, prefill_curves
from ..sources.model_files import resolve_model
from .config import BenchConfig, Cell
from .events import CellDone, CellStarted, EventSink, SessionStarted, SweepNote
from .orchestrator import Orchestrator
from .preparation import check_available
from .result import BenchResult
from .sweep_plan import (
    SWEEP_KEY,
    SweepGrid,
    SweepPlan,
    finished_cells_only,
    plan_sweep,
    read_previous,
    sweep_fingerprint,
)

# The names callers import from here (events and plan types live in their own modules).
__all__ = ["CellDone", "CellStarted", "MAX_RESTARTS", "SweepGrid", "SweepNote", "SweepPlan", "SweepSession"]

MAX_RESTARTS = 2  # per engine and sweep


class SweepSession:
    """`prepare()` then `run()`; `cancel()` from any thread. With `out_dir`, writes after each cell."""

    def __init__(
        self,
        config: BenchConfig,
        grid: SweepGrid,
        out_dir: Path | None = None,
        restart: bool = False,
        on_event: EventSink | None = None,
        measure_bandwidth: bool = True,
    ) -> None:
        if config.mode != "fair":
            raise UsageError("a sweep runs in fair mode only")
        self.config = config.validate()
        self._orchestrator = Orchestrator(self.config, on_event)
        self.threads = self._orchestrator.threads
        self.grid = grid.validate()
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.restart = restart
        self.measure_bandwidth = measure_bandwidth
        self.plan: SweepPlan | None = None
        self.bandwidth: Bandwidth | None = None
        self.compute_peaks: ComputePeaks | None = None
        # a CUDA engine's roofline: its GPU's bandwidth and GEMM peaks (probed once its engines have loaded)
        self.gpu_bandwidth: Bandwidth | None = None
        self.gpu_peaks: ComputePeaks | None = None
        self._completed: list[tuple[int, int]] = []
        self._engines: dict[str, dict] = {}
        self._base_environment: dict = {}
        self._restarts: dict[str, int] = {}
        self._given_up: set[str] = set()  # engines lost after their last restart

    @property
    def reference(self) -> str:
        return self.config.reference_backend

    def cancel(self) -> None:
        """Stop after the current token of every running engine; no further runs start."""
        self._orchestrator.cancel()

    def prepare(self, progress=None, cancel=None) -> SweepPlan:
        check_available(self._orchestrator.specs)
        model = resolve_model(self.config.model, progress, cancel)
        fingerprint = sweep_fingerprint(self.config, model, self.threads, self.reference)
        previous = read_previous(self.out_dir, fingerprint, self.restart)
        self.plan = plan_sweep(self.config, self.grid, model, fingerprint, previous)
        return self.plan

    # --- running -----------------------------------------------------------------------------
    def run(self, plan: SweepPlan | None = None) -> BenchResult:
        plan = plan or self.plan or self.prepare()
        self.plan = plan
        self._completed = list(plan.completed)
        self._engines = dict(plan.previous_engines)
        first = plan.cells[0] if plan.cells else None
        result = BenchResult(
            self.config,
            plan.model,
            list(first.prompt_ids) if first else [],
            list(plan.previous_runs),
            list(plan.previous_tokens),
            load=list(plan.previous_load),
        )
        self._orchestrator.emit(SessionStarted(plan.model, result.prompt_ids, self.config))
        with self._orchestrator.session(result):
            if self.measure_bandwidth and plan.cells and not self._orchestrator.cancelled:
                if cached_bandwidth(self.threads) is None:
                    self._orchestrator.emit(SweepNote("measuring memory bandwidth (once per machine and thread count)"))
                self.bandwidth = probe_bandwidth(self.threads)
                self.compute_peaks = self._peaks()
            self._base_environment = collect_environment(plan.model, self.config.as_dict())
            self._save(result)  # the plan (and any skipped cells) is on disk before the first run
            if plan.cells:
                self._run_cells(result, plan.cells)
        result.cancelled = self._orchestrator.cancelled
        if result.cancelled:
            # The cell a cancel cut short runs again on a resume: its runs are not kept, so the
            # table, the charts and the folder show what a resume keeps and no half cell beside it.
            result.runs, result.tokens, result.load = finished_cells_only(
                result.runs, result.tokens, result.load, self._completed
            )
        self._save(result)
        return result

    def _run_cells(self, result: BenchResult, cells: list[Cell]) -> None:
        loaded = self._orchestrator.load(cells[0])  # load once for the whole sweep (warmed up on the first cell)
        self._engines.update(self._orchestrator.engine_facts())
        if self.measure_bandwidth and any(on_gpu(str(e.get("device") or "cpu")) for e in self._engines.values()):
            self._probe_gpu()
        if not loaded:
            return
        total = len(cells)
        for index, cell in enumerate(cells, start=1):
            p, n = cell.key
            if index > 1:
                self._revive(cell)
            self._orchestrator.emit(CellStarted(p, n, index, total))
            if index > 1:
                self._warm_up(cell)
            self._orchestrator.run_repeats(cell)
            self._orchestrator.run_load_levels(cell)
            if self._orchestrator.cancelled:
                return  # this cell stays incomplete: a resume runs it again
            self._completed.append(cell.key)
            self._save(result)
            self._orchestrator.emit(CellDone(p, n, index, total))

    def _revive(self, cell: Cell) -> None:
        """Start afresh a worker lost in an earlier cell (crash, hang), so one bad cell does not
        cost an engine the rest of the sweep. Engines that never loaded are not retried, and each
        engine is restarted at most MAX_RESTARTS times (a crash on every cell stays visible)."""
        for name in self.config.backends:
            lost = self._orchestrator.lost(name)
            if self._orchestrator.cancelled or lost is None:
                continue
            if self._restarts.get(name, 0) >= MAX_RESTARTS:
                if name not in self._given_up:  # said once: its empty cells are not a silent gap
                    self._given_up.add(name)
                    why = f"worker {lost.reason} again after {MAX_RESTARTS} restarts"
                    self._orchestrator.emit(SweepNote(f"{name}: {why}; not run in the cells left"))
                continue
            self._restarts[name] = self._restarts.get(name, 0) + 1
            self._orchestrator.emit(SweepNote(f"{name}: worker {lost.reason} in an earlier cell; starting it again"))
            self._orchestrator.start(name, cell)  # warmed up with the others, in _warm_up

    def _warm_up(self, cell: Cell) -> None:
        """Each engine's warm-up runs on this cell's shapes, one engine at a time, before any measured
        repeat of the cell (records flagged is_warmup, as in a bench)."""
        for name in self.config.backends:
            if self._orchestrator.cancelled:
                return
            if self._orchestrator.usable(name):
                self._orchestrator.warm_up(name, cell)

    def _peaks(self) -> ComputePeaks | None:
        """The arithmetic peaks of prefill's roofline, cached like the bandwidth (None: no C compiler)."""
        if cached_compute_peaks(self.threads) is None:
            self._orchestrator.emit(
                SweepNote("measuring the CPU's arithmetic peaks (once per machine and thread count)")
            )
        try:
            return probe_compute_peaks(self.threads)
        except Exception as exc:  # no roofline is better than no sweep
            self._orchestrator.emit(SweepNote(f"no prefill roofline: {exc}"))
            return None

    def _probe_gpu(self) -> None:
        """The GPU's bandwidth and GEMM peaks, between the load and the first cell (no timed span)."""
        self._orchestrator.emit(SweepNote("measuring the GPU's bandwidth and GEMM peaks (its engines' roofline)"))
        try:
            self.gpu_bandwidth, self.gpu_peaks = measure_gpu_bandwidth(), measure_gpu_peaks()
        except Exception as exc:  # no GPU roofline is better than no sweep
            self._orchestrator.emit(SweepNote(f"no GPU roofline: {exc}"))

    # --- records -----------------------------------------------------------------------------
    def environment(self, result: BenchResult) -> dict:
        plan = self.plan
        grid = {"prompt_tokens": sorted(set(self.grid.prompt_tokens)), "new_tokens": sorted(set(self.grid.new_tokens))}
        sweep = {
            "fingerprint": plan.fingerprint,
            **grid,
            "completed": [list(k) for k in sorted(set(self._completed))],
            "pending": [list(c.key) for c in plan.cells if c.key not in set(self._completed)],
            "skipped": [asdict(s) for s in plan.skipped],
        }
        return {
            **self._base_environment,
            "threads_resolved": self.threads,
            "threads_resolution": self._orchestrator.threads_resolution,
            "reference": self.reference,
            SWEEP_KEY: sweep,
            "engines": self._engines,
            "bandwidth": self.bandwidth.as_dict() if self.bandwidth else plan.previous_bandwidth,
            "compute_peaks": self.compute_peaks.as_dict() if self.compute_peaks else plan.previous_compute_peaks,
            **({"gpu_bandwidth": self.gpu_bandwidth.as_dict()} if self.gpu_bandwidth else {}),
            **({"gpu_compute_peaks": self.gpu_peaks.as_dict()} if self.gpu_peaks else {}),
            ENVIRONMENT_KEY: self._curves(plan),
            "machine_state": machine_state_section(result.runs),
            "cancelled": self._orchestrator.cancelled,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }

    def _curves(self, plan: SweepPlan | None) -> list[dict]:
        """Prefill's roofline over the prompt lengths of the grid and of the finished cells (or the one an
        earlier run of the sweep kept)."""
        if plan is None:
            return []
        gb_s = self.bandwidth.gb_s if self.bandwidth else (plan.previous_bandwidth or {}).get("gb_s")
        curves = prefill_curves(
            plan.model.gpt2_config,
            self._engines,
            self.compute_peaks,
            gb_s,
            # every prompt length the folder holds: a resume may add lengths to an earlier run's
            [*self.grid.prompt_tokens, *(p for p, _ in self._completed)],
            self.gpu_peaks,
            self.gpu_bandwidth.gb_s if self.gpu_bandwidth else None,
        )
        return curves or list(plan.previous_curves)

    def _save(self, result: BenchResult) -> None:
        # Runs are added on this thread only (a sweep is never a race), so the records hold still here.
        fill_agreement(result.runs, result.tokens, self.reference)
        result.environment = self.environment(result)
        if self.out_dir is not None:
            # environment.json is written last: its list of completed cells is what a resume trusts.
            write_results(
                self.out_dir,
                list(result.runs),
                list(result.tokens),
                result.environment,
                summary=False,
                load=list(result.load),
                slo=self.config.slo,
            )
