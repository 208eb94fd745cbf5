"""Per-token charts: latency vs token index, tokens vs time (the race), and the ITL histogram.

Curves are fed whole numpy arrays once per tick (`setData`), clipped to the view and
downsampled automatically so a 1,000-token trace per engine costs the same as a short one.
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pyqtgraph as pg
import pyqtgraph.exporters
from PySide6.QtCore import QPointF, QSizeF
from PySide6.QtGui import QColor

from .axes import CountAxis, LogAxis
from .png_export import save_png
from .side_legend import SideLegend
from .theme import Theme, current_theme


class _Chart(pg.PlotWidget):
    """A plot with one curve per engine, themed, with a legend and a PNG export. Its axes show no
    values until there is data: an empty plot's 0 to 1 range means nothing."""

    def __init__(self, title: str, x_label: str, y_label: str, axes: dict[str, pg.AxisItem] | None = None) -> None:
        super().__init__(axisItems=axes or {})
        self.colours: dict[str, QColor] = {}
        self.curves: dict[str, pg.PlotDataItem] = {}
        self.shown, self.mark = title, ""  # mark: what the whole session's charts are ("race mode: contended")
        self.plotItem.setTitle(title)
        self.plotItem.setLabel("bottom", x_label)
        self.plotItem.setLabel("left", y_label)
        for side in ("bottom", "left"):  # the labels carry their units: no "(x0.001)" scale beside them
            self.plotItem.getAxis(side).enableAutoSIPrefix(False)
        self.plotItem.showGrid(x=True, y=True, alpha=0.15)
        self.legend = SideLegend(self.plotItem)
        self.legend.setVisible(False)  # an empty legend is an empty box: shown once there are engines
        self._live: int | None = None
        self._view: list[float] | None = None
        self._pending: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # drawn when the tab is shown
        self.show_values(False)
        self.apply_theme(current_theme())

    def set_mark(self, mark: str) -> None:
        """A word on the title for every run of the session (a race's timings are contended): the title
        goes into an exported PNG, where the window's banner does not."""
        self.mark = mark
        self._set_title(self.shown)

    def _set_title(self, title: str) -> None:
        self.shown = title
        self.plotItem.titleLabel.setText(f"{title} · {self.mark}" if self.mark else title, color=self.theme.plot_fg)

    def show_values(self, shown: bool) -> None:
        """Tick values on both axes (off while the chart holds no data)."""
        for side in ("bottom", "left"):
            self.plotItem.getAxis(side).setStyle(showValues=shown)

    @property
    def values_shown(self) -> bool:
        return bool(self.plotItem.getAxis("bottom").style["showValues"])

    def apply_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.setBackground(theme.plot_bg)
        for side in ("bottom", "left"):
            axis = self.plotItem.getAxis(side)
            axis.setPen(theme.plot_fg)
            axis.setTextPen(theme.plot_fg)
        self._set_title(self.shown)
        self.legend.setLabelTextColor(theme.plot_fg)
        self.legend.setBrush(
            pg.mkBrush(QColor(theme.plot_bg).darker(105) if not theme.dark else QColor(theme.plot_bg).lighter(130))
        )

    def set_live(self, length: int | None) -> None:
        """While tokens stream (length = tokens per run), the view grows in steps instead of
        auto-fitting every tick: an axis whose range moves is re-rendered, and that is most of
        a tick's painting. None: fit the data again (a finished or loaded run)."""
        self._live = length
        self._view = None  # [x0, x1, y0, y1] in view coordinates
        self.plotItem.vb.enableAutoRange(x=not length, y=not length)

    def _follow(
        self, x_hi: float, y_lo: float, y_hi: float, fixed_x: float | None = None, fixed_y: float | None = None
    ) -> None:
        if not self._live:
            return
        view = self._view
        if view is None or x_hi > view[1] or y_lo < view[2] or y_hi > view[3]:
            x1 = fixed_x if fixed_x else max(x_hi * 1.5, view[1] if view else 0.0, 1e-3)
            if fixed_y:
                y0, y1 = 0.0, fixed_y
            else:
                span = max(y_hi - y_lo, 1e-6)
                y0 = min(y_lo, view[2] if view else y_lo) - 0.25 * span
                y1 = max(y_hi, view[3] if view else y_hi) + 0.25 * span
            self._view = [0.0, x1, y0, y1]
            self.plotItem.setRange(xRange=(0, x1), yRange=(y0, y1), padding=0.02)

    def _draw(self, name: str, x: np.ndarray, y: np.ndarray) -> None:
        """Draw now if this chart is on screen; a hidden tab only keeps the latest arrays."""
        if name not in self.curves:
            return
        if len(x):
            self.show_values(True)
        if self.isVisible():
            self.curves[name].setData(x, y)
            self._after_draw(x, y)
        else:
            self._pending[name] = (x, y)

    def _after_draw(self, x: np.ndarray, y: np.ndarray) -> None:
        """Keep a live view following the data (see set_live)."""

    def flush_pending(self) -> None:
        pending, self._pending = self._pending, {}
        for name, (x, y) in pending.items():
            self.curves[name].setData(x, y)
            self._after_draw(x, y)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.flush_pending()

    def point_count(self, name: str) -> int:
        if name in self._pending:
            return len(self._pending[name][0])
        x, _ = self.curves[name].getData()
        return 0 if x is None else len(x)

    def set_engines(self, colours: dict[str, QColor]) -> None:
        self._pending.clear()
        self.plotItem.clear()
        self.legend.clear()
        self.show_values(False)
        self.colours = dict(colours)
        self.curves = {name: self._curve(name, colour) for name, colour in colours.items()}
        self.legend.setVisible(bool(colours))

    def set_run(self, name: str, run: str) -> None:
        """Which run `name`'s curve draws ("run 2 of 3"), beside its name in the legend, which goes
        into an exported PNG."""
        if name in self.curves:
            self.legend.set_text(self.curves[name], f"{name} · {run}" if run else name)

    def _curve(self, name: str, colour: QColor) -> pg.PlotDataItem:
        curve = self.plotItem.plot([], [], name=name, pen=pg.mkPen(colour, width=1.6))
        curve.setClipToView(True)
        curve.setDownsampling(auto=True, method="peak")
        return curve

    EXPORT_SIZE = QSizeF(1000, 480)  # its layout in a PNG (1400 x 672 pixels by default)

    def export_png(self, path: Path, width: int | None = None) -> None:
        """The chart's records, without what follows the mouse: hidden for the export, then as it was."""
        self.flush_pending()
        shown = [item for item in self.hover_items() if item.isVisible()]
        for item in shown:
            item.setVisible(False)
        try:
            save_png(self.plotItem, path, self.EXPORT_SIZE, width)
        finally:
            for item in shown:
                item.setVisible(True)

    def hover_items(self) -> tuple[pg.GraphicsObject, ...]:
        """What the chart draws where the mouse is (none here): on screen, never in an exported PNG."""
        return ()


