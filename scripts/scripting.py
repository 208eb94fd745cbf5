"""Helpers for the scripts that drive the real window (screenshots, the latency probe).

Qt is imported inside the functions: a script first decides the platform (offscreen or not)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PySide6.QtCore import QEventLoop
    from PySide6.QtWidgets import QApplication, QWidget

    from whistle_stop.gui.job_controller import JobController
    from whistle_stop.gui.main_window import MainWindow


def offscreen_without_display() -> None:
    """Render offscreen when there is no screen, so the scripts run on a headless machine too."""
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def open_window(settings_dir: Path, size: str = "1600x1000") -> MainWindow:
    """A shown MainWindow of `size` ("WxH") whose preferences live in `settings_dir`, not the user's."""
    from whistle_stop.gui.main_window import MainWindow
    from whistle_stop.gui.settings import settings_in

    window = MainWindow(settings=settings_in(Path(settings_dir)))
    width, height = (int(v) for v in size.split("x"))
    window.resize(width, height)
    window.show()
    return window


def run_end_loop(controller: JobController) -> tuple[QEventLoop, dict]:
    """(loop, outcome): `loop.exec()` returns when the controller's job ends; outcome then holds
    'result' or 'error' (a cancel is one too: the scripts never cancel)."""
    from PySide6.QtCore import QEventLoop

    loop = QEventLoop()
    outcome: dict = {}
    controller.result.connect(lambda result: (outcome.update(result=result), loop.quit()))
    controller.failed.connect(lambda message: (outcome.update(error=message), loop.quit()))
    controller.cancelled.connect(lambda: (outcome.update(error="cancelled"), loop.quit()))
    return loop, outcome


def settle_and_grab(widget: QWidget, out: Path, settle_ms: int) -> None:
    """Let the last layout and paint settle, then save `widget` as a PNG."""
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    QTimer.singleShot(settle_ms, loop.quit)
    loop.exec()
    out.parent.mkdir(parents=True, exist_ok=True)
    widget.grab().save(str(out))
    print(f"wrote {out} ({widget.width()}x{widget.height()})")


def close_window(window: QWidget, app: QApplication) -> None:
    window.close()
    window.deleteLater()
    app.processEvents()
