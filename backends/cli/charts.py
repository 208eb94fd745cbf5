"""The PNG charts of `sweep`, `quality` and `profile`: drawn after the records are written, left out with
`--no-plots`, and skipped in one line where they cannot be drawn, so a chart never costs a command its records,
its tables or its exit status."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ..report.qt_start import qt_start_problem


def charts(paths: Sequence[Path], render: Callable[[], list[Path]], err: Console, *, skip: bool = False) -> list[Path]:
    """The charts `render` writes (some of `paths`), or none: with `skip`, or after one line saying why
    they could not be drawn. A chart left at `paths` by an earlier run is removed first: beside these
    records it would show other numbers."""
    _remove(paths)
    if skip:
        return []
    problem = qt_platform_problem()
    if problem is None:
        try:
            return render()
        except Exception as exc:  # noqa: BLE001 - said, not fatal (no pyqtgraph, say)
            problem = " ".join(str(exc).split()) or type(exc).__name__
    _remove(paths)  # a chart drawn before the failure would stand alone
    err.print(
        f"[yellow]charts skipped:[/] {escape(problem)}",
        soft_wrap=True,  # one line, however long the reason
        highlight=False,
    )
    return []


def qt_platform_problem() -> str | None:
    """Why Qt cannot start here for the charts, or None: asked of a child, started as the renderer starts
    it (report/qt_start.py); a running application needs no asking."""
    from ..report import plots

    qt = sys.modules.get("pyqtgraph.Qt")
    if qt is not None and qt.QtWidgets.QApplication.instance() is not None:
        return None
    problem = qt_start_problem(f"from {plots.__name__} import ensure_qt_app; ensure_qt_app()")
    return None if problem is None else f"{problem}; QT_QPA_PLATFORM=offscreen draws them without a display"


def _remove(paths: Sequence[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)
