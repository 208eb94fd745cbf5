"""Sweeps: every engine over a grid of (prompt tokens, new tokens), resumable.

Workers load once for the whole sweep and warm up once; inside each cell the repeats are
interleaved as in `BenchSession` (A B C, C B A, ...). After each cell the records are written
atomically with the list of completed cells, so running the same command again after a cancel
or a crash continues where it stopped; other settings in the folder are refused (or `restart`).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..results.bandwidth import Bandwidth, cached_bandwidth, probe_bandwidth
from ..results.environment import collect_environment, cpu_model
from ..errors import UsageError
from ..results.export import ENVIRONMENT_JSON, RUNS_CSV, write_results
from ..sources.model_files import ModelFiles, resolve_model
from ..sources.prompts import prompt_of_length
from ..results.records import RunRecord, TokenRecord
from ..registry import EngineSpec
from .bench import BenchConfig, BenchResult, BenchSession, Cell, EventSink, SessionStarted, _fill_agreement
from ..sources.tokenizer import encode

DEFAULT_PROMPT_TOKENS = (16, 64, 256, 512)
DEFAULT_NEW_TOKENS = (16, 64, 256)
SWEEP_KEY = "sweep"


@dataclass(frozen=True)
class SweepGrid:
    prompt_tokens: tuple[int, ...] = DEFAULT_PROMPT_TOKENS
    new_tokens: tuple[int, ...] = DEFAULT_NEW_TOKENS

    def validate(self) -> "SweepGrid":
        for label, values in (("--prompt-tokens", self.prompt_tokens), ("--new-tokens", self.new_tokens)):
            if not values:
                raise UsageError(f"{label} needs at least one length")
            if min(values) < 1:
                raise UsageError(f"{label} lengths must be >= 1, got {min(values)}")
        return self

    def keys(self) -> list[tuple[int, int]]:
        return [(p, n) for p in sorted(set(self.prompt_tokens)) for n in sorted(set(self.new_tokens))]


@dataclass(frozen=True)
class SkippedCell:
    prompt_tokens: int
    new_tokens: int
    reason: str


@dataclass
class SweepPlan:
    model: ModelFiles
    fingerprint: dict
    cells: list[Cell]  # still to run, in order
    completed: list[tuple[int, int]]  # finished earlier (resumed)
    skipped: list[SkippedCell]
    previous_runs: list[RunRecord] = field(default_factory=list)
    previous_tokens: list[TokenRecord] = field(default_factory=list)
    previous_engines: dict = field(default_factory=dict)
    previous_bandwidth: dict | None = None


# Events (besides the BenchSession ones) for a progress display.
@dataclass(frozen=True)
class CellStarted:
    prompt_tokens: int
    new_tokens: int
    index: int  # 1-based among the cells of this session
    total: int


@dataclass(frozen=True)
class CellDone:
    prompt_tokens: int
    new_tokens: int
    index: int
    total: int


@dataclass(frozen=True)
class SweepNote:
    message: str


def cell_tag(prompt_tokens: int, new_tokens: int) -> str:
    return f"p{prompt_tokens}n{new_tokens}"


def sweep_fingerprint(config: BenchConfig, model: ModelFiles, threads: int, reference: str) -> dict:
    """What must not change between a sweep and its resumption (JSON-normalised)."""
    settings = config.as_dict()
    prompt = None if config.prompt is None else hashlib.sha256(config.prompt.encode()).hexdigest()[:16]
    data = {"model": model.model_id, "weights_sha256_16": model.weights_hash, "backends": list(config.backends),
            "repeats": config.repeats, "sampling": settings["sampling"], "threads": threads,
            "prompt_sha256_16": prompt, "engine_options": settings["engine_options"], "reference": reference,
            "cpu": cpu_model()}
    return json.loads(json.dumps(data))


def fingerprint_differences(old: dict, new: dict) -> list[str]:
    return [f"{key}: {old.get(key)!r} then, {new.get(key)!r} now" for key in sorted(set(old) | set(new))
            if old.get(key) != new.get(key)]


MAX_RESTARTS = 2  # per engine and sweep


class SweepSession(BenchSession):
    """`prepare()` then `run()`; `cancel()` from any thread. With `out_dir`, writes after each cell."""

    def __init__(self, config: BenchConfig, grid: SweepGrid, out_dir: Path | None = None, restart: bool = False,
                 on_event: EventSink | None = None, specs: dict[str, EngineSpec] | None = None,
                 measure_bandwidth: bool = True) -> None:
        if config.mode != "fair":
            raise UsageError("a sweep runs in fair mode only")
        super().__init__(config, on_event, specs)
        self.grid = grid.validate()
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.restart = restart
        self.measure_bandwidth = measure_bandwidth
        self.plan: SweepPlan | None = None
        self.bandwidth: Bandwidth | None = None
        self._completed: list[tuple[int, int]] = []
        self._engines: dict[str, dict] = {}
        self._base_environment: dict = {}
        self._restarts: dict[str, int] = {}

    # --- planning ----------------------------------------------------------------------------
    def prepare(self, progress=None, cancel=None) -> SweepPlan:  # type: ignore[override]
        self._check_available()
        model = resolve_model(self.config.model, progress, cancel)
        fingerprint = sweep_fingerprint(self.config, model, self.threads, self.reference)
        completed, runs, tokens, engines, bandwidth = self._previous(fingerprint)
        cells, skipped = [], []
        for p, n in self.grid.keys():
            if p + n > model.context:
                skipped.append(SkippedCell(p, n, f"{p} + {n} tokens exceed the context of {model.context}"))
            elif (p, n) not in completed:
                cells.append(Cell(tuple(self._prompt(p)), n, cell_tag(p, n)))
        self.plan = SweepPlan(model, fingerprint, cells, sorted(completed), skipped, runs, tokens, engines, bandwidth)
        return self.plan

    def _prompt(self, n_tokens: int) -> list[int]:
        if self.config.prompt is None:
            return prompt_of_length(n_tokens)
        source = encode(self.config.prompt)  # the user's text, repeated to the cell's length
        return (source * -(-n_tokens // len(source)))[:n_tokens]

    def _previous(self, fingerprint: dict):
        """Completed cells and their records from an earlier run of the same sweep in out_dir."""
        empty: tuple = (set(), [], [], {}, None)
        if self.out_dir is None or self.restart:
            return empty
        env_path, runs_path = self.out_dir / ENVIRONMENT_JSON, self.out_dir / RUNS_CSV
        if not env_path.exists() and not runs_path.exists():
            return empty
        advice = f"use --restart to discard what is in {self.out_dir}, or choose another --out"
        try:
            environment = json.loads(env_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UsageError(f"{env_path} cannot be read ({exc}); {advice}") from exc
        sweep = environment.get(SWEEP_KEY) if isinstance(environment, dict) else None
        if not isinstance(sweep, dict) or "fingerprint" not in sweep:
            raise UsageError(f"{self.out_dir} holds results that are not from a sweep; {advice}")
        differences = fingerprint_differences(sweep["fingerprint"], fingerprint)
        if differences:
            raise UsageError(f"{self.out_dir} holds a sweep with other settings ({'; '.join(differences[:3])}); "
                             f"run the same command to resume it, or {advice}")
        from ..results.reader import load_results

        completed = {(int(p), int(n)) for p, n in sweep.get("completed", [])}
        runs, tokens, _ = load_results(self.out_dir) if runs_path.exists() else ([], [], {})
        # Rows of a cell that was cut short are dropped: that cell runs again from the start.
        runs = [r for r in runs if (r.prompt_tokens, r.new_tokens) in completed]
        kept = {r.run_id for r in runs}
        return (completed, runs, [t for t in tokens if t.run_id in kept], dict(environment.get("engines") or {}),
                environment.get("bandwidth"))

    # --- running -----------------------------------------------------------------------------
    def run(self, plan: SweepPlan | None = None) -> BenchResult:  # type: ignore[override]
        plan = plan or self.plan or self.prepare()
        self.plan = plan
        self._completed = list(plan.completed)
        self._engines = dict(plan.previous_engines)
        first = plan.cells[0] if plan.cells else None
        result = BenchResult(self.config, plan.model, list(first.prompt_ids) if first else [],
                             list(plan.previous_runs), list(plan.previous_tokens))
        self._emit(SessionStarted(plan.model, result.prompt_ids, self.config))
        if self.measure_bandwidth and plan.cells and not self._cancelled.is_set():
            if cached_bandwidth(self.threads) is None:
                self._emit(SweepNote("measuring memory bandwidth (once per machine and thread count)"))
            self.bandwidth = probe_bandwidth(self.threads)
        self._base_environment = collect_environment(plan.model, self.config.as_dict())
        self._save(result)  # the plan (and any skipped cells) is on disk before the first run
        try:
            if plan.cells:
                self._run_cells(result, plan)
        finally:
            self._close_all()
        result.cancelled = self._cancelled.is_set()
        self._save(result)
        return result

    def _run_cells(self, result: BenchResult, plan: SweepPlan) -> None:
        first = plan.cells[0]
        for name in self.config.backends:  # load and warm up once for the whole sweep
            if self._cancelled.is_set():
                return
            if self._start(name, result, first):
                ready = self._workers[name].ready
                self._engines[name] = {"dtype": ready.dtype, "weight_bytes_per_token": ready.weight_bytes_per_token,
                                       "device": ready.device}
                self._warm_up(name, result, first)
        total = len(plan.cells)
        for index, cell in enumerate(plan.cells, start=1):
            p, n = cell.key
            if index > 1:
                self._revive(result, cell)
            self._emit(CellStarted(p, n, index, total))
            for repeat in range(1, self.config.repeats + 1):
                order = self.config.backends if repeat % 2 else tuple(reversed(self.config.backends))
                for name in order:
                    if self._cancelled.is_set():
                        return  # this cell stays incomplete: a resume runs it again
                    if self._usable(name):
                        self._one_run(name, repeat, False, result, cell)
            if self._cancelled.is_set():
                return
            self._completed.append(cell.key)
            self._save(result)
            self._emit(CellDone(p, n, index, total))

    def _revive(self, result: BenchResult, cell: Cell) -> None:
        """Start afresh a worker lost in an earlier cell (crash, hang), so one bad cell does not
        cost an engine the rest of the sweep. Engines that never loaded are not retried, and each
        engine is restarted at most MAX_RESTARTS times (a crash on every cell stays visible)."""
        for name in self.config.backends:
            worker = self._workers.get(name)
            if self._cancelled.is_set() or worker is None or worker.ready is None or worker.lost is None:
                continue
            if self._restarts.get(name, 0) >= MAX_RESTARTS:
                continue
            self._restarts[name] = self._restarts.get(name, 0) + 1
            self._emit(SweepNote(f"{name}: worker {worker.lost.reason} in an earlier cell; starting it again"))
            if self._start(name, result, cell):
                self._warm_up(name, result, cell)

    # --- records -----------------------------------------------------------------------------
    def environment(self, result: BenchResult) -> dict:
        plan = self.plan
        grid = {"prompt_tokens": sorted(set(self.grid.prompt_tokens)), "new_tokens": sorted(set(self.grid.new_tokens))}
        sweep = {"fingerprint": plan.fingerprint, **grid,
                 "completed": [list(k) for k in sorted(set(self._completed))],
                 "pending": [list(c.key) for c in plan.cells if c.key not in set(self._completed)],
                 "skipped": [asdict(s) for s in plan.skipped]}
        return {**self._base_environment, "threads_resolved": self.threads, "reference": self.reference,
                SWEEP_KEY: sweep, "engines": self._engines,
                "bandwidth": self.bandwidth.as_dict() if self.bandwidth else plan.previous_bandwidth,
                "cancelled": self._cancelled.is_set(), "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}

    def _save(self, result: BenchResult) -> None:
        with self._lock:
            _fill_agreement(result, self.reference)
            result.environment = self.environment(result)
            runs, tokens = list(result.runs), list(result.tokens)
        if self.out_dir is not None:
            # environment.json is written last: its list of completed cells is what a resume trusts.
            write_results(self.out_dir, runs, tokens, result.environment, summary=False)
