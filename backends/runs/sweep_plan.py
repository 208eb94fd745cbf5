"""A sweep's plan: the grid of (prompt tokens, new tokens) cells, and what an earlier run of the
same sweep in the output folder already finished (so a resume skips it)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError
from ..machine.cpu import cpu_model
from ..results.environment import git_commit, library_versions, thread_env
from ..results.export import ENVIRONMENT_JSON, RUNS_CSV, TOKENS_CSV
from ..results.load import LoadRequestRecord
from ..results.reader import ResultsError, check_sections, load_requests, load_results
from ..results.records import RunRecord, TokenRecord
from ..results.roofline_curves import ENVIRONMENT_KEY
from ..sources.model_files import ModelFiles
from ..sources.prompts import prompt_of_length
from ..sources.tokenizer import encode
from ..status import RunStatus
from .config import BenchConfig, Cell
from .sweep_grid import SweepGrid

SWEEP_KEY = "sweep"  # environment.json's section for the sweep


@dataclass(frozen=True)
class SkippedCell:
    prompt_tokens: int
    new_tokens: int
    reason: str


@dataclass(frozen=True)
class PreviousSweep:
    """What an earlier, interrupted run of the same sweep left in the folder."""

    completed: frozenset[tuple[int, int]] = frozenset()
    runs: tuple[RunRecord, ...] = ()
    tokens: tuple[TokenRecord, ...] = ()
    engines: dict = field(default_factory=dict)
    bandwidth: dict | None = None
    load: tuple[LoadRequestRecord, ...] = ()
    compute_peaks: dict | None = None
    curves: tuple[dict, ...] = ()


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
    previous_load: list[LoadRequestRecord] = field(default_factory=list)
    previous_compute_peaks: dict | None = None
    previous_curves: list[dict] = field(default_factory=list)


def cell_tag(prompt_tokens: int, new_tokens: int) -> str:
    return f"p{prompt_tokens}n{new_tokens}"


def sweep_fingerprint(config: BenchConfig, model: ModelFiles, threads: int, reference: str) -> dict:
    """What must not change between a sweep and its resumption (JSON-normalised)."""
    settings = config.as_dict()
    prompt = None if config.prompt is None else hashlib.sha256(config.prompt.encode()).hexdigest()[:16]
    data = {
        "model": model.model_id,
        "weights_sha256_16": model.weights_hash,
        "backends": list(config.backends),
        "repeats": config.repeats,
        "sampling": settings["sampling"],
        "threads": threads,
        "prompt_sha256_16": prompt,
        "engine_options": settings["engine_options"],
        "reference": reference,
        "cpu": cpu_model(),
        # a cell's first repeat without a warm-up pays first-call costs (a compile for the new shape)
        "warmup": config.warmup,
        "cold": config.cold,
        # the software the cells ran on: a resume after an upgrade would mix two versions' numbers
        "libraries": library_versions(config.backends),
        "thread_env": thread_env(),
        "app_commit": git_commit(),
    }
    if config.concurrency:  # (absent otherwise: sweeps begun before load runs existed still resume)
        data["concurrency"] = sorted(set(config.concurrency))
        data["slo"] = [config.slo_ttft_ms, config.slo_itl_ms]
    return json.loads(json.dumps(data))


# Not in the fingerprints of sweeps begun before them: those still resume.
LATER_KEYS = {"warmup", "cold", "libraries", "thread_env", "app_commit"}


def fingerprint_differences(old: dict, new: dict) -> list[str]:
    """One line per setting that changed ("libraries.onnxruntime: '1.31' then, '1.32' now")."""
    lines = []
    for key in sorted(set(old) | set(new)):
        if key in LATER_KEYS and key not in old:
            continue
        then, now = old.get(key), new.get(key)
        if isinstance(then, dict) and isinstance(now, dict):
            lines += [f"{key}.{line}" for line in fingerprint_differences(then, now)]
        elif then != now:
            lines.append(f"{key}: {then!r} then, {now!r} now")
    return lines


def plan_sweep(
    config: BenchConfig, grid: SweepGrid, model: ModelFiles, fingerprint: dict, previous: PreviousSweep
) -> SweepPlan:
    """The cells still to run (in grid order), those finished earlier, and those beyond the context.

    UsageError when no cell fits the context: a sweep with nothing it could ever run is bad input."""
    shortest = min(p + n for p, n in grid.keys())  # noqa: SIM118 - SweepGrid.keys(): the cells, not a dict's
    if shortest > model.context:
        raise UsageError(
            f"no cell of the sweep fits the model's context of {model.context} tokens (the shortest is {shortest})"
        )
    cells, skipped = [], []
    for p, n in grid.keys():  # noqa: SIM118 - SweepGrid.keys(): the cells, not a dict's
        if p + n > model.context:
            skipped.append(SkippedCell(p, n, f"{p} + {n} tokens exceed the context of {model.context}"))
        elif (p, n) not in previous.completed:
            cells.append(Cell(tuple(cell_prompt(config, p)), n, cell_tag(p, n)))
    return SweepPlan(
        model,
        fingerprint,
        cells,
        sorted(previous.completed),
        skipped,
        list(previous.runs),
        list(previous.tokens),
        dict(previous.engines),
        previous.bandwidth,
        list(previous.load),
        previous.compute_peaks,
        list(previous.curves),
    )


def cell_prompt(config: BenchConfig, n_tokens: int) -> list[int]:
    if config.prompt is None:
        return prompt_of_length(n_tokens)
    source = encode(config.prompt)  # the user's text, repeated to the cell's length
    return (source * -(-n_tokens // len(source)))[:n_tokens]


def finished_cells_only(
    runs: Iterable[RunRecord],
    tokens: Iterable[TokenRecord],
    load: Iterable[LoadRequestRecord],
    completed: Collection[tuple[int, int]],
) -> tuple[list[RunRecord], list[TokenRecord], list[LoadRequestRecord]]:
    """The records of the finished cells: a cell cut short runs again from the start on a resume,
    so its runs are no sweep's numbers (read from a folder, or left by a cancel)."""
    done = set(completed)
    kept = [r for r in runs if (r.prompt_tokens, r.new_tokens) in done]
    ids = {r.run_id for r in kept}
    return kept, [t for t in tokens if t.run_id in ids], [r for r in load if (r.prompt_tokens, r.new_tokens) in done]


