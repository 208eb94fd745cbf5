"""Figures from `whistle_stop.backends.report.figures` drawn with `whistle_stop.backends.report.plots.draw`
into the window's own plots, so the Sweep, Quality, Profile and Load tabs show exactly what a report or
`sweep --out` renders, and export them as the report names them."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pyqtgraph as pg
from PySide6.QtCore import QSizeF, QTimer, Signal
from PySide6.QtGui import QColor, QResizeEvent

from whistle_stop.backends.report import plots
from whistle_stop.backends.report.figures import Figure, with_data

from .png_export import save_png
from .theme import Theme, current_theme

TITLE_CHARS = 32
RESIZE_SETTLE_MS = 120  # a drag of the window or a splitter redraws once it pauses, not at every pixel


def recolour(plot_item: pg.PlotItem, figure: Figure, colours: dict[str, QColor]) -> None:
    """Give each series its engine's colour (the panes' colour) instead of plots' palette.

    `plots.draw` colours series i with `plots.colour(i)`; every item it drew in that colour
    (points, curve, error bars, labels) is repainted with the series' engine colour."""
    wanted = {plots.colour(i): colours[s.name] for i, s in enumerate(figure.series) if s.name in colours}
    for item in plot_item.items:
        if isinstance(item, pg.PlotDataItem):
            pen = item.opts.get("pen")
            # a line without symbols (a whisker) still has pyqtgraph's default symbol brush: its pen tells
            brush = item.opts.get("symbolBrush") if item.opts.get("symbol") is not None else None
            rgb = _rgb(pg.mkBrush(brush).color()) if brush is not None else _rgb(pg.mkPen(pen).color())
            if rgb in wanted:
                colour = wanted[rgb]
                if pen is not None:
                    item.setPen(pg.mkPen(colour, width=pg.mkPen(pen).widthF()))
                item.setSymbolBrush(pg.mkBrush(colour))
                item.setSymbolPen(pg.mkPen(colour))
        elif isinstance(item, pg.ErrorBarItem):
            rgb = _rgb(pg.mkPen(item.opts.get("pen")).color())
            if rgb in wanted:
                item.setData(pen=pg.mkPen(wanted[rgb], width=1.5))
        elif isinstance(item, pg.TextItem) and _rgb(item.color) in wanted:
            item.setColor(wanted[_rgb(item.color)])


def wrap_title(title: str) -> str:
    """Two balanced lines when the title is long (its width is the plot's minimum width)."""
    if len(title) <= TITLE_CHARS:
        return title
    return "<br>".join(textwrap.wrap(title, max(len(title) // 2 + 4, max(map(len, title.split())))))


def _rgb(colour: QColor) -> tuple[int, int, int]:
    return colour.red(), colour.green(), colour.blue()


class FigureGrid(pg.GraphicsLayoutWidget):
    """One row of plots; `show_figures` redraws them all from Figure data, and a resize draws them again
    (the legend's place and the bars' names depend on the plot's size)."""

    changed = Signal()  # figures shown or cleared: what an export would write changed

    def __init__(self, count: int, fit_titles: bool = True) -> None:
        """`fit_titles`: titles wrapped in two lines of 10pt, so three plots fit beside each other; False:
        as `plots.draw` sets them, one line as a report's PNG has them (`render_png`)."""
        super().__init__()
        self.fit_titles = fit_titles
        self._resized = QTimer(self, singleShot=True, interval=RESIZE_SETTLE_MS)
        self._resized.timeout.connect(self._redraw_resized)
        self.plots = [self.addPlot(row=0, col=i) for i in range(count)]
        for plot in self.plots:
            for side in ("left", "bottom"):
                # The labels carry their unit ("ms per step"): under 1, pyqtgraph's auto prefix would
                # multiply the ticks by 1000 and add "(x0.001)", so 0.5 ms read as "500".
                plot.getAxis(side).enableAutoSIPrefix(False)
        self.figures: list[Figure | None] = [None] * count
        self.colours: dict[str, QColor] = {}
        self.apply_theme(current_theme())

    def show_figures(self, figures: list[Figure], colours: dict[str, QColor] | None = None) -> None:
        self.colours = dict(colours or {})
        for index, figure in enumerate(figures[: len(self.plots)]):
            self.figures[index] = figure
        self._redraw()
        self.changed.emit()

    def _redraw(self) -> None:
        """Draw the figures again at the plots' present size (plots.draw fits the range around its
        legend and wraps the bars' names for the size it finds)."""
        for plot, figure in zip(self.plots, self.figures):
            if figure is None:
                continue
            # fit_titles: the title's width is the plot's minimum width; wrapped, three fit side by side
            title, size = (wrap_title(figure.title), "10pt") if self.fit_titles else (None, None)
            plots.draw(plot, figure, foreground=self.theme.plot_fg, title=title, title_size=size)
            # LegendItem keeps its size in pixels however the painter is scaled: an export wider than the
            # plot shrank it against the title and axes
            plot.legend.setFlag(plot.legend.GraphicsItemFlag.ItemIgnoresTransformations, False)
            if self.colours:
                recolour(plot, figure, self.colours)

    def resizeEvent(self, event: QResizeEvent | None) -> None:
        super().resizeEvent(event)
        if event is not None:  # None: pyqtgraph's own call while it builds the view, before the plots exist
            self._resized.start()  # restarted by each resize of a drag

    def _redraw_resized(self) -> None:
        if self.closed:  # pyqtgraph's close() cleared the scene: no plots to draw into
            return
        self.ci.layout.activate()  # the plots at the grid's new size before they are measured
        self._redraw()

    def clear_figures(self) -> None:
        for index, plot in enumerate(self.plots):
            self.figures[index] = None
            plots.blank_plot(plot)  # its title, axes and legend's column too (the legend may sit beside it)
        self.changed.emit()

    def apply_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.setBackground(theme.plot_bg)
        self._redraw()  # the text and axes take the new foreground

    def export_png(self, path: Path, width: int | None = None) -> None:
        """Each plot laid out at a report figure's size (`plots.render_png`'s), whatever its size here."""
        plot_width, height = plots.DEFAULT_SIZE
        save_png(self.ci, path, QSizeF(plot_width * len(self.plots), height), width, redraw=self._redraw)

    def exportable(self) -> list[Figure]:
        """The figures a report would draw: those with something to draw."""
        return with_data(f for f in self.figures if f is not None)[0]

    def export_figure(self, figure: Figure, path: Path, width: int | None = None) -> None:
        """One figure as the report writes it: alone in a plot laid out at a report figure's size
        (`export_png`), in this grid's theme and colours; OSError if it was not written."""
        # off screen: the plots here keep their size, and a neighbour stays out; its title as the report's
        single = FigureGrid(1, fit_titles=False)
        try:
            single.apply_theme(self.theme)
            single.show_figures([figure], self.colours)
            single.export_png(path, width)
        finally:
            single.deleteLater()
