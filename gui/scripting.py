"""Helpers for the scripts that drive the real window (screenshots, the latency probe)."""

from __future__ import annotations

import os
from pathlib import Path


def offscreen_without_display() -> None:
    """Render offscreen when there is no screen, so the scripts run on a headless machine too."""
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def open_window(settings_dir: Path, size: str = "1600x1000"):
    """A shown MainWindow of `size` ("WxH") whose preferences live in `settings_dir`, not the user's."""
    from .main_window import MainWindow
    from .settings import settings_in

    window = MainWindow(settings=settings_in(Path(settings_dir)))
    width, height = (int(v) for v in size.split("x"))
    window.resize(width, height)
    window.show()
    return window


def run_end_loop(controller):
    """(loop, outcome): `loop.exec()` returns when the run ends; outcome then holds 'result' or 'error'."""
    from PySide6.QtCore import QEventLoop

    loop = QEventLoop()
    outcome: dict = {}
    controller.finished.connect(lambda result: (outcome.update(result=result), loop.quit()))
    controller.failed.connect(lambda message: (outcome.update(error=message), loop.quit()))
    return loop, outcome
