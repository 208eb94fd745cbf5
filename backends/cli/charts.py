"""The PNG charts of `sweep`, `quality` and `profile`: drawn after the records are written, left out with
`--no-plots`, and skipped in one line where they cannot be drawn, so a chart never costs a command its records,
its tables or its exit status."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape

PROBE_TIMEOUT_S = 30.0  # an X display across the network may not answer at all


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
    """Why Qt cannot start here (a DISPLAY that does not answer, a QT_QPA_PLATFORM not installed), or None.
    Qt aborts the whole process when no platform plugin starts, so a child starts the application first,
    the same way the PNGs' renderer does; a running application needs no asking."""
    from ..report import plots

    qt = sys.modules.get("pyqtgraph.Qt")
    if qt is not None and qt.QtWidgets.QApplication.instance() is not None:
        return None
    try:
        child = subprocess.run(
            [sys.executable, "-c", f"from {plots.__name__} import ensure_qt_app; ensure_qt_app()"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"Qt did not start within {PROBE_TIMEOUT_S:.0f} s"
    if child.returncode == 0:
        return None
    return _why(child.stderr, child.returncode)


def _why(stderr: str, returncode: int) -> str:
    """Qt's own first word on its platform plugin, else the last line (a Python error's)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    platform = [line for line in lines if line.startswith("qt.qpa")]
    if platform:
        return f"Qt cannot start here ({platform[0]}); QT_QPA_PLATFORM=offscreen draws them without a display"
    return f"Qt cannot start here: {lines[-1] if lines else f'exit status {returncode}'}"


def _remove(paths: Sequence[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)
