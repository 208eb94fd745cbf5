"""A chart's legend in a column of its own beside the plot, where it covers no curve and still goes
into an exported PNG."""

from __future__ import annotations

import math
from collections.abc import Callable

import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, QSizeF, Qt


class _Column(pg.GraphicsWidget):
    """A cell of a plot's layout that says when its size changes (by an event: its geometryChanged
    signal also fires while Qt deletes it, after its Python side is gone)."""

    def __init__(self, on_resize: Callable[[], None]) -> None:
        super().__init__()
        self._on_resize = on_resize

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._on_resize()


class SideLegend(pg.LegendItem):
    """A plot's legend in a column of its own, right of the plot: no corner inside it is free of data
    for every session (late tokens fill the race's bottom right, a fast engine its top left), and a
    legend there hid a curve. It is the plot item's child, so an exported PNG has it."""

    MARGIN = 8  # px either side of it

    def __init__(self, plot: pg.PlotItem) -> None:
        self._widest = 0.0  # its column's width: it grows with the entries' labels, never shrinks but when cleared
        super().__init__(offset=None)
        # LegendItem keeps its size in pixels however its view is scaled; in a cell of the layout it is
        # scaled as the title and axes beside it, so an export wider than the chart on screen does not
        # shrink it against them (pyqtgraph's exporter scales the painter)
        self.setFlag(self.GraphicsItemFlag.ItemIgnoresTransformations, False)
        self.column = _Column(self._fit_columns)
        self.column.setMaximumWidth(0)
        # rows 1-3: from the view box's top to the bottom axis's foot, right of the right axis (column 2)
        plot.layout.addItem(self.column, 1, 3, 3, 1)
        self.setParentItem(self.column)
        plot.legend = self  # the curves plotted with a name are its entries

    def clear(self) -> None:
        self._widest = 0.0
        super().clear()

    def updateSize(self) -> None:
        """Fit its entries, and its column to it (none when it has no entries). The column does not
        narrow when a label does ("warm-up 1", then "run 1 of 3"): the plot beside it keeps its width."""
        # its layout's size hint, not LegendItem's sum of its labels' current widths (stale when one shrinks)
        size = self.layout.effectiveSizeHint(Qt.SizeHint.PreferredSize) if self.items else QSizeF(0, 0)
        self.setGeometry(QRectF(QPointF(self.MARGIN, 0), size))
        self._widest = max(self._widest, size.width() + 2 * self.MARGIN) if self.items else 0.0
        self.column.setMinimumWidth(self._widest)
        self.column.setMaximumWidth(self._widest)
        self._fit_columns()

    def _fit_columns(self) -> None:
        """Its entries in as many columns as its column's height needs (a dozen engines are taller
        than a short chart)."""
        if not self.items:
            return
        row = max(item.effectiveSizeHint(Qt.SizeHint.PreferredSize).height() for entry in self.items for item in entry)
        room = self.column.height()
        if room < row:  # not laid out yet
            return
        columns = math.ceil(len(self.items) / max(1, int(room // row)))
        if columns != self.columnCount:
            self._widest = 0.0  # narrower with more columns, wider with fewer
            self.setColumnCount(columns)

    def set_text(self, item: pg.GraphicsObject, text: str) -> None:
        label = self.getLabel(item)
        if label is not None and label.text != text:
            label.setText(text)
            self.updateSize()