class LatencyChart(_Chart):
    """Latency of every token of each engine's current (or last) run: token 0 is the TTFT."""

    def __init__(self) -> None:
        super().__init__(
            "Per-token latency (token 0 = time to first token)",
            "token index",
            "latency (ms)",
            {"left": LogAxis(orientation="left"), "bottom": CountAxis(orientation="bottom")},
        )
        self.plotItem.setLogMode(y=True)  # the first token includes the prompt: often 10x the rest
        self.texts: dict[str, list[str]] = {}
        self.values: dict[str, np.ndarray] = {}
        self._cursor = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen((128, 128, 128, 120)))
        self._label = pg.TextItem(anchor=(0, 0))
        self._hover = pg.SignalProxy(self.scene().sigMouseMoved, rateLimit=30, slot=self._on_mouse)

    def hover_items(self) -> tuple[pg.GraphicsObject, ...]:
        return self._cursor, self._label

    def set_engines(self, colours: dict[str, QColor]) -> None:
        super().set_engines(colours)
        self.texts, self.values = {}, {}
        for item in (self._cursor, self._label):
            self.plotItem.addItem(item, ignoreBounds=True)
            item.setVisible(False)

    def set_series(self, name: str, latency_ms: np.ndarray, texts: list[str]) -> None:
        """One point per token: x = token index, y = its latency in ms."""
        if name not in self.curves:
            return
        self.values[name] = latency_ms
        self.texts[name] = texts
        self._draw(name, np.arange(latency_ms.size), latency_ms)

    def _after_draw(self, x: np.ndarray, y: np.ndarray) -> None:
        positive = y[y > 0]
        if positive.size:  # the view is in log10 units
            self._follow(x.size, float(np.log10(positive.min())), float(np.log10(positive.max())), fixed_x=self._live)

    def _on_mouse(self, event) -> None:
        self.hover_at(event[0])

    def hover_at(self, position: QPointF) -> str:
        """Show the values under a scene position; returns the label's HTML ("" when hidden)."""
        view = self.plotItem.vb
        if not self.plotItem.sceneBoundingRect().contains(position) or not self.values:
            self._label.setVisible(False)
            self._cursor.setVisible(False)
            return ""
        index = int(round(view.mapSceneToView(position).x()))
        lines = []
        for name, values in self.values.items():
            if 0 <= index < values.size:
                texts = self.texts.get(name, [])
                token = html.escape(repr(texts[index]) if index < len(texts) else "")
                colour = self.colours[name].name()
                lines.append(
                    f"<span style='color:{colour}'>■</span> {html.escape(name)}: <b>{values[index]:.2f} ms</b> {token}"
                )
        if not lines:
            self._label.setVisible(False)
            return ""
        text = (
            f"<div style='color:{self.theme.plot_fg}; background:{self.theme.plot_bg};'>"
            f"token {index}<br>{'<br>'.join(lines)}</div>"
        )
        self._label.setHtml(text)
        _, (_, y1) = view.viewRange()
        self._cursor.setPos(index)
        self._label.setPos(index, y1)
        self._cursor.setVisible(True)
        self._label.setVisible(True)
        return text


