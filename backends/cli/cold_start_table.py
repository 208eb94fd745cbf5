"""The table `bench --serve-cold-start` prints: each server's load to finish beside its engine's cold start."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..serve.cold_start import ServeColdStart


def print_serve_cold_start(rows: list[ServeColdStart], console: Console) -> None:
    table = Table(title="serve cold start: process start to first completed response (a 1-token greedy completion)")
    for header in ("engine", "server", "load to finish s", "engine cold start s", "status / note"):
        table.add_column(header, justify="right" if header.endswith(" s") else "left")
    for row in rows:
        table.add_row(
            row.engine,
            row.server,
            _s(row.serve_cold_start_s),
            _s(row.engine_cold_start_s),
            row.status if not row.note else f"{row.status}: {row.note}",
        )
    console.print(table)
    console.print(
        "engine cold start: the bench's, its worker spawned to its first token (no HTTP, no server "
        "process); load to finish adds the server process's start and one request over HTTP",
        markup=False,
    )


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
