"""`main.py report`: results folders into one self-contained HTML page and PNGs."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UsageError
from .common import stderr_console
from .main import EXIT_OK


def report_command(args: argparse.Namespace) -> int:
    from ..report.html import build_report

    for folder in args.folders:
        if not Path(folder).is_dir():
            raise UsageError(f"{folder} is not a folder")
    path = build_report(list(args.folders), args.out)
    stderr_console().print(f"wrote {path} and its PNG figures")
    return EXIT_OK
