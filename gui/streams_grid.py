"""The centre: one StreamPane per engine in a grid that reflows with their count and the width,
under a line saying what is being run (model, prompt, mode) and any caveat."""

from __future__ import annotations

import math

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QResizeEvent
from PySide6.QtWidgets import QGridLayout, QLabel, QVBoxLayout, QWidget

from .stream_pane import StreamPane
from .theme import Theme, current_theme

MIN_PANE_WIDTH = 340


def grid_columns(count: int, width: int) -> int:
    """Up to 3 panes side by side; more in a near-square grid (4 make 2x2); fewer if too narrow."""
    if count <= 1:
        return 1
    fit = max(1, width // MIN_PANE_WIDTH)
    columns = min(fit, count if count <= 3 else math.ceil(math.sqrt(count)))
    rows = math.ceil(count / columns)
    return math.ceil(count / rows)  # balance: 5 in 3 columns -> 3 + 2, not 3 + 3 - 1


class StreamsGrid(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.panes: dict[str, StreamPane] = {}
        self._columns = 0
        outer = QVBoxLayout(self)
        outer.setContentsMargins(8, 8, 8, 8)
        outer.setSpacing(6)
        self.info = QLabel()
        self.info.setObjectName("runInfo")
        self.info.setWordWrap(True)
        self.banner = QLabel()
        self.banner.setObjectName("banner")
        self.banner.setWordWrap(True)
        self.banner.setVisible(False)
        self.placeholder = QLabel(
            "Choose engines on the left and press Run (Ctrl+Return).\nEach engine streams its text here, side by side."
        )
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.placeholder.setObjectName("muted")
        self._grid_host = QWidget()
        self._grid = QGridLayout(self._grid_host)
        self._grid.setContentsMargins(0, 0, 0, 0)
        self._grid.setSpacing(8)
        outer.addWidget(self.info)
        outer.addWidget(self.banner)
        outer.addWidget(self.placeholder, 1)
        outer.addWidget(self._grid_host, 1)
        self._grid_host.setVisible(False)
        self.apply_theme(current_theme())

    def apply_theme(self, theme: Theme) -> None:
        self.banner.setStyleSheet(
            f"background: {theme.warn_bg}; color: {theme.warn_fg}; border-radius: 4px; padding: 5px 8px;"
        )
        self.info.setStyleSheet(f"color: {theme.muted};")
        for pane in self.panes.values():
            pane.apply_theme(theme)

    def set_engines(self, engines: list[tuple[str, QColor, str]]) -> None:
        """Replace the panes: (name, colour, description) in display order."""
        for pane in self.panes.values():
            self._grid.removeWidget(pane)
            pane.deleteLater()
        self.panes = {
            name: StreamPane(name, colour, description, self._grid_host) for name, colour, description in engines
        }
        self._columns = 0
        self.placeholder.setVisible(not self.panes)
        self._grid_host.setVisible(bool(self.panes))
        self._reflow()

    def set_info(self, text: str) -> None:
        self.info.setText(text)

    def set_banner(self, text: str) -> None:
        self.banner.setText(text)
        self.banner.setVisible(bool(text))

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._reflow()

    def _reflow(self) -> None:
        columns = grid_columns(len(self.panes), self.width())
        if columns == self._columns:
            return
        self._columns = columns
        for pane in self.panes.values():
            self._grid.removeWidget(pane)
        for column in range(self._grid.columnCount()):
            self._grid.setColumnStretch(column, 0)
        for index, pane in enumerate(self.panes.values()):
            self._grid.addWidget(pane, index // columns, index % columns)
        for column in range(columns):
            self._grid.setColumnStretch(column, 1)
        for row in range(self._grid.rowCount()):
            self._grid.setRowStretch(row, 1 if row < math.ceil(len(self.panes) / columns) else 0)
