"""`main.py profile`: where each engine's time goes, against the memory floor."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from ..errors import UsageError
from ..profile.files import write_profile
from ..profile.table import NOTE, UNITS, engine_lines, headers, profile_row, shown_columns
from ..results.export import write_results
from ..results.summary import runs_kept
from ..runs.profile import ProfileResult, ProfileSession, ProfileStarted
from ..status import RunStatus
from .charts import charts
from .common import (
    cancelled,
    config_from_args,
    in_thread,
    out_dir,
    planned_runs,
    progress_printer,
    stderr_console,
    stdout_console,
)
from .main import EXIT_OK, EXIT_RUN_FAILED
from .tables import TextTable, print_table


def profile_command(args: argparse.Namespace) -> int:
    err = stderr_console()
    config = config_from_args(args)
    if config.mode == "race" or config.concurrency:  # its runs go one engine at a time, with no load levels
        raise UsageError("profile runs one engine at a time: it takes neither --mode race nor --concurrency")
    out = out_dir(args.out)
    printer = progress_printer(err)

    def on_event(event: object) -> None:
        if isinstance(event, ProfileStarted):
            err.print(f"[bold]profiling {event.engine}[/] ({event.index}/{event.total})")
        else:
            printer(event)

    session = ProfileSession(config, out, on_event=on_event)
    model, prompt_ids = session.prepare()
    if model.notice:
        err.print(f"[yellow]warning:[/] {model.notice}")
    err.print(
        f"model {model.label} · prompt {len(prompt_ids)} tokens · {config.new_tokens} new tokens · "
        f"{config.sampling.decoding} · {session.threads} threads · engines one at a time"
    )
    result = in_thread(lambda: session.run(model, prompt_ids), session, err)
    paths = write_results(out, result.bench.runs, result.bench.tokens, result.bench.environment)
    paths += write_profile(
        out,
        result.profiles,
        {
            **config.as_dict(),
            "prompt_tokens": len(prompt_ids),
            "model": model.label,
            "threads_resolved": session.threads,
        },
    )
    paths += _charts(result, out, err, skip=args.no_plots)
    print_profile(result, stdout_console(), random_weights=model.is_random)
    err.print("wrote " + ", ".join(str(p) for p in paths))
    traces = [p.trace_file for p in result.profiles if p.trace_file]
    if traces:
        err.print(f"traces (open in https://ui.perfetto.dev or chrome://tracing): {', '.join(traces)}")
    if result.cancelled:
        profiled = sum(1 for p in result.profiles if p.status == RunStatus.OK)
        return cancelled(
            err,
            f"{runs_kept(result.bench.runs, planned_runs(config))}, {profiled} of "
            f"{len(config.backends)} engines profiled",
            out,
        )
    return EXIT_RUN_FAILED if any(p.status != RunStatus.OK for p in result.profiles) else EXIT_OK


def _charts(result: ProfileResult, out: Path, err: Console, skip: bool) -> list[Path]:
    pngs = {phase: out / f"profile_{phase}.png" for phase in ("decode", "prefill")}

    def render() -> list[Path]:
        from ..report import figures
        from ..report.plots import render_png

        return [render_png(figures.profile_breakdown(result.profiles, phase), png) for phase, png in pngs.items()]

    return charts(list(pngs.values()), render, err, skip=skip)


def print_profile(result: ProfileResult, console: Console, random_weights: bool = False) -> None:
    probe = (
        f"its bytes per token read by the faster of sgemv and the own kernel, {result.bandwidth.threads} "
        f"thread{'s' if result.bandwidth.threads != 1 else ''}"
        if result.bandwidth
        else ""
    )
    if any(p.floor_device != "cpu" and p.probe_gb_s for p in result.profiles):
        probe += ("; " if probe else "") + "a CUDA engine's by its GPU (the faster of cuBLAS's gemv and a sum)"
    probe = probe or "bandwidth not measured"
    for phase in ("decode", "prefill"):
        title = (
            f"{phase} step, {UNITS[phase]}"
            + (f" (floor: {probe}, probed around each engine)" if phase == "decode" else "")
            + (f" (roofline's peaks: {peaks_label(result)})" if phase == "prefill" and peaks_label(result) else "")
        )
        rows = [profile_row(p, phase) for p in result.profiles]
        columns = shown_columns(rows)
        names = headers(phase)
        shown = TextTable(
            title,
            [names[i] for i in columns],
            [[row[i] for i in columns] for row in rows],
            left=("backend", "profiler"),
            prose=("profiler",),
        )
        print_table(console, shown)
    console.print(NOTE, markup=False)
    if random_weights:
        console.print("[bold]random weights - timing only[/]")
    for p in result.profiles:
        for line in engine_lines(p):
            console.print(line, markup=False)


def peaks_label(result: ProfileResult) -> str:
    """The peaks the prefill rooflines divide by: the CPU's, and a CUDA engine's GPU's."""
    parts = [result.compute_peaks.label] if result.compute_peaks is not None else []
    if result.gpu_compute_peaks is not None:
        parts.append(f"on {result.gpu_compute_peaks.cpu}: {result.gpu_compute_peaks.label}")
    return "; ".join(parts)
