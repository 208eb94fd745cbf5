"""The table `bench --serve-cold-start` prints: each server's load to finish beside its engine's cold start."""

from __future__ import annotations

from rich.console import Console

from ..serve.cold_start import TABLE_HEADERS, TABLE_NOTE, ServeColdStart
from .tables import TextTable, print_table


def print_serve_cold_start(rows: list[ServeColdStart], console: Console) -> None:
    table = TextTable(
        "serve cold start: process start to first completed response (a 1-token greedy completion)",
        TABLE_HEADERS,
        [row.shown() for row in rows],
        keys=2,
        left=[header for header in TABLE_HEADERS if not header.endswith(" s")],
        prose=(TABLE_HEADERS[-1],),
    )
    print_table(console, table)
    console.print(TABLE_NOTE, markup=False)
