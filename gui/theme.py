"""Dark and light themes that follow the system, for Qt widgets and pyqtgraph alike."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QPainter, QPalette
from PySide6.QtWidgets import QApplication, QProxyStyle, QStyle, QStyleFactory, QStyleOption, QWidget

from whistle_stop.backends.report.colours import run_colours
from whistle_stop.backends.storage.paths import RESOURCES

ICONS_DIR: Path = RESOURCES / "icons"


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


LIGHT = Theme(
    False,
    "#ffffff",
    "#303030",
    "#202124",
    "#8a8f98",
    "#ffffff",
    "#d5d8dc",
    "#fff4d6",
    "#6b4e00",
    "#c62828",
    "#ffcdd2",
    "#2e7d32",
)
DARK = Theme(
    True,
    "#1e1f22",
    "#c8c8c8",
    "#e6e6e6",
    "#80868f",
    "#232428",
    "#3a3c41",
    "#4a3b12",
    "#ffe2a0",
    "#ff6b6b",
    "#7a2e2e",
    "#7bd88f",
)


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


class _FramedChecks(QProxyStyle):
    """Fusion with every check box framed in `frame`: Fusion draws the frame a shade darker than the
    window's colour, which a dark theme's lists (their base as dark) hide, unchecked engines and all."""

    def __init__(self, frame: str) -> None:
        super().__init__(QStyleFactory.create("Fusion"))
        self.frame = QColor(frame)

    def drawPrimitive(
        self,
        element: QStyle.PrimitiveElement,
        option: QStyleOption,
        painter: QPainter,
        widget: QWidget | None = None,
    ) -> None:
        super().drawPrimitive(element, option, painter, widget)
        if element in (
            QStyle.PrimitiveElement.PE_IndicatorCheckBox,
            QStyle.PrimitiveElement.PE_IndicatorItemViewItemCheck,
        ):
            painter.save()
            painter.setPen(self.frame)
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRect(option.rect.adjusted(0, 0, -1, -1))
            painter.restore()


def apply_theme(app: QApplication) -> Theme:
    """Fusion with a palette matching the system scheme, and pyqtgraph's defaults to match."""
    theme = current_theme(app)
    app.setStyle(_FramedChecks(theme.muted))
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
        QPalette.ColorRole.Window: "#2b2d30",
        QPalette.ColorRole.WindowText: "#e6e6e6",
        QPalette.ColorRole.Base: "#1e1f22",
        QPalette.ColorRole.AlternateBase: "#26282b",
        QPalette.ColorRole.ToolTipBase: "#3c3f44",
        QPalette.ColorRole.ToolTipText: "#f0f0f0",
        QPalette.ColorRole.Text: "#e6e6e6",
        QPalette.ColorRole.Button: "#35373b",
        QPalette.ColorRole.ButtonText: "#e6e6e6",
        QPalette.ColorRole.BrightText: "#ff6b6b",
        QPalette.ColorRole.Highlight: "#3d7bd9",
        QPalette.ColorRole.HighlightedText: "#ffffff",
        QPalette.ColorRole.Link: "#6ea8fe",
        QPalette.ColorRole.PlaceholderText: "#80868f",
    }
    for role, colour in colours.items():
        palette.setColor(role, QColor(colour))
    for role in (QPalette.ColorRole.WindowText, QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText):
        palette.setColor(QPalette.ColorGroup.Disabled, role, QColor("#6c7078"))
    return palette


def engine_colours(names: list[str], theme: Theme | None = None) -> dict[str, QColor]:
    """A colour per engine of one run, in the run's order (backends/report/colours.py): distinct up
    to sixteen engines and legible on the theme's background."""
    dark = (theme or current_theme()).dark
    return {name: QColor(colour) for name, colour in run_colours(names, dark).items()}


def icon(name: str) -> QIcon:
    path = ICONS_DIR / f"{name}.svg"
    return QIcon(str(path)) if path.exists() else QIcon()
