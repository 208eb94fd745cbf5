"""The command line: `gui` (default), `backends`, `bench`, `sweep`, `quality`, `profile`, `report`, `compare`,
`serve`.

Each command's module is imported only when that command runs, so `main.py backends` does
not pay for the benchmark machinery.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from ..errors import UsageError
from .parser import build_parser

EXIT_OK, EXIT_RUN_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_CANCELLED = 130  # the shell's status for SIGINT: Ctrl+C, even with the finished runs written


def _gui(_args: argparse.Namespace) -> int:
    from whistle_stop.gui.app import run_app

    return run_app()


def _backends(args: argparse.Namespace) -> int:
    from .backends_command import backends_command

    return backends_command(args)


def _bench(args: argparse.Namespace) -> int:
    from .bench_command import bench_command

    return bench_command(args)


def _sweep(args: argparse.Namespace) -> int:
    from .sweep_command import sweep_command

    return sweep_command(args)


def _quality(args: argparse.Namespace) -> int:
    from .quality_command import quality_command

    return quality_command(args)


def _profile(args: argparse.Namespace) -> int:
    from .profile_command import profile_command

    return profile_command(args)


def _report(args: argparse.Namespace) -> int:
    from .report_command import report_command

    return report_command(args)


def _compare(args: argparse.Namespace) -> int:
    from .compare_command import compare_command

    return compare_command(args)


def _serve(args: argparse.Namespace) -> int:
    from .serve_command import serve_command

    return serve_command(args)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "gui": _gui,
    "backends": _backends,
    "bench": _bench,
    "sweep": _sweep,
    "quality": _quality,
    "profile": _profile,
    "report": _report,
    "compare": _compare,
    "serve": _serve,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command or "gui"](args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_CANCELLED
