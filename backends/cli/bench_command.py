"""`main.py bench`: benchmark engines headless, print a summary and write CSV/JSON records."""

from __future__ import annotations

import argparse
import os

from rich.console import Console

from ..results.export import write_results
from ..results.summary import (
    SUMMARY_HEADERS,
    harness_note,
    interval_note,
    runs_kept,
    sampling_notes,
    speculation_notes,
    summarize_backends,
    summary_rows,
)
from ..results.verdict import verdict
from ..runs.bench import BenchResult, BenchSession
from ..storage import bytecode
from .common import (
    cancelled,
    check_reference,
    config_from_args,
    in_thread,
    out_dir,
    planned_runs,
    print_verdict,
    progress_printer,
    stderr_console,
    stdout_console,
)
from .load_table import print_load
from .main import EXIT_OK, EXIT_RUN_FAILED
from .tables import TextTable, print_table


def bench_command(args: argparse.Namespace) -> int:
    err = stderr_console()
    config = config_from_args(args)
    config.calibrate_harness = not getattr(args, "no_harness_calibration", False)
    out = out_dir(args.out)
    check_reference(config)
    session = BenchSession(config, on_event=progress_printer(err))
    model, prompt_ids = session.prepare()
    if model.notice:
        err.print(f"[yellow]warning:[/] {model.notice}")
    err.print(
        f"model {model.label} · prompt {len(prompt_ids)} tokens · {config.new_tokens} new tokens · "
        f"{config.sampling.decoding} · {session.threads} threads · {config.mode} mode"
    )
    _warn_if_busy(session.threads, err)
    uncompiled = bytecode.warning(bytecode.check())
    if uncompiled:
        err.print(f"[yellow]warning:[/] {uncompiled}")
    result = in_thread(lambda: session.run(model, prompt_ids), session, err)
    paths = write_results(out, result.runs, result.tokens, result.environment, load=result.load, slo=config.slo)
    print_summary(result, stdout_console())
    for line in session.adaptive_lines:
        stdout_console().print(line, markup=False, highlight=False, soft_wrap=True)
    if config.concurrency or config.rate.set:
        print_load(result, stdout_console())
    if getattr(args, "serve_cold_start", False) and not result.cancelled:
        paths.append(_serve_cold_start(result, session.threads, out, err))
    err.print("wrote " + ", ".join(str(p) for p in paths))
    if result.cancelled:
        return cancelled(err, runs_kept(result.runs, planned_runs(config)), out)
    return EXIT_RUN_FAILED if result.failed else EXIT_OK


def _serve_cold_start(result: BenchResult, threads: int, out, err: Console):
    """After the bench (nothing else runs): each engine's `serve`, and its own server, to first response."""
    from ..runs.preparation import engine_specs
    from ..serve.cold_start import measure, write_csv
    from .cold_start_table import print_serve_cold_start

    config = result.config
    engine_cold: dict[str, float] = {}
    for record in result.runs:
        if record.cold_start_s is not None:
            engine_cold.setdefault(record.backend, record.cold_start_s)
    rows = measure(
        engine_specs(config),
        result.model,
        result.prompt_ids,
        threads,
        config.engine_options,
        engine_cold,
        say=lambda line: err.print(f"  {line}", markup=False),
    )
    print_serve_cold_start(rows, stdout_console())
    return write_csv(out, rows)


def _warn_if_busy(threads: int, err: Console) -> None:
    """Timings on an oversubscribed machine are meaningless for every engine: say so up front."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return
    cores = os.cpu_count() or 1
    if threads > cores:  # the engines' own threads are the competition, whatever else runs
        err.print(
            f"[yellow]warning:[/] --threads {threads} on {cores} logical CPUs: each engine's threads take turns on "
            "the cores, so timings measure the scheduler as much as the engine"
        )
    elif load + threads > cores + 0.5:
        err.print(
            f"[yellow]warning:[/] load average {load:.1f} on {cores} cores: other processes compete with the "
            f"engines ({threads} threads each), so timings will be noisy"
        )


def print_summary(result: BenchResult, console: Console) -> None:
    title = f"{result.model.label}: {len(result.prompt_ids)}-token prompt, {result.config.new_tokens} new tokens"
    reference = result.environment.get("reference")
    summaries = summarize_backends(result.runs, list(result.config.backends), result.tokens)
    table = TextTable(
        title,
        SUMMARY_HEADERS,
        summary_rows(summaries, reference),
        keys=2,
        left=("backend", "dtype", "status"),
        prose=("status",),
    )
    print_table(console, table)
    console.print(interval_note(summaries), markup=False, end="")
    console.print("; [bold]random weights - timing only[/]" if result.model.is_random else "")
    for note in sampling_notes(summaries) + speculation_notes(summaries):
        console.print(note, markup=False)
    harness = harness_note(result.environment.get("harness"))
    if harness:
        console.print(harness)
    if any(s.concurrent for s in summaries):
        console.print("[yellow]race mode: engines ran at the same time, so timings are contended[/]")
    print_verdict(verdict(result.runs, list(result.config.backends), reference), console)
