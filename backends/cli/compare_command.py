"""`main.py compare BASE NEW`: did each engine get faster or slower, with intervals; a CI gate
with --fail-if-slower."""

from __future__ import annotations

import argparse
import json

from ..errors import UsageError
from ..report.comparison import compare_folders, refusal
from ..report.comparison_text import HEADERS, SHARE_HEADERS, has_shares, heading, markdown, note_lines, rows, share_rows
from .common import stderr_console, stdout_console
from .main import EXIT_OK, EXIT_RUN_FAILED
from .tables import TextTable, print_table


def compare_command(args: argparse.Namespace) -> int:
    comparison = compare_folders(args.base, args.new, args.min_effect)
    if comparison.setting_differences and not args.allow_different:
        raise UsageError(refusal(comparison.setting_differences))
    if not comparison.rows:
        raise UsageError("no engine has measured runs in both BASE and NEW: nothing to compare")
    out = stdout_console()
    if args.json:
        print(json.dumps(comparison.as_dict(), indent=2, default=str))
    elif args.markdown:
        print(markdown(comparison), end="")
    else:
        print_table(out, TextTable(heading(comparison), HEADERS, rows(comparison), keys=2, left=list(HEADERS[:2])))
        if any(has_shares(n) for n in comparison.normalised):
            title = "each engine against its own machine's limits (1 = at the limit)"
            print_table(out, TextTable(title, SHARE_HEADERS, share_rows(comparison), keys=1, left=[SHARE_HEADERS[0]]))
        for line in note_lines(comparison):
            out.print(line, markup=False, highlight=False, soft_wrap=True)
    if args.fail_if_slower is not None:
        slower = comparison.slower(args.fail_if_slower)
        err = stderr_console()
        for row in slower:
            err.print(
                f"slower by more than {args.fail_if_slower:g}%: {row.engine} {row.label} {row.ratio_text()}",
                markup=False,
                highlight=False,
            )
        if slower:
            return EXIT_RUN_FAILED
    return EXIT_OK
