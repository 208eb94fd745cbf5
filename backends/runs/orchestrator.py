"""The workers of one session, the order they run in, and the records they produce.

Every session (bench, sweep, quality) holds one `Orchestrator`. It owns the fair order:
engines load one at a time, each followed by its warm-up runs; then the measured repeats are
interleaved A B C, C B A, ... so slow drift (heat, caches, other load) falls on every engine
alike. `cancel()` may be called from any thread; everything else runs on the session's thread
(race mode adds one thread per engine).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

import psutil

from ..engine import EngineOptions
from ..machine.energy import EnergyMeter, NvmlMeter, RaplMeter
from ..machine.telemetry import MachineProbe
from ..machine.threads import resolve_threads
from ..results.load import LoadRequestRecord, load_levels, request_records
from ..results.records import RunRecord, TokenRecord
from ..results.sequential import SequentialRule
from ..results.summary import is_measured
from ..storage import page_cache
from ..worker.events import (
    BackendEvent,
    Failed,
    LoadRequest,
    LogitsRequest,
    Ready,
    RunContext,
    RunRequest,
    ScoreRequest,
    TopLogits,
    WorkerLost,
)
from ..worker.outcomes import RunOutcome, ScoreOutcome
from ..worker.process import Worker, WorkerError
from ..worker.usage import process_cpu_s
from .adaptive import run_until_sure
from .arrivals import RateMode, arrival_offsets_ms, rate_label, sweep_rates
from .config import BenchConfig, Cell
from .events import EventSink, LoadRecorded, RunRecorded
from .preparation import engine_specs
from .recording import RecordContext, cold_start_s, load_failure_record, note_machine, run_records
from .result import BenchResult

SETTLE_MAX_S = 2.0  # at most this long waiting for idle workers to go quiet before a run
SETTLE_POLL_S = 0.02
# Quiet: the idle workers together used at most SETTLE_QUIET_PCT of one core over the last
# SETTLE_WINDOW_S (a sliding window of polls). One 20 ms poll is too short: anything with a duty
# cycle (a pool that wakes every few tens of ms) can sit a poll out. 100 ms holds a few periods of
# such a cycle, and 2% of it (2 ms) is far above the noise of Linux's ns CPU clock
# (usage.process_cpu_s); where CPU time comes in 10 ms ticks, it means no tick in the window.
SETTLE_WINDOW_S = 0.1
SETTLE_QUIET_PCT = 2.0


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of these processes and their descendants (live and reaped)."""
    total = 0.0
    for pid in pids:
        try:
            process = psutil.Process(pid)
            total += process_cpu_s(process)
            for child in process.children(recursive=True):
                try:
                    total += process_cpu_s(child)
                except psutil.Error:
                    continue
        except psutil.Error:
            continue
    return total


def fair_order(backends: tuple[str, ...], repeat: int) -> tuple[str, ...]:
    """Round `repeat`'s order: the engines rotated by one a round (A B C, B C A, C A B, ...), so a slow
    minute of the machine falls on every position alike, and no engine runs twice in a row: a run
    right after its own finds its weights still in the caches (a reversed order, A B C then C B A,
    gave the engines at its ends that in every other round). Two engines keep one order (A B, A B):
    rotated, B would follow itself."""
    if len(backends) <= 2:
        return backends
    shift = (repeat - 1) % len(backends)
    return backends[shift:] + backends[:shift]


