"""`python main.py` (or `main.py gui`): start the desktop app and return its exit code."""

from __future__ import annotations

import os
import sys

EXIT_NO_DISPLAY = 2
WINDOW_HINT = "check DISPLAY, or run `xvfb-run python main.py` (the README lists the X11 libraries Qt needs)"
NO_DISPLAY_HINT = (
    "error: no display found (DISPLAY/WAYLAND_DISPLAY unset); run `xvfb-run python main.py` "
    "or set QT_QPA_PLATFORM=offscreen (or use `python main.py bench ...` headless)"
)


def display_available(env: dict | None = None, platform: str | None = None) -> bool:
    """On Linux a window needs X11 or Wayland, unless a Qt platform is chosen explicitly."""
    env = os.environ if env is None else env
    platform = platform or sys.platform
    if not platform.startswith("linux"):
        return True
    return bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY") or env.get("QT_QPA_PLATFORM"))


def create_app(argv: list[str] | None = None):
    """The QApplication (created once), themed to follow the system."""
    from PySide6.QtWidgets import QApplication

    from whistle_stop.backends import __version__
    from whistle_stop.backends.cli.desktop_entry import DESKTOP_ID

    from .settings import APPLICATION, ORGANISATION
    from .theme import apply_theme, icon

    app = QApplication.instance()
    if app is None:
        app = QApplication(argv if argv is not None else sys.argv[:1])
    app.setOrganizationName(ORGANISATION)
    app.setApplicationName(APPLICATION)
    app.setApplicationDisplayName("whistle-stop")
    app.setApplicationVersion(__version__)
    app.setDesktopFileName(DESKTOP_ID)  # Wayland app id = the menu entry of `--install-desktop-entry`
    app.setWindowIcon(icon("app"))
    apply_theme(app)
    return app


def run_app(argv: list[str] | None = None) -> int:
    if not display_available():
        print(NO_DISPLAY_HINT, file=sys.stderr)
        return EXIT_NO_DISPLAY
    from whistle_stop.backends.report.qt_start import qt_start_problem

    # Where Qt cannot start it aborts the process: ask a child first (~0.1 s). Only on Linux, where a
    # DISPLAY may not answer or an X11 library may be missing; elsewhere a second application would flash.
    problem = qt_start_problem() if sys.platform.startswith("linux") else None
    if problem is not None:
        print(f"error: cannot open the window: {problem}; {WINDOW_HINT}", file=sys.stderr)
        return EXIT_NO_DISPLAY
    try:
        app = create_app(argv)
    except Exception as exc:  # e.g. a Qt platform plugin that cannot load
        print(
            f"error: cannot start the GUI: {exc}; try `xvfb-run python main.py` or QT_QPA_PLATFORM=offscreen",
            file=sys.stderr,
        )
        return EXIT_NO_DISPLAY
    from .about_dialog import add_about_action
    from .main_window import MainWindow

    window = MainWindow()
    add_about_action(window)
    window.show()
    return int(app.exec())
