"""`main.py backends`: every engine, available or not, and why not (imports no engine)."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .. import registry
from .main import EXIT_OK


def backends_command(_args: argparse.Namespace) -> int:
    table = Table(title="whistle-stop engines")
    for column in ("engine", "precision", "available", "what it is / why not"):
        table.add_column(column)
    for name, spec in registry.ENGINES.items():
        ok, why = registry.available(name)
        table.add_row(
            name,
            spec.precision,
            "yes" if ok else "no",
            escape(spec.description if ok else why),
            style=None if ok else "dim",
        )
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    return EXIT_OK
