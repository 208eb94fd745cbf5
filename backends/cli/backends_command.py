"""`main.py backends`: every engine, available or not, and why not (imports no engine)."""

from __future__ import annotations

import argparse

from .. import registry
from .common import stdout_console
from .main import EXIT_OK
from .tables import TextTable, print_table

HEADERS = ("engine", "precision", "available", "what it is / why not")


def backends_command(_args: argparse.Namespace) -> int:
    rows, styles = [], []
    for name, spec in registry.ENGINES.items():
        ok, why = registry.available(name)
        rows.append([name, spec.precision, "yes" if ok else "no", spec.description if ok else why])
        styles.append(None if ok else "dim")
    table = TextTable("whistle-stop engines", HEADERS, rows, left=HEADERS, prose=(HEADERS[-1],), row_styles=styles)
    print_table(stdout_console(), table)
    return EXIT_OK
