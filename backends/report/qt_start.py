"""Can Qt start here? Asked of a child process, because Qt aborts the whole process (SIGABRT, after a
paragraph on stderr) when no platform plugin starts: a DISPLAY that does not answer, a QT_QPA_PLATFORM
that is not installed, a missing libxcb-cursor0. The window and the PNG charts ask before they start Qt,
and say why in one line instead."""

from __future__ import annotations

import subprocess
import sys

PROBE_TIMEOUT_S = 30.0  # an X display across the network may not answer at all
BARE_APPLICATION = "from PySide6.QtWidgets import QApplication; QApplication([])"


def qt_start_problem(code: str = BARE_APPLICATION) -> str | None:
    """Why Qt cannot start here, in one line, or None. `code` starts it as the caller will (the charts'
    renderer chooses the offscreen platform without a display), in a child with this environment."""
    try:
        child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
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
        return f"Qt cannot start here ({platform[0]})"
    return f"Qt cannot start here: {lines[-1] if lines else f'exit status {returncode}'}"
