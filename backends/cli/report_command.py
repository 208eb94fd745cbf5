"""`main.py report`: results folders into one self-contained HTML page and PNGs, or one folder
into a Markdown page (`--markdown FILE`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UsageError
from .common import stderr_console
from .main import EXIT_OK


def report_command(args: argparse.Namespace) -> int:
    for folder in args.folders:
        if not Path(folder).is_dir():
            raise UsageError(f"{folder} is not a folder")
    err = stderr_console()
    if args.markdown is not None:
        from ..report.markdown import write_markdown

        if len(args.folders) != 1:
            raise UsageError("--markdown takes one results folder (one dated run per page)")
        err.print(f"wrote {write_markdown(args.folders[0], args.markdown)}")
        if args.out is None:
            return EXIT_OK
    from ..report.html import build_report
    from .charts import qt_platform_problem

    problem = qt_platform_problem()  # Qt aborts the process where it cannot start: ask first
    if problem is not None:
        raise UsageError(f"the HTML report cannot draw its charts: {problem}")
    for folder in args.baseline or ():
        if not Path(folder).is_dir():
            raise UsageError(f"--baseline {folder} is not a folder")
    path = build_report(list(args.folders), args.out or Path("report"), baseline=args.baseline)
    err.print(f"wrote {path} and its PNG figures")
    return EXIT_OK