def read_previous(out_dir: Path | None, fingerprint: dict, restart: bool) -> PreviousSweep:
    """Completed cells and their records from an earlier run of the same sweep in out_dir."""
    if out_dir is None or restart:
        return PreviousSweep()
    env_path, runs_path = out_dir / ENVIRONMENT_JSON, out_dir / RUNS_CSV
    if not env_path.exists() and not runs_path.exists():
        return PreviousSweep()
    advice = f"use --restart to discard what is in {out_dir}, or choose another --out"
    try:
        environment = json.loads(env_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{env_path} cannot be read ({exc}); {advice}") from exc
    sweep = environment.get(SWEEP_KEY) if isinstance(environment, dict) else None
    if not isinstance(sweep, dict) or "fingerprint" not in sweep:
        raise UsageError(f"{out_dir} holds results that are not from a sweep; {advice}")
    try:  # the sections a resume carries on with: a damaged one is one line here, not a traceback mid-sweep
        check_sections(environment, env_path)
    except ResultsError as exc:
        raise UsageError(f"{exc}; {advice}") from exc
    differences = fingerprint_differences(sweep["fingerprint"], fingerprint)
    if differences:
        raise UsageError(
            f"{out_dir} holds a sweep with other settings ({'; '.join(differences[:3])}); "
            f"run the same command to resume it, or {advice}"
        )
    try:
        completed = frozenset((int(p), int(n)) for p, n in sweep.get("completed") or [])
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{env_path} is damaged: its list of finished cells cannot be read ({exc}); {advice}") from exc
    runs, tokens, _ = load_results(out_dir) if runs_path.exists() else ([], [], {})
    # Rows of a cell that was cut short are dropped: that cell runs again from the start.
    runs, tokens, load = finished_cells_only(runs, tokens, load_requests(out_dir), completed)
    # A finished cell without its records (a lost or cut runs.csv or tokens.csv) would be skipped and
    # its numbers silently missing from every table and chart of the sweep.
    missing = sorted(completed - {(r.prompt_tokens, r.new_tokens) for r in runs})
    if missing:
        cells = ", ".join(cell_tag(p, n) for p, n in missing[:3]) + (", ..." if len(missing) > 3 else "")
        raise UsageError(f"{out_dir / RUNS_CSV} holds no runs of the finished cell(s) {cells}; {advice}")
    streamed = {t.run_id for t in tokens}
    tokenless = [r.run_id for r in runs if r.status == RunStatus.OK and r.tokens_generated and r.run_id not in streamed]
    if tokenless:
        raise UsageError(f"{out_dir / TOKENS_CSV} holds no tokens of the finished run {tokenless[0]}; {advice}")
    return PreviousSweep(
        completed,
        tuple(runs),
        tuple(tokens),
        dict(environment.get("engines") or {}),
        environment.get("bandwidth"),
        tuple(load),
        environment.get("compute_peaks"),
        tuple(environment.get(ENVIRONMENT_KEY) or ()),
    )