class RaceChart(_Chart):
    """Tokens generated vs time since each run's request started: the race."""

    def __init__(self) -> None:
        super().__init__(
            "Tokens generated vs time since the request",
            "time since request start (s)",
            "tokens",
            {"left": CountAxis(orientation="left")},
        )

    def set_series(self, name: str, seconds: np.ndarray) -> None:
        self._draw(name, seconds, np.arange(1, seconds.size + 1))

    def _after_draw(self, x: np.ndarray, y: np.ndarray) -> None:
        if x.size:
            self._follow(float(x[-1]), 0.0, float(x.size), fixed_y=self._live)


class HistogramChart(_Chart):
    """Distribution of inter-token latency over the measured runs (warm-ups excluded)."""

    TITLE = "Inter-token latency, measured runs"

    def __init__(self) -> None:
        super().__init__(
            self.TITLE,
            "inter-token latency (ms)",
            "tokens",
            {"left": CountAxis(orientation="left")},
        )

    def _curve(self, name: str, colour: QColor) -> pg.PlotDataItem:
        return self.plotItem.plot([], [], name=name, pen=pg.mkPen(colour, width=1.6))  # step data: no clipping

    def set_data(self, itl_ms: dict[str, np.ndarray]) -> None:
        values = [v for v in itl_ms.values() if v.size]
        for curve in self.curves.values():
            curve.setData([], [])
        self.show_values(bool(values))
        self._set_title(self.TITLE)
        if not values:
            return
        everything = np.concatenate(values)
        high = float(np.percentile(everything, 99.5))  # a few stalls must not squash the shape
        low = float(everything.min())
        if high <= low:
            high = low + 1e-3
        over = int((everything > high).sum())
        if over:  # off the axis, said so: piled into the last bin they would read as a latency
            self._set_title(f"{self.TITLE} · {over} {'gap' if over == 1 else 'gaps'} over {high:.3g} ms not drawn")
        edges = np.histogram_bin_edges(everything, bins=min(80, max(20, everything.size // 8)), range=(low, high))
        for name, data in itl_ms.items():
            if name not in self.curves or not data.size:
                continue
            counts, _ = np.histogram(data[data <= high], bins=edges)
            colour = QColor(self.colours[name])
            fill = QColor(colour)
            fill.setAlpha(70)
            self.curves[name].setData(edges, counts, stepMode="center", fillLevel=0, brush=pg.mkBrush(fill))
