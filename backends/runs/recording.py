"""Turn what a worker answered into the rows of runs.csv and tokens.csv."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..machine.energy import Energy
from ..machine.telemetry import MachineState
from ..results.records import RunRecord, TokenRecord, fill_metrics, token_records
from ..sources.model_files import ModelFiles
from ..speculation import SpeculationStats
from ..status import RunStatus
from ..worker.events import Ready
from ..worker.outcomes import RunOutcome, outcome_status
from ..worker.process import WorkerError
from .config import BenchConfig, Cell


@dataclass(frozen=True)
class RecordContext:
    """What every record of one session shares."""

    config: BenchConfig
    model: ModelFiles
    threads: int


def base_record(
    ctx: RecordContext, name: str, ready: Ready | None, repeat: int, is_warmup: bool, cell: Cell
) -> RunRecord:
    """A row with the settings filled in and no measurement yet (status ERROR until told otherwise)."""
    s = ctx.config.sampling
    return RunRecord(
        run_id=f"{name}/load",
        backend=name,
        model=ctx.model.model_id,
        weights=ctx.model.weights,
        device=ready.device if ready else "",
        dtype=ready.dtype if ready else "",
        isa=ready.isa if ready else "",
        threads=ctx.threads,
        prompt_tokens=len(cell.prompt_ids),
        new_tokens=cell.new_tokens,
        decoding="greedy" if s.is_greedy else "sample",
        temperature=s.temperature,
        top_k=s.top_k,
        top_p=s.top_p,
        seed=s.seed,
        repeat=repeat,
        is_warmup=is_warmup,
        import_s=ready.import_s if ready else None,
        load_s=ready.load_s if ready else None,
        ttft_ms=None,
        tpot_ms=None,
        itl_p50_ms=None,
        itl_p90_ms=None,
        itl_p99_ms=None,
        decode_tok_s=None,
        e2e_s=None,
        peak_rss_mb=None,
        status=RunStatus.ERROR,
        concurrent=ctx.config.mode == "race",
        notes=ready.notes if ready else "",
        load_peak_rss_mb=ready.load_peak_rss_mb if ready else None,
        build_s=ready.build_s if ready else None,
        artifact_cache=ready.artifact_cache if ready else "",
        native_sampling=ready.samples_natively if ready else False,
        multi_token_steps=ready.multi_token_steps if ready else False,
    )


def load_failure_record(ctx: RecordContext, name: str, ready: Ready | None, cell: Cell, exc: WorkerError) -> RunRecord:
    """The one row of an engine that did not load (repeat 0)."""
    record = base_record(ctx, name, ready, 0, False, cell)
    record.status = outcome_status(None, exc.event)
    if record.status is RunStatus.CANCELLED:  # Cancel is never an error: the row only says when it came
        record.notes = "; ".join(n for n in (record.notes, "cancelled while loading") if n)
    else:
        record.error = f"load failed: {exc}"
    return record


def run_records(
    ctx: RecordContext, name: str, ready: Ready | None, repeat: int, is_warmup: bool, cell: Cell, outcome: RunOutcome
) -> tuple[RunRecord, list[TokenRecord]]:
    """The run's row and its tokens' rows; the cold start is the caller's (it knows the worker's first run)."""
    record = base_record(ctx, name, ready, repeat, is_warmup, cell)
    record.run_id = outcome.request.run_id
    record.status, record.error = outcome.status, outcome.error
    done = outcome.done
    if done is not None:
        record.peak_rss_mb = done.peak_rss_mb  # the serving peak (the load peak is load_peak_rss_mb)
        if done.notes:
            record.notes = "; ".join(n for n in (record.notes, done.notes) if n)
        if done.cpu_s is not None and done.tokens > 0:
            record.cpu_s_per_token = done.cpu_s / done.tokens
        fill_speculation(record, done.speculation)
    tokens = token_records(record.run_id, name, repeat, is_warmup, outcome.started_ns, outcome.tokens)
    harness = [t.harness_ms for t in tokens if t.harness_ms is not None]
    if harness:
        record.harness_ms_per_token = statistics.median(harness)
    if outcome.tokens:
        speculation = done.speculation if done is not None else None
        fill_metrics(
            record,
            outcome.started_ns,
            outcome.tokens,
            ready.weight_bytes_per_token,
            ready.kv_bytes_per_position,
            speculation.bytes_per_token if speculation is not None else None,
            speculation.tokens if speculation is not None else None,
        )
    return record, tokens


def fill_speculation(record: RunRecord, stats: SpeculationStats | None) -> None:
    """The run's speculation rates (runs.csv's spec_* columns) from its engine's counts."""
    if stats is None:
        return
    record.spec_acceptance = stats.acceptance
    record.spec_tokens_per_pass = stats.tokens_per_pass
    record.spec_draft_ms_per_token = stats.draft_ms_per_token
    record.spec_verify_ms_per_token = stats.verify_ms_per_token
    record.spec_bytes_per_token = stats.bytes_per_token


def cold_start_s(ready: Ready, spawn_ns: int, ttft_ms: float | None) -> float:
    """Worker spawned -> engine ready, plus the first run's TTFT, without the one-time build of
    cached artefacts (`build_s`, recorded apart): a first export must not pass for a slow start."""
    return max(0.0, (ready.t_ns - spawn_ns) / 1e9 + (ttft_ms or 0) / 1e3 - (ready.build_s or 0.0))


def note_machine(record: RunRecord, state: MachineState, energy: Energy) -> None:
    """What the machine did during the run, and the run's energy (measured, or why not), into its record."""
    record.steal_pct = _rounded(state.steal_pct)
    record.clock_mhz = _rounded(state.clock_mhz)
    record.outside_cpu_pct = _rounded(state.outside_cpu_pct)
    record.load_avg_1m = state.load_avg_1m
    record.machine_flag = state.flag
    record.energy_j = energy.joules
    record.energy_j_per_token = energy.per_token(record.tokens_generated)
    record.energy_source = energy.source
    record.energy_absent = energy.absent


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
