"""`main.py sweep`: engines over prompt x output lengths, resumable, with plots."""

from __future__ import annotations

import argparse

from rich.console import Console

from ..errors import UsageError
from ..results.records import runs_of
from ..results.summary import runs_kept
from ..runs.bench import BenchResult
from .charts import charts
from .common import (
    cancelled,
    check_reference,
    config_from_args,
    in_thread,
    out_dir,
    planned_runs,
    progress_printer,
    stderr_console,
    stdout_console,
)
from .load_table import print_load
from .main import EXIT_OK, EXIT_RUN_FAILED
from .tables import TextTable, print_table


def sweep_command(args: argparse.Namespace) -> int:
    from ..report.figures import with_data
    from ..report.sweep_figures import sweep_figures
    from ..runs.sweep import CellDone, CellStarted, SweepNote, SweepSession

    err = stderr_console()
    grid = sweep_grid(args)
    first = argparse.Namespace(
        **{**vars(args), "prompt_tokens": grid.prompt_tokens[0], "new_tokens": grid.new_tokens[0]}
    )
    config = config_from_args(first)
    check_reference(config)
    out = out_dir(args.out)
    printer = progress_printer(err)

    def on_event(event) -> None:
        if isinstance(event, CellStarted):
            err.print(
                f"[bold]cell {event.index}/{event.total}[/]: prompt {event.prompt_tokens}, new {event.new_tokens}"
            )
        elif isinstance(event, CellDone):
            err.print(f"  cell {event.index}/{event.total} written to {out}")
        elif isinstance(event, SweepNote):
            err.print(f"  {event.message}")
        else:
            printer(event)

    session = SweepSession(config, grid, out, restart=args.restart, on_event=on_event)
    plan = session.prepare()
    if plan.model.notice:
        err.print(f"[yellow]warning:[/] {plan.model.notice}")
    for skipped in plan.skipped:
        err.print(f"[yellow]skipped:[/] prompt {skipped.prompt_tokens}, new {skipped.new_tokens}: {skipped.reason}")
    if plan.completed:
        err.print(f"resuming: {len(plan.completed)} cell(s) already complete in {out}, {len(plan.cells)} to run")
    err.print(
        f"model {plan.model.label} · {len(plan.cells)} cells · {config.repeats} repeats · "
        f"{config.sampling.decoding} · {session.threads} threads"
    )
    result = in_thread(lambda: session.run(plan), session, err)
    figures = sweep_figures(result.runs, result.tokens, result.environment)

    def render() -> list:
        from ..report.plots import render_all

        shown, left_out = with_data(figures)
        for line in left_out:
            err.print(f"not drawn: {line}")
        return render_all(shown, out)

    # a chart left by what --out held before (a sweep started over, one with fewer cells) is not of
    # these records: charts() removes each before it is drawn afresh, or not at all
    paths = [out / f"{figure.name}.png" for figure in figures]
    plots = charts(paths, render, err, skip=args.no_plots or not result.runs)
    if plots:
        err.print("plots: " + ", ".join(str(p) for p in plots))
    _print_sweep(result, stdout_console())
    if config.concurrency:
        print_load(result, stdout_console())
    if result.cancelled:
        # A resume runs an unfinished cell again: only the runs of this command's finished cells are kept.
        done = {tuple(key) for key in (result.environment.get("sweep") or {}).get("completed", [])}
        cells = [cell.key for cell in plan.cells if cell.key in done]
        kept = runs_kept(
            [r for r in result.runs if (r.prompt_tokens, r.new_tokens) in cells], planned_runs(config, len(plan.cells))
        )
        return cancelled(
            err,
            f"{kept} ({len(cells)} of {len(plan.cells)} cells complete)",
            out,
            "run the same command again to resume",
        )
    return EXIT_RUN_FAILED if result.failed else EXIT_OK


def sweep_grid(args: argparse.Namespace):
    """The grid of a sweep command: a named one (--grid), or the lengths given (or the defaults)."""
    from ..runs.sweep_grid import DEFAULT_NEW_TOKENS, DEFAULT_PROMPT_TOKENS, SweepGrid, named_grid

    if args.grid:
        if args.prompt_tokens or args.new_tokens:
            raise UsageError("give --grid or --prompt-tokens/--new-tokens, not both")
        return named_grid(args.grid).validate()
    prompts, news = args.prompt_tokens or DEFAULT_PROMPT_TOKENS, args.new_tokens or DEFAULT_NEW_TOKENS
    return SweepGrid(tuple(prompts), tuple(news)).validate()


def _print_sweep(result: BenchResult, console: Console) -> None:
    from ..results.stats import summarize
    from ..results.summary import fmt

    measured = [r for r in result.runs if not r.is_warmup and r.status == "ok"]
    if not measured:  # a cancel before the first cell finished, or every run failed: no table of headers only
        console.print("sweep: no cell has a measured run")
        return
    backends = list(result.config.backends)
    rows = []
    for p, n in sorted({(r.prompt_tokens, r.new_tokens) for r in measured}):
        cells = []
        for b in backends:
            mine = [r for r in runs_of(measured, b) if (r.prompt_tokens, r.new_tokens) == (p, n)]
            cells.append(
                f"{fmt(summarize([r.ttft_ms for r in mine]).median)} · "
                f"{fmt(summarize([r.decode_tok_s for r in mine]).median)}"
                if mine
                else "-"
            )
        rows.append([str(p), str(n), *cells])
    # a row is a cell of the grid: its prompt and new tokens name it in every group
    title = f"{result.model.label}: sweep (median TTFT ms · decode tok/s)"
    print_table(console, TextTable(title, ["prompt", "new", *backends], rows, keys=2))
    if result.model.is_random:
        console.print("[bold]random weights - timing only[/]")
