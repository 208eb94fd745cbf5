"""A benchmark session: resolve the model, run every engine fairly, and build the records.

The CLI calls `BenchSession.run()` directly; the GUI calls it from a thread and consumes the
same events through `on_event`, so every number on screen is one `bench` would write.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Literal

from .. import registry
from ..engine import EngineOptions
from ..results.environment import collect_environment
from ..errors import UsageError
from ..worker.events import BackendEvent, Failed, Ready, RunRequest, WorkerLost
from ..sources.model_files import ModelFiles, resolve_model
from ..sources.prompts import prompt_ids as build_prompt_ids
from ..results.records import RunRecord, TokenRecord, fill_metrics, token_records
from ..registry import EngineSpec
from ..sampling import SamplingParams
from ..results.stats import agreement
from ..worker.process import RunOutcome, Timeouts, Worker, WorkerError, default_threads

Mode = Literal["fair", "race"]


def _is_secret(key: str) -> bool:
    return any(word in key.lower() for word in ("key", "token", "secret", "password"))


@dataclass
class BenchConfig:
    model: str = "auto"
    backends: tuple[str, ...] = ("hf",)
    prompt: str | None = None  # explicit text; otherwise the bundled text cut to prompt_tokens
    prompt_tokens: int = 50
    new_tokens: int = 100
    sampling: SamplingParams = field(default_factory=SamplingParams)
    repeats: int = 3
    warmup: int = 1
    threads: int = 0  # 0: all cores
    mode: Mode = "fair"
    reference: str | None = None  # default: hf if selected, else the first backend
    timeouts: Timeouts = field(default_factory=Timeouts)
    engine_options: dict[str, dict] = field(default_factory=dict)  # per backend: extra settings

    def validate(self) -> "BenchConfig":
        """Checks that need no model. The context check follows once the model is known."""
        if not self.backends:
            raise UsageError("no backends selected")
        if len(set(self.backends)) != len(self.backends):
            raise UsageError("a backend is listed twice")
        if self.new_tokens < 1:
            raise UsageError(f"--new-tokens must be >= 1, got {self.new_tokens}")
        if self.prompt is None and self.prompt_tokens < 1:
            raise UsageError(f"--prompt-tokens must be >= 1, got {self.prompt_tokens}")
        if self.prompt is not None and not self.prompt.strip():
            raise UsageError("the prompt is empty")
        if self.repeats < 1:
            raise UsageError(f"--repeats must be >= 1, got {self.repeats}")
        if self.warmup < 0:
            raise UsageError(f"--warmup must be >= 0, got {self.warmup}")
        if self.threads < 0:
            raise UsageError(f"--threads must be >= 0, got {self.threads}")
        if self.mode not in ("fair", "race"):
            raise UsageError(f"--mode must be 'fair' or 'race', not {self.mode!r}")
        self.sampling.validate()
        return self

    def as_dict(self) -> dict:
        """Settings for environment.json; secrets (API keys) are never written."""
        data = asdict(self)
        data["backends"] = list(self.backends)
        data["engine_options"] = {name: {k: ("<redacted>" if _is_secret(k) else v) for k, v in opts.items()}
                                  for name, opts in self.engine_options.items()}
        return data


@dataclass(frozen=True)
class Cell:
    """One (prompt, new tokens) setting; a bench has one, a sweep many. `tag` goes into run ids."""

    prompt_ids: tuple[int, ...]
    new_tokens: int
    tag: str = ""

    @property
    def key(self) -> tuple[int, int]:
        return len(self.prompt_ids), self.new_tokens


@dataclass
class BenchResult:
    config: BenchConfig
    model: ModelFiles
    prompt_ids: list[int]
    runs: list[RunRecord] = field(default_factory=list)
    tokens: list[TokenRecord] = field(default_factory=list)
    environment: dict = field(default_factory=dict)
    cancelled: bool = False

    @property
    def failed(self) -> bool:
        return any(r.status not in ("ok", "cancelled") for r in self.runs)


@dataclass(frozen=True)
class SessionStarted:
    model: ModelFiles
    prompt_ids: list[int]
    config: BenchConfig


@dataclass(frozen=True)
class RunRecorded:
    record: RunRecord
    tokens: list[TokenRecord]


EventSink = Callable[[object], None]


class BenchSession:
    def __init__(self, config: BenchConfig, on_event: EventSink | None = None,
                 specs: dict[str, EngineSpec] | None = None) -> None:
        self.config = config.validate()
        self._emit = on_event or (lambda event: None)
        self._specs = {name: (specs or {}).get(name) or registry.get(name) for name in config.backends}
        self._cancelled = threading.Event()
        self._workers: dict[str, Worker] = {}
        self._lock = threading.Lock()
        self.threads = config.threads or default_threads()

    # --- public ------------------------------------------------------------------------------
    def prepare(self, progress=None, cancel=None) -> tuple[ModelFiles, list[int]]:
        """Resolve the model and the prompt; raise UsageError for anything that cannot run."""
        self._check_available()
        model = resolve_model(self.config.model, progress, cancel)
        ids = build_prompt_ids(self.config.prompt, self.config.prompt_tokens)
        if len(ids) + self.config.new_tokens > model.context:
            raise UsageError(
                f"prompt ({len(ids)} tokens) + new tokens ({self.config.new_tokens}) exceed the model's "
                f"context of {model.context} tokens"
            )
        return model, ids

    def _check_available(self) -> None:
        for name, spec in self._specs.items():
            if spec.target.startswith("backends."):
                ok, why = registry.available(name)
                if not ok:
                    raise UsageError(f"backend {name!r} is unavailable: {why}")

    def run(self, model: ModelFiles | None = None, prompt_ids: list[int] | None = None) -> BenchResult:
        if model is None or prompt_ids is None:
            model, prompt_ids = self.prepare()
        result = BenchResult(self.config, model, list(prompt_ids))
        self._emit(SessionStarted(model, list(prompt_ids), self.config))
        try:
            if self.config.mode == "race":
                self._run_race(result)
            else:
                self._run_fair(result)
            self._after_runs(result)
        finally:
            self._close_all()
        result.cancelled = self._cancelled.is_set()
        _fill_agreement(result, self.reference)
        result.environment = collect_environment(model, self.config.as_dict(), {
            "prompt_tokens": len(prompt_ids), "threads_resolved": self.threads, "reference": self.reference,
            "cancelled": result.cancelled, "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        })
        return result

    def cancel(self) -> None:
        """Stop after the current token of every running engine; no further runs start."""
        self._cancelled.set()
        with self._lock:
            workers = list(self._workers.values())
        for worker in workers:
            worker.cancel()

    @property
    def reference(self) -> str:
        if self.config.reference:
            return self.config.reference
        return "hf" if "hf" in self.config.backends else self.config.backends[0]

    # --- hooks for subclasses (sweep, quality) ------------------------------------------------
    def _after_runs(self, result: BenchResult) -> None:
        """Called after the runs, while the workers are still up (quality asks them for more)."""

    # --- ordering ----------------------------------------------------------------------------
    def _run_fair(self, result: BenchResult) -> None:
        """Load one engine at a time and warm it up; then interleave repeats A B C, C B A, ..."""
        for name in self.config.backends:
            if self._cancelled.is_set():
                return
            if self._start(name, result):
                self._warm_up(name, result)
        for repeat in range(1, self.config.repeats + 1):
            order = self.config.backends if repeat % 2 else tuple(reversed(self.config.backends))
            for name in order:
                if self._cancelled.is_set():
                    return
                if self._usable(name):
                    self._one_run(name, repeat, False, result)

    def _run_race(self, result: BenchResult) -> None:
        """Every engine at once, for the spectacle; records are flagged concurrent."""
        def race(name: str) -> None:
            if not self._start(name, result):
                return
            self._warm_up(name, result)
            for repeat in range(1, self.config.repeats + 1):
                if self._cancelled.is_set() or not self._usable(name):
                    return
                self._one_run(name, repeat, False, result)

        threads = [threading.Thread(target=race, args=(n,), name=f"race:{n}", daemon=True) for n in self.config.backends]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _warm_up(self, name: str, result: BenchResult, cell: Cell | None = None) -> None:
        for index in range(1, self.config.warmup + 1):
            if self._cancelled.is_set() or not self._usable(name):
                return
            self._one_run(name, index, True, result, cell)

    def _usable(self, name: str) -> bool:
        worker = self._workers.get(name)
        return worker is not None and worker.ready is not None and worker.lost is None

    # --- one engine --------------------------------------------------------------------------
    def _start(self, name: str, result: BenchResult, cell: Cell | None = None) -> bool:
        spec = self._specs[name]
        options = EngineOptions(threads=self.threads, extra=dict(self.config.engine_options.get(name, {})))
        sink = lambda event: self._emit(BackendEvent(name, event))  # noqa: E731
        worker = Worker(spec, result.model, options, sink, self.config.timeouts)
        with self._lock:
            self._workers[name] = worker
        if self._cancelled.is_set():
            worker.cancel()
        try:
            worker.start()
            return True
        except WorkerError as exc:
            record = self._base_record(name, worker, 0, False, result, cell)
            record.status = exc.event.reason if isinstance(exc.event, WorkerLost) else "error"
            record.error = f"load failed: {exc}"
            self._add(result, record, [])
            return False

    def _one_run(self, name: str, repeat: int, is_warmup: bool, result: BenchResult, cell: Cell | None = None) -> None:
        worker = self._workers[name]
        cell = cell or self._default_cell(result)
        run_id = f"{name}/{cell.tag + '/' if cell.tag else ''}{'w' if is_warmup else 'r'}{repeat}"
        request = RunRequest(run_id, cell.prompt_ids, cell.new_tokens, self.config.sampling)
        extra = {"repeat": repeat, "is_warmup": is_warmup}
        if cell.tag:
            extra.update(cell=cell.tag, prompt_tokens=len(cell.prompt_ids), new_tokens=cell.new_tokens)
        self._emit(BackendEvent(name, request, extra))
        outcome = worker.run(request)
        self._add(result, *self._records(name, worker, repeat, is_warmup, outcome, result, cell))

    def _default_cell(self, result: BenchResult) -> Cell:
        return Cell(tuple(result.prompt_ids), self.config.new_tokens)

    def _records(self, name: str, worker: Worker, repeat: int, is_warmup: bool, outcome: RunOutcome,
                 result: BenchResult, cell: Cell | None = None) -> tuple[RunRecord, list[TokenRecord]]:
        record = self._base_record(name, worker, repeat, is_warmup, result, cell)
        record.run_id = outcome.request.run_id
        record.status = outcome.status
        if isinstance(outcome.failure, Failed):
            record.error = outcome.failure.message
        elif isinstance(outcome.failure, WorkerLost):
            record.error = f"worker {outcome.failure.reason}: {outcome.failure.detail}"
        if outcome.done is not None:
            record.peak_rss_mb = outcome.done.peak_rss_mb
            if outcome.done.notes:
                record.notes = "; ".join(n for n in (record.notes, outcome.done.notes) if n)
        tokens = token_records(record.run_id, name, repeat, is_warmup, outcome.started_ns, outcome.tokens)
        if outcome.tokens:
            fill_metrics(record, outcome.started_ns, outcome.tokens, worker.ready.weight_bytes_per_token)
        if not worker.produced_tokens and outcome.tokens and worker.ready is not None:
            worker.produced_tokens = True  # this worker's first run: the one cold start belongs to
            record.cold_start_s = (worker.ready.t_ns - worker.spawn_ns) / 1e9 + (record.ttft_ms or 0) / 1e3
        return record, tokens

    def _base_record(self, name: str, worker: Worker, repeat: int, is_warmup: bool, result: BenchResult,
                     cell: Cell | None = None) -> RunRecord:
        cell = cell or self._default_cell(result)
        ready: Ready | None = worker.ready
        s = self.config.sampling
        return RunRecord(
            run_id=f"{name}/load", backend=name, model=result.model.model_id, weights=result.model.weights,
            device=ready.device if ready else "", dtype=ready.dtype if ready else "", threads=self.threads,
            prompt_tokens=len(cell.prompt_ids), new_tokens=cell.new_tokens,
            decoding="greedy" if s.is_greedy else "sample", temperature=s.temperature, top_k=s.top_k,
            top_p=s.top_p, seed=s.seed, repeat=repeat, is_warmup=is_warmup,
            import_s=ready.import_s if ready else None, load_s=ready.load_s if ready else None,
            ttft_ms=None, tpot_ms=None, itl_p50_ms=None, itl_p90_ms=None, itl_p99_ms=None,
            decode_tok_s=None, e2e_s=None, peak_rss_mb=None, status="error",
            concurrent=self.config.mode == "race", notes=ready.notes if ready else "",
        )

    def _add(self, result: BenchResult, record: RunRecord, tokens: list[TokenRecord]) -> None:
        with self._lock:
            result.runs.append(record)
            result.tokens.extend(tokens)
        self._emit(RunRecorded(record, tokens))

    def _close_all(self) -> None:
        with self._lock:
            workers = list(self._workers.values())
        for worker in workers:
            worker.close()


def _fill_agreement(result: BenchResult, reference: str) -> None:
    """Compare each run's tokens with the reference engine's first complete run of the same cell
    (a bench has one cell; a sweep compares like with like)."""
    by_run: dict[str, list[int]] = {}
    for token in result.tokens:
        by_run.setdefault(token.run_id, []).append(token.token_id)
    cells: dict[tuple[int, int], list[RunRecord]] = {}
    for record in result.runs:
        cells.setdefault((record.prompt_tokens, record.new_tokens), []).append(record)
    for records in cells.values():
        ref_runs = [r for r in records if r.backend == reference and r.status == "ok"]
        ref_runs.sort(key=lambda r: (r.is_warmup, r.repeat))  # measured runs first
        if not ref_runs:
            continue
        ref_tokens = by_run.get(ref_runs[0].run_id, [])
        for record in records:
            if record.run_id in by_run:
                record.reference = reference
                record.agree_tokens, record.first_divergence = agreement(ref_tokens, by_run[record.run_id])
