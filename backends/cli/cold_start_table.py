"""The table `bench --serve-cold-start` prints: each server's load to finish beside its engine's cold start."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..serve.cold_start import TABLE_HEADERS, TABLE_NOTE, ServeColdStart


def print_serve_cold_start(rows: list[ServeColdStart], console: Console) -> None:
    table = Table(title="serve cold start: process start to first completed response (a 1-token greedy completion)")
    for header in TABLE_HEADERS:
        table.add_column(header, justify="right" if header.endswith(" s") else "left")
    for row in rows:
        table.add_row(*row.shown())
    console.print(table)
    console.print(TABLE_NOTE, markup=False)
