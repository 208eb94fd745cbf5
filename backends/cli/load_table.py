"""The load table `bench --concurrency` and `sweep --concurrency` print: one per cell."""

from __future__ import annotations

from rich.console import Console

from .. import registry
from ..results.load import (
    LOAD_HEADERS,
    RATE_HEADERS,
    levels_by_cell,
    load_notes,
    load_rows,
    open_loop_levels,
    rate_notes,
    rate_rows,
    session_levels,
)
from ..runs.result import BenchResult
from .tables import TextTable, print_table


def print_load(result: BenchResult, console: Console) -> None:
    """Throughput and latency per concurrency level (level 1: every engine's bench runs)."""
    config = result.config
    servers = {r.backend for r in result.load}
    levels = session_levels(result.runs, result.tokens, result.load, config.slo)
    for (prompt, new), cell in levels_by_cell(levels):
        title = (
            f"load: {prompt}-token prompts, {new} new tokens, "
            f"levels {', '.join(map(str, sorted(set(config.concurrency) | {1})))}"
        )
        # a row is an engine at a level: its name, level and kind name it in every group
        print_table(console, TextTable(title, LOAD_HEADERS, load_rows(cell), keys=3, left=("backend", "kind")))
        if open_loop_levels(cell):
            burst = config.rate.burstiness
            arrivals = "Poisson arrivals" if burst == 1.0 else f"gamma arrivals, burstiness {burst:g}"
            rate_title = f"open loop: {prompt}-token prompts, {new} new tokens, {arrivals}, seed {config.sampling.seed}"
            print_table(console, TextTable(rate_title, RATE_HEADERS, rate_rows(cell), keys=2, left=("backend",)))
    for line in load_notes(levels, config.slo) + rate_notes(levels):
        console.print(line, markup=False)
    if not servers and (any(c > 1 for c in config.concurrency) or config.rate.set):  # server levels asked, none run
        console.print(
            f"no engine served concurrently (only server engines - "
            f"{', '.join(registry.serving_concurrently())} - have levels above 1)"
        )
