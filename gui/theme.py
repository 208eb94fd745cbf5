"""Dark and light themes that follow the system, for Qt widgets and pyqtgraph alike."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QPalette
from PySide6.QtWidgets import QApplication

from whistle_stop.backends.storage.paths import RESOURCES

ICONS_DIR: Path = RESOURCES / "icons"

# Distinct on dark and light backgrounds (Tableau 10, then a few more).
PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7",
           "#9c755f", "#bab0ac", "#1f9e89", "#d37295", "#8cd17d", "#86bcb6", "#a0cbe8", "#ffbe7d",
           "#b6992d", "#f1ce63", "#499894", "#fabfd2", "#79706e", "#d4a6c8", "#e377c2", "#17becf"]


@dataclass(frozen=True)
class Theme:
    dark: bool
    plot_bg: str
    plot_fg: str
    text: str
    muted: str  # the prompt in the panes, secondary labels
    pane_bg: str
    border: str
    warn_bg: str  # banners: notices, race-mode caveat
    warn_fg: str
    error: str
    diverge_bg: str  # the first token that differs from the reference
    ok: str


LIGHT = Theme(False, "#ffffff", "#303030", "#202124", "#8a8f98", "#ffffff", "#d5d8dc", "#fff4d6", "#6b4e00",
              "#c62828", "#ffcdd2", "#2e7d32")
DARK = Theme(True, "#1e1f22", "#c8c8c8", "#e6e6e6", "#80868f", "#232428", "#3a3c41", "#4a3b12", "#ffe2a0",
             "#ff6b6b", "#7a2e2e", "#7bd88f")


def system_is_dark(app: QGuiApplication) -> bool:
    """Qt 6.5+: the platform's colour scheme; elsewhere the palette's window lightness."""
    scheme = app.styleHints().colorScheme()
    if scheme == Qt.ColorScheme.Dark:
        return True
    if scheme == Qt.ColorScheme.Light:
        return False
    return app.palette().color(QPalette.ColorRole.Window).lightness() < 128


def current_theme(app: QGuiApplication | None = None) -> Theme:
    app = app or QGuiApplication.instance()
    return DARK if app is not None and system_is_dark(app) else LIGHT


def apply_theme(app: QApplication) -> Theme:
    """Fusion with a palette matching the system scheme, and pyqtgraph's defaults to match."""
    theme = current_theme(app)
    app.setStyle("Fusion")
    app.setPalette(_palette(theme))
    # No antialiasing: four 1,000-point curves redrawn 30 times a second must stay cheap.
    pg.setConfigOptions(background=theme.plot_bg, foreground=theme.plot_fg, antialias=False)
    return theme


def _palette(theme: Theme) -> QPalette:
    palette = QPalette()
    if not theme.dark:
        palette = QApplication.style().standardPalette() if QApplication.style() else QPalette()
        palette.setColor(QPalette.ColorRole.Window, QColor("#f3f4f6"))
        palette.setColor(QPalette.ColorRole.Base, QColor("#ffffff"))
        palette.setColor(QPalette.ColorRole.Highlight, QColor("#3d7bd9"))
        return palette
    colours = {
        QPalette.ColorRole.Window: "#2b2d30", QPalette.ColorRole.WindowText: "#e6e6e6",
        QPalette.ColorRole.Base: "#1e1f22", QPalette.ColorRole.AlternateBase: "#26282b",
        QPalette.ColorRole.ToolTipBase: "#3c3f44", QPalette.ColorRole.ToolTipText: "#f0f0f0",
        QPalette.ColorRole.Text: "#e6e6e6", QPalette.ColorRole.Button: "#35373b",
        QPalette.ColorRole.ButtonText: "#e6e6e6", QPalette.ColorRole.BrightText: "#ff6b6b",
        QPalette.ColorRole.Highlight: "#3d7bd9", QPalette.ColorRole.HighlightedText: "#ffffff",
        QPalette.ColorRole.Link: "#6ea8fe", QPalette.ColorRole.PlaceholderText: "#80868f",
    }
    for role, colour in colours.items():
        palette.setColor(role, QColor(colour))
    for role in (QPalette.ColorRole.WindowText, QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText):
        palette.setColor(QPalette.ColorGroup.Disabled, role, QColor("#6c7078"))
    return palette


def engine_colours(names: list[str], order: list[str]) -> dict[str, QColor]:
    """A stable colour per engine: its place in the full engine list, so hf is always the same blue."""
    out = {}
    for name in names:
        index = order.index(name) if name in order else len(order) + names.index(name)
        out[name] = QColor(PALETTE[index % len(PALETTE)])
    return out


def icon(name: str) -> QIcon:
    path = ICONS_DIR / f"{name}.svg"
    return QIcon(str(path)) if path.exists() else QIcon()