class Orchestrator:
    """Starts, runs and closes the workers of one session; `session(result)` binds where records go."""

    def __init__(self, config: BenchConfig, on_event: EventSink | None = None) -> None:
        self.config = config
        self.emit: EventSink = on_event or (lambda event: None)
        self.specs = engine_specs(config)
        resolution = resolve_threads()
        self.threads = config.threads or resolution.threads
        # environment.json: how the thread count was chosen (the user's, or the usable physical cores)
        self.threads_resolution = (
            {"source": "--threads", "threads": config.threads}
            if config.threads
            else {"source": "usable physical cores", **resolution.as_dict()}
        )
        self._cancelled = threading.Event()
        self._workers: dict[str, Worker] = {}
        self._lock = threading.Lock()  # workers and records: race mode adds from several threads
        self._result: BenchResult | None = None
        self._records: RecordContext | None = None
        self._page_state: dict[str, page_cache.StartState] = {}  # per engine: the page cache its worker started with
        self._machine = MachineProbe()
        self.adaptive: dict = {}  # environment.json's adaptive_repeats, after --repeats auto
        self.adaptive_lines: list[str] = []  # the same, as the lines bench prints
        self._meters: dict[str, RaplMeter | NvmlMeter] = {}

    @contextmanager
    def session(self, result: BenchResult) -> Iterator[None]:
        """Records go into `result` inside the block; every worker is closed on the way out."""
        self._result = result
        self._records = RecordContext(self.config, result.model, self.threads)
        try:
            yield
        finally:
            self.close_all()

    @property
    def _context(self) -> RecordContext:
        """What every record of this session shares: bound by `session(result)`."""
        if self._records is None:
            raise RuntimeError("records are made inside Orchestrator.session(result)")
        return self._records

    # --- cancel ------------------------------------------------------------------------------
    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """Stop after the current token of every running engine; no further runs start."""
        self._cancelled.set()
        with self._lock:
            workers = list(self._workers.values())
        for worker in workers:
            worker.cancel()

    # --- orders ------------------------------------------------------------------------------
    def run_bench(self, cell: Cell) -> None:
        """The whole bench of one cell, in the configured mode."""
        if self.config.mode == "race":
            self.run_race(cell)
        else:
            self.load(cell)
            self.run_repeats(cell)
            self.run_load_levels(cell)

    def load(self, cell: Cell, warm_up: bool = True) -> bool:
        """Start the engines one at a time (a load never competes with another), each warmed up on
        `cell`. False when a cancel stopped it before every engine had its turn."""
        for name in self.config.backends:
            if self.cancelled:
                return False
            if self.start(name, cell) and warm_up:
                self.warm_up(name, cell)
        return True

    def run_repeats(self, cell: Cell) -> None:
        """The measured repeats of `cell`, interleaved in the fair order (--repeats auto: until sure)."""
        if self.config.repeats_auto:
            self.run_until_sure(cell)
            return
        for repeat in range(1, self.config.repeats + 1):
            if not self.run_round(cell, repeat):
                return

    def run_round(self, cell: Cell, repeat: int) -> bool:
        """One round of the fair order; False when a cancel stopped it."""
        for name in fair_order(self.config.backends, repeat):
            if self.cancelled:
                return False
            if self.usable(name):
                self.run_once(name, repeat, False, cell)
        return not self.cancelled

    def run_until_sure(self, cell: Cell) -> None:
        """--repeats auto: rounds until every engine's median ms/token interval is narrow enough (runs/adaptive.py)."""
        rule = SequentialRule(self.config.target_width_pct, self.config.repeats)

        def values() -> dict[str, list[float]]:
            with self._lock:
                runs = [r for r in self._result.runs if is_measured(r) and r.prompt_tokens == len(cell.prompt_ids)]
            return {
                name: [r.ms_per_token for r in runs if r.backend == name and r.ms_per_token is not None]
                for name in self.config.backends
                if self.usable(name)
            }

        outcome = run_until_sure(rule, self.config.max_minutes, lambda repeat: self.run_round(cell, repeat), values)
        self.adaptive = outcome.as_dict()
        self.adaptive_lines = outcome.lines()

    def run_load_levels(self, cell: Cell) -> None:
        """The load levels above 1 (`config.concurrency`) of every engine that serves concurrently,
        after the cell's bench runs (which are every engine's level 1): per level, each engine's
        warm-up rounds, then the measured rounds interleaved in the fair order."""
        servers = tuple(n for n in self.config.backends if self.usable(n) and self.ready(n).serves_concurrently)
        for level in sorted(c for c in set(self.config.concurrency) if c > 1):
            for name in servers:
                for index in range(1, self.config.warmup + 1):
                    if self.cancelled or not self.usable(name):
                        break
                    self.run_load(name, level, index, True, cell)
            for repeat in range(1, self.config.repeats + 1):
                for name in fair_order(servers, repeat):
                    if self.cancelled:
                        return
                    if self.usable(name):
                        self.run_load(name, level, repeat, False, cell)
        if self.config.rate.set:
            for name in servers:
                self.run_rate_levels(name, cell)

    def run_rate_levels(self, name: str, cell: Cell) -> None:
        """The open-loop levels of one server engine (`--request-rate`), in rising order: one round of
        `--rate-requests` requests per rate, after one warm-up request (with --warmup). A sweep's rates
        are multiples of the engine's batch-1 rate (1 / its level-1 median end-to-end time), up to
        the first one it does not keep up with."""
        spec = self.config.rate
        if spec.mode == RateMode.SWEEP:
            rates = sweep_rates(self._batch1_e2e_s(name, cell))
        else:
            rates = spec.rates
        if self.config.warmup and not self.cancelled and self.usable(name):
            self.run_load(name, 0, 1, True, cell, rate=rates[0], arrivals_ms=(0.0,))
        for rate in rates:
            if self.cancelled or not self.usable(name):
                return
            arrivals = arrival_offsets_ms(rate, spec.requests, spec.burstiness, self.config.sampling.seed)
            records = self.run_load(name, 0, 1, False, cell, rate=rate, arrivals_ms=arrivals)
            levels = load_levels(records)
            if spec.mode == RateMode.SWEEP and any(lv.saturated for lv in levels):
                return

    def _batch1_e2e_s(self, name: str, cell: Cell) -> float:
        """The engine's median end-to-end time of its measured runs of `cell` (nan without one)."""
        assert self._result is not None
        times = sorted(
            r.e2e_s
            for r in self._result.runs
            if r.backend == name
            and not r.is_warmup
            and r.e2e_s is not None
            and (r.prompt_tokens, r.new_tokens) == cell.key
        )
        return times[len(times) // 2] if times else float("nan")

    def run_load(
        self,
        name: str,
        concurrency: int,
        repeat: int,
        is_warmup: bool,
        cell: Cell,
        rate: float | None = None,
        arrivals_ms: tuple[float, ...] = (),
    ) -> list[LoadRequestRecord]:
        """One round: `concurrency` requests at once, or (an open-loop level) one request per arrival
        of `arrivals_ms` at offered `rate`; a record per request."""
        worker = self._workers[name]
        tag = f"{cell.tag}/" if cell.tag else ""
        level = f"c{concurrency}" if rate is None else f"rate{rate_label(rate)}"
        run_id = f"{name}/{tag}{level}/{'w' if is_warmup else 'r'}{repeat}"
        request = LoadRequest(
            run_id, cell.prompt_ids, cell.new_tokens, self.config.sampling, concurrency or len(arrivals_ms), arrivals_ms
        )
        self.emit(
            BackendEvent(name, request, RunContext(repeat, is_warmup, cell.tag, len(cell.prompt_ids), cell.new_tokens))
        )
        idle = self.idle_pids(name)
        if idle:
            self.settle(idle)
        outcome = worker.run_load(request)
        done = outcome.done
        records = request_records(
            run_id,
            name,
            cell.tag,
            len(cell.prompt_ids),
            cell.new_tokens,
            concurrency,
            repeat,
            is_warmup,
            done.started_ns if done else 0,
            done.streams if done else (),
            done.notes if done else "",
            "" if done else outcome.error,
            bool(done and done.cancelled),
            outcome.failure_status,
            rate,
            None if rate is None else self.config.rate.burstiness,
            len(arrivals_ms) if rate is not None else None,
        )
        self._add_load(records)
        return records

    def run_race(self, cell: Cell) -> None:
        """Every engine at once, for the spectacle; records are flagged concurrent."""

        def race(name: str) -> None:
            if not self.start(name, cell):
                return
            self.warm_up(name, cell)
            for repeat in range(1, self.config.repeats + 1):
                if self.cancelled or not self.usable(name):
                    return
                self.run_once(name, repeat, False, cell)

        threads = [
            threading.Thread(target=race, args=(n,), name=f"race:{n}", daemon=True) for n in self.config.backends
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def warm_up(self, name: str, cell: Cell) -> None:
        for index in range(1, self.config.warmup + 1):
            if self.cancelled or not self.usable(name):
                return
            self.run_once(name, index, True, cell)

    # --- one engine --------------------------------------------------------------------------
    def start(self, name: str, cell: Cell) -> bool:
        """Spawn (or spawn again) the engine's worker; a failed load is recorded against `cell`."""
        options = EngineOptions(threads=self.threads, settings=self.config.engine_options.get(name))
        idle = self.idle_pids(name)
        if idle:  # the cold start is timed too: not while the engine before still spins down its thread pools
            self.settle(idle)
        # Right before the spawn: with --cold evict the weights and this engine's artefacts, then
        # measure the share of the weights in the page cache (every record of this worker says it).
        self._page_state[name] = page_cache.engine_start_state(self.specs[name], self._result.model, self.config.cold)
        sink = lambda event: self.emit(BackendEvent(name, event))  # noqa: E731
        worker = Worker(self.specs[name], self._result.model, options, sink, self.config.timeouts)
        with self._lock:
            self._workers[name] = worker
        if self.cancelled:
            worker.cancel()
        try:
            worker.start()
            return True
        except WorkerError as exc:
            self._add(load_failure_record(self._context, name, worker.ready, cell, exc), [])
            return False

    def run_once(self, name: str, repeat: int, is_warmup: bool, cell: Cell) -> None:
        worker = self._workers[name]
        run_id = f"{name}/{cell.tag + '/' if cell.tag else ''}{'w' if is_warmup else 'r'}{repeat}"
        # measured fair runs are timed undisturbed (tokens batched); warm-ups and a race stream live
        live = is_warmup or self.config.mode == "race"
        request = RunRequest(run_id, cell.prompt_ids, cell.new_tokens, self.config.sampling, live=live)
        context = (
            RunContext(repeat, is_warmup, cell.tag, len(cell.prompt_ids), cell.new_tokens)
            if cell.tag
            else RunContext(repeat, is_warmup)
        )
        self.emit(BackendEvent(name, request, context))  # (the window draws everything before this run now)
        idle = self.idle_pids(name)
        if idle:
            self.settle(idle)
        meter = self._energy_meter(worker.ready)
        before = self._machine.snapshot(self._own_cpu_s())
        meter.start()
        idle_before, began = cpu_seconds(idle), time.monotonic()
        outcome = worker.run(request)
        wall_s, idle_cpu_s = time.monotonic() - began, cpu_seconds(idle) - idle_before
        energy = meter.stop()
        state = self._machine.state(before, self._machine.snapshot(self._own_cpu_s()))
        record, tokens = run_records(self._context, name, worker.ready, repeat, is_warmup, cell, outcome)
        note_machine(record, state, energy)
        if idle and wall_s > 0:
            record.idle_cpu_pct = 100.0 * max(0.0, idle_cpu_s) / wall_s
        if not worker.produced_tokens and outcome.tokens and worker.ready is not None:
            worker.produced_tokens = True  # this worker's first run: the one its cold start belongs to
            record.cold_start_s = cold_start_s(worker.ready, worker.spawn_ns, record.ttft_ms)
        self._add(record, tokens)

    def _own_cpu_s(self) -> float:
        """CPU seconds of this process and every worker (their descendants included): the run's own."""
        return cpu_seconds([os.getpid()])

    def _energy_meter(self, ready: Ready | None) -> EnergyMeter:
        """RAPL for a CPU engine, NVML for a CUDA one; each opened once a session."""
        cuda = ready is not None and str(ready.device).startswith("cuda")
        key = "nvml" if cuda else "rapl"
        if key not in self._meters:
            self._meters[key] = NvmlMeter() if cuda else RaplMeter()
        return EnergyMeter(self._meters[key])

    def run_profiled(self, name: str, cell: Cell, trace_path: str) -> RunOutcome:
        """One run under the engine's own profiler (the `profile` command). Never recorded: a
        profiled run's timings carry the profiler's overhead. Labelled a warm-up for displays,
        which stay still only while measured runs are timed."""
        worker = self._workers[name]
        request = RunRequest(
            f"{name}/profiled",
            cell.prompt_ids,
            cell.new_tokens,
            self.config.sampling,
            profile_trace=trace_path,
            live=False,
        )  # its harness as the measured runs' is
        self.emit(BackendEvent(name, request, RunContext(0, True, "profiled")))
        return worker.run(request)

    def close(self, name: str) -> None:
        """Close one engine's worker (an engine profiled alone leaves nothing running behind it)."""
        with self._lock:
            worker = self._workers.get(name)
        if worker is not None:
            worker.close()

    # --- idle workers ------------------------------------------------------------------------
    def idle_pids(self, name: str) -> list[int]:
        """The other live workers, idle while `name` runs (fair mode; in a race nobody is idle)."""
        if self.config.mode == "race":
            return []
        with self._lock:
            others = [w for n, w in self._workers.items() if n != name]
        return [w.pid for w in others if w.alive and w.pid is not None]

    def settle(self, pids: list[int]) -> float:
        """Wait (at most SETTLE_MAX_S) until the idle workers stop using CPU: thread pools keep
        spinning for a while after their last run (OpenBLAS's, OpenMP's and ONNX Runtime's
        spin-waits), which would fall on the next engine's timings. Returns the seconds waited."""
        began = time.monotonic()
        samples = deque([(began, cpu_seconds(pids))])  # (when, CPU seconds so far), oldest first
        while time.monotonic() - began < SETTLE_MAX_S and not self.cancelled:
            time.sleep(SETTLE_POLL_S)
            now = time.monotonic()
            samples.append((now, cpu_seconds(pids)))
            while now - samples[1][0] >= SETTLE_WINDOW_S:  # keep the newest sample a whole window back
                samples.popleft()
            (then, used_then), (_, used_now) = samples[0], samples[-1]
            if now - then >= SETTLE_WINDOW_S and used_now - used_then <= (now - then) * SETTLE_QUIET_PCT / 100:
                break
        return time.monotonic() - began

    def score(self, name: str, request: ScoreRequest) -> ScoreOutcome:
        return self._workers[name].score(request)

    def top_logits(self, name: str, request: LogitsRequest) -> TopLogits | Failed | WorkerLost:
        return self._workers[name].top_logits(request)

    # --- state -------------------------------------------------------------------------------
    def usable(self, name: str) -> bool:
        worker = self._workers.get(name)
        return worker is not None and worker.ready is not None and worker.lost is None

    def engine_facts(self) -> dict[str, dict]:
        """environment.json's `engines`: what each loaded engine said of itself (its bytes, device,
        arithmetic): what the floors and prefill rooflines are computed from."""
        out = {}
        for name in self.config.backends:
            ready = self.ready(name)
            if ready is not None:
                out[name] = {
                    "dtype": ready.dtype,
                    "weight_bytes_per_token": ready.weight_bytes_per_token,
                    "device": ready.device,
                    "precision": self.specs[name].precision,
                    "kv_bytes_per_position": ready.kv_bytes_per_position,
                    "prefill_arithmetic": ready.prefill_arithmetic,
                }
        return out

    def ready(self, name: str) -> Ready | None:
        worker = self._workers.get(name)
        return worker.ready if worker is not None else None

    def lost(self, name: str) -> WorkerLost | None:
        """Why a worker that had loaded is gone (crash, hang); None if it is up or never loaded."""
        worker = self._workers.get(name)
        return worker.lost if worker is not None and worker.ready is not None else None

    def close_all(self) -> None:
        with self._lock:
            workers = list(self._workers.values())
        for worker in workers:
            worker.close()

    def _add_load(self, records: list[LoadRequestRecord]) -> None:
        with self._lock:
            self._result.load.extend(records)
        self.emit(LoadRecorded(records))

    def _add(self, record: RunRecord, tokens: list[TokenRecord]) -> None:
        page_cache.annotate(record, self._page_state.get(record.backend))
        with self._lock:
            self._result.runs.append(record)
            self._result.tokens.extend(tokens)
        self.emit(RunRecorded(record, tokens))
