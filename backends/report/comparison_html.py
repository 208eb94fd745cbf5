"""The HTML report's section for `report FOLDERS --baseline DIR`: the folders' engines against the
baseline, the same rows `compare` prints (comparison_text.py)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from .comparison import compare_folders
from .comparison_text import HEADERS, SHARE_HEADERS, has_shares, heading, note_lines, rows, share_rows


def _table(headers: Sequence[str], body: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    cells = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in body)
    return f"<table><tr>{head}</tr>{cells}</table>"


def baseline_section(baseline: Sequence[Path], folders: Sequence[Path]) -> str:
    """<section> comparing `folders` (NEW) against `baseline` (BASE); differing settings are shown
    as a caveat rather than refused (the report shows what it was given)."""
    c = compare_folders(list(baseline), list(folders))
    parts = [f"<section><h2>Against the baseline</h2><p class=facts>{html.escape(heading(c))}</p>"]
    parts.append(_table(HEADERS, rows(c)))
    if any(has_shares(n) for n in c.normalised):
        parts.append("<h3>Each engine against its own machine's limits</h3>" + _table(SHARE_HEADERS, share_rows(c)))
    parts += [f'<p class="note">{html.escape(line)}</p>' for line in note_lines(c)]
    return "".join(parts) + "</section>"
