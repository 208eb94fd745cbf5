"""Draw `figures.Figure`s with pyqtgraph: into a PlotItem (the GUI) or a PNG file (reports, CLI).

Importing this module imports no Qt: pyqtgraph is imported inside the functions, and a
QApplication is made (offscreen when there is no display) only when a PNG is rendered.
"""

from __future__ import annotations

import math
import os
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

from . import legend_place
from .colours import LIGHT, category_colour, rgb
from .figures import Colouring, Figure
from .legend_place import Box, Corner, Segment

PALETTE = [rgb(c) for c in LIGHT]  # the engines' colours on white, in the run's order
LIMIT_COLOUR = (90, 90, 90)
DEFAULT_SIZE = (900, 520)
EMPTY_CHARS = 28  # an empty figure's line at most, wrapped: the window's plots sit three abreast
LEGEND_COLUMN_SHARE = 0.5  # of its plot's width, at most, for a legend put beside the plot
LEGEND_WRAP_CHARS, MIN_WRAP_CHARS = 40, 12  # the longest and shortest lines its labels wrap to, then
LEGEND_COLUMN = "legend column"  # the plot layout's cell right of the plot that holds a legend put outside


def colour(index: int) -> tuple[int, int, int]:
    return PALETTE[index % len(PALETTE)]


def series_colour(figure: Figure, index: int) -> tuple[int, int, int]:
    """Series `index`'s colour: by its place (engines, as the window's panes), or by its name
    (categories: 'attention' keeps its colour whichever categories a run shows)."""
    if figure.colouring is Colouring.BY_KEY:
        return rgb(category_colour(figure.series[index].name))
    return colour(index)


def ensure_qt_app():
    """The running QApplication, or a new one; offscreen when no display is available."""
    from pyqtgraph.Qt import QtWidgets

    app = QtWidgets.QApplication.instance()
    if app is None and threading.current_thread() is not threading.main_thread():
        # Qt makes its application in the main thread only: one made here dies with this thread's event
        # loop, and every timer of a window made later (in the main thread) silently never fires
        raise RuntimeError("PNG figures are rendered in the main thread (Qt's application lives there)")
    if app is None:
        display = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
        headless = sys.platform.startswith("linux") and not display
        if headless and not os.environ.get("QT_QPA_PLATFORM"):
            os.environ["QT_QPA_PLATFORM"] = "offscreen"
        app = QtWidgets.QApplication(sys.argv[:1])
    return app


def clear_plot(plot_item) -> None:
    """A PlotItem emptied of what `draw` drew: its items, its legend's entries, and the legend back in the
    plot with its column beside it closed (the last figure drawn there may have put it outside)."""
    plot_item.clear()
    if plot_item.legend is not None:
        plot_item.legend.clear()
        _legend_inside(plot_item)


def blank_plot(plot_item) -> None:
    """A PlotItem as if nothing had been drawn in it: `clear_plot`, and no title, axis names, named ticks
    or log axes left from the last figure (a cleared tab's plot named a chart it no longer held)."""
    clear_plot(plot_item)
    plot_item.setTitle(None)
    for side in ("bottom", "left"):
        axis = plot_item.getAxis(side)
        axis.setTicks(None)
        axis.setLabel("")
        axis.showLabel(False)
    plot_item.setLogMode(x=False, y=False)


def draw(
    plot_item, figure: Figure, foreground=(30, 30, 30), title: str | None = None, title_size: str | None = None
) -> None:
    """Draw `figure` into a pyqtgraph PlotItem (cleared first): the GUI calls this with its own, and its
    own `title` (the figure's, wrapped) and `title_size`, set before the legend is placed: a title set
    after moved the plot's view under a legend placed for another height."""
    import numpy as np
    import pyqtgraph as pg
    from pyqtgraph.Qt import QtCore

    clear_plot(plot_item)
    if plot_item.legend is None:
        plot_item.addLegend(offset=(-10, 10))
    dark = sum(pg.mkColor(foreground).getRgb()[:3]) > 384  # light text: the window's dark theme
    backdrop = (30, 31, 34, 200) if dark else (255, 255, 255, 200)
    plot_item.legend.setLabelTextColor(foreground)  # this figure's theme, not the first one's
    plot_item.legend.setBrush(backdrop)  # legible where a curve runs under it
    plot_item.legend.setColumnCount(_legend_columns(figure)[0])
    title_style = {"color": foreground, **({"size": title_size} if title_size else {})}
    plot_item.setTitle(figure.title if title is None else title, **title_style)
    for side, text in (("bottom", figure.x_label), ("left", figure.y_label)):
        axis = plot_item.getAxis(side)
        axis.setTicks(None)  # the axis's own, unless this figure names them (categories, log axes)
        axis.setPen(pg.mkPen(foreground))
        axis.setTextPen(pg.mkPen(foreground))
        # the labels carry their units in words: a scale pyqtgraph appends to small values would read
        # "seconds (x0.001)" over ticks of 400, and "engine (x0.001)" under the bars' names. Turning it
        # off keeps a scale pyqtgraph takes from the axis's present range (a plot the window draws
        # again: 0.7 ms left ticks of 1000 for a 1.2 ms step) unless the label is hidden then.
        axis.showLabel(False)
        axis.enableAutoSIPrefix(False)
        plot_item.setLabel(side, text, color=pg.mkColor(foreground).name())
    plot_item.showGrid(x=True, y=True, alpha=0.15)
    log = figure.log_axes
    plot_item.setLogMode(x=log, y=log)  # every figure sets it: the GUI draws several figures into one item
    # where it goes when the plot is not laid out yet (nothing to measure): log-log curves rise to the top right
    corner = Corner.TOP_LEFT if log else Corner.TOP_RIGHT
    plot_item.legend.anchor(itemPos=corner.value, parentPos=corner.value, offset=corner.offset())
    n_series = max(1, len(figure.series))
    labelled: list[list] = []  # each series' point labels
    if figure.kind == "stacked":
        _draw_stacked(plot_item, figure, foreground)
    for index, series in enumerate(figure.series if figure.kind != "stacked" else []):
        if not series.y:
            continue
        x, y = np.asarray(series.x, float), np.asarray(series.y, float)
        err = np.asarray(series.err or [0.0] * len(y), float)
        err_low = np.asarray(series.err_low, float) if len(series.err_low) == len(y) else err  # asymmetric intervals
        rgb = series_colour(figure, index)
        if figure.kind == "bar" and n_series == 1:  # one group: each bar is an engine, in its colour
            brushes = [pg.mkBrush(*colour(int(round(xi)))) for xi in x]
            plot_item.addItem(pg.BarGraphItem(x=x, height=y, width=0.7, brushes=brushes, pen=pg.mkPen(None)))
            rgb = foreground  # the whiskers: one colour over bars of every colour
        elif figure.kind == "bar":
            width = 0.8 / n_series
            x = x - 0.4 + width * (index + 0.5)
            plot_item.addItem(
                pg.BarGraphItem(x=x, height=y, width=width * 0.9, brush=pg.mkBrush(*rgb), pen=pg.mkPen(rgb))
            )
            plot_item.legend.addItem(pg.BarGraphItem(x=[0], height=[0], width=1, brush=pg.mkBrush(*rgb)), series.name)
        elif figure.kind == "scatter":
            plot_item.plot(
                x, y, pen=None, symbol="o", symbolSize=11, symbolBrush=pg.mkBrush(*rgb), symbolPen=pg.mkPen(rgb)
            )  # labelled at the point: no legend entry
            labelled.append(_label_points(plot_item, x, y, series.labels, rgb))
        else:
            plot_item.plot(
                x,
                y,
                pen=pg.mkPen(rgb, width=2),
                symbol="o",
                symbolSize=6,
                symbolBrush=pg.mkBrush(*rgb),
                symbolPen=pg.mkPen(rgb),
                name=series.name,
            )
            labelled.append(_label_points(plot_item, x, y, series.labels, rgb, log))  # e.g. a load curve's c=N
        if series.x_whiskers:
            _draw_whiskers(plot_item, series, rgb, tick=0.02 * max(_top(figure), 1e-9))
        if np.any(err > 0) or np.any(err_low > 0):
            beam = 0.15 / n_series if figure.kind == "bar" else _beam(figure)
            if log:
                x, y, err, err_low = log_error_bars(x, y, err, err_low)
            plot_item.addItem(
                pg.ErrorBarItem(x=x, y=y, top=err, bottom=err_low, beam=beam, pen=pg.mkPen(rgb, width=1.5))
            )
    if figure.empty:  # why, in the middle of the view (no values on its axes, no limit lines)
        plot_item.layout.activate()  # the view's width, where the plot is laid out (0 where not yet)
        width = plot_item.getViewBox().width()
        fits = int(width / CHAR_PX) - 2 if width else EMPTY_CHARS
        reason = "\n".join(textwrap.wrap(figure.empty_reason, max(MIN_WRAP_CHARS, min(EMPTY_CHARS, fits))))
        plot_item.addItem(pg.TextItem(reason, color=foreground, anchor=(0.5, 0.5)))
        plot_item.getViewBox().setRange(xRange=(-1, 1), yRange=(-1, 1), padding=0)
        for side in ("bottom", "left"):
            plot_item.getAxis(side).setTicks([[]])
        return
    for index, limit in enumerate(figure.limits):
        if limit.x:  # a curve: dashed through its points, named in the legend (curves may lie close)
            styles = (QtCore.Qt.PenStyle.DashLine, QtCore.Qt.PenStyle.DotLine, QtCore.Qt.PenStyle.DashDotLine)
            pen = pg.mkPen(LIMIT_COLOUR, width=1.5, style=styles[index % len(styles)])
            plot_item.plot(np.asarray(limit.x, float), np.asarray(limit.y, float), pen=pen, name=limit.label)
            continue
        line = pg.InfiniteLine(
            pos=math.log10(limit.value) if log and limit.value > 0 else limit.value,  # a view coordinate
            angle=0,
            pen=pg.mkPen(LIMIT_COLOUR, width=1.5, style=QtCore.Qt.PenStyle.DashLine),
            label=limit.label,
            labelOpts={
                "position": 0.02 + 0.33 * (index % 3),  # staggered:
                # lines may lie close
                "color": LIMIT_COLOUR,
                "anchors": [(0, 1), (0, 1)],
                "fill": backdrop,  # legible where curves run through it (a floor sits among them)
            },
        )
        plot_item.addItem(line)
    if figure.kind in ("bar", "stacked"):
        _category_ticks(plot_item, figure.categories)
    _fit_range(plot_item, figure)
    _merge_crowded_labels(plot_item, labelled)  # before the legend is placed clear of them
    if _place_legend(plot_item, figure):
        _merge_crowded_labels(plot_item, labelled)  # the plot narrowed for the legend's column
        if figure.kind in ("bar", "stacked"):
            _category_ticks(plot_item, figure.categories)  # the bars' names wrapped for the narrower plot


CHAR_PX = 6.5  # an axis tick label's character, about, at pyqtgraph's default font
LINE_PX = 14


def wrap_label(name: str, chars: int) -> str:
    """An engine's name in lines of at most `chars` characters where it can be, broken after hyphens."""
    lines = [""]
    for part in name.replace("-", "-\0").split("\0"):
        if lines[-1] and len(lines[-1]) + len(part) > chars:
            lines.append("")
        lines[-1] += part
    return "\n".join(lines)


def _category_ticks(plot_item, categories: list[str]) -> None:
    """The bars' names under them, wrapped at their hyphens where a row of whole names would overlap."""
    width = plot_item.getViewBox().width() or 800.0
    chars = max(4, int(width / max(1, len(categories)) / CHAR_PX) - 1)
    labels = [wrap_label(name, chars) for name in categories]
    axis = plot_item.getAxis("bottom")
    axis.setTicks([list(enumerate(labels))])
    lines = max((label.count("\n") + 1 for label in labels), default=1)
    if lines > 1:
        axis.setStyle(tickTextHeight=lines * LINE_PX)
        axis.setHeight(lines * LINE_PX + (36 if axis.label.isVisible() else 14))


def _draw_stacked(plot_item, figure: Figure, foreground) -> None:
    """One bar per x, each series a segment on top of the previous ones; markers as ticks."""
    import numpy as np
    import pyqtgraph as pg

    bottom = np.zeros(len(figure.categories))
    for index, series in enumerate(figure.series):
        x, y = np.asarray(series.x, float), np.asarray(series.y, float)
        rgb = series_colour(figure, index)
        base = bottom[x.astype(int)]
        plot_item.addItem(
            pg.BarGraphItem(x=x, y0=base, height=y, width=0.6, brush=pg.mkBrush(*rgb), pen=pg.mkPen(None))
        )
        plot_item.legend.addItem(pg.BarGraphItem(x=[0], height=[0], width=1, brush=pg.mkBrush(*rgb)), series.name)
        bottom[x.astype(int)] += y
    for series in figure.markers:
        xs = [x for mx in series.x for x in (mx - 0.38, mx + 0.38)]
        ys = [y for my in series.y for y in (my, my)]
        # one tick per bar, as pairs of points: a mark the legend keeps clear of, not a line between bars
        plot_item.plot(np.asarray(xs, float), np.asarray(ys, float), connect="pairs", pen=pg.mkPen(foreground, width=3))
        plot_item.legend.addItem(pg.PlotDataItem(pen=pg.mkPen(foreground, width=3)), series.name)


def _label_points(plot_item, x, y, labels: list[str], rgb, log: bool = False) -> list:
    """Each point's label beside it; the TextItems, for _merge_crowded_labels."""
    import pyqtgraph as pg

    texts = []
    for px, py, label in zip(x, y, labels):
        text = pg.TextItem(label, color=rgb, anchor=(0, 1))
        text.setPos(*((math.log10(px), math.log10(py)) if log and px > 0 and py > 0 else (px, py)))
        plot_item.addItem(text)
        texts.append(text)
    return texts


def _merge_crowded_labels(plot_item, groups: list[list]) -> None:
    """A series' point labels that would overlap as one label at the first of them ("c=2, c=4, c=8":
    a load curve's levels where it saturates lie a few pixels apart, their labels drawn over each other)."""
    plot_item.getViewBox().updateMatrix()
    for texts in groups:
        kept: list[tuple[Any, Box]] = []
        for text in texts:
            if not text.isVisible():
                continue
            text.updateTransform(force=True)
            box = _box(text.sceneBoundingRect())
            host = next((i for i, (_, kept_box) in enumerate(kept) if kept_box.overlap(box)), None)
            if host is None:
                kept.append((text, box))
                continue
            first = kept[host][0]
            first.setText(f"{first.toPlainText()}, {text.toPlainText()}")
            text.setVisible(False)
            first.updateTransform(force=True)
            kept[host] = (first, _box(first.sceneBoundingRect()))


def log_error_bars(x, y, up, down):
    """(x, y, up, down) in a log-log plot's view coordinates: pyqtgraph's log mode maps the curves'
    data, but an ErrorBarItem is drawn where it is put. A bar whose low end reaches zero or below
    stops at its point."""
    import numpy as np

    x, y, up, down = (np.asarray(a, float) for a in (x, y, up, down))
    keep = (x > 0) & (y > 0)
    x, y, up, down = x[keep], y[keep], up[keep], down[keep]
    centre = np.log10(y)
    low = y - down
    below = np.where(low > 0, centre - np.log10(np.where(low > 0, low, 1.0)), 0.0)
    return np.log10(x), centre, np.log10(y + up) - centre, below


def _draw_whiskers(plot_item, series, rgb, tick: float) -> None:
    """Horizontal whiskers from each point to its `x_whiskers` ends, each end capped by a short
    vertical tick; the innermost whisker is drawn thicker than the outer ones (p90 vs p99)."""
    import numpy as np
    import pyqtgraph as pg

    depth = max((len(ends) for ends in series.x_whiskers), default=0)
    for level in range(depth):
        xs: list[float] = []
        ys: list[float] = []
        for px, py, ends in zip(series.x, series.y, series.x_whiskers):
            if level < len(ends):
                end = ends[level]
                xs += [px, end, end, end]  # the whisker, then its cap: pairs of points
                ys += [py, py, py - tick, py + tick]
        if xs:
            plot_item.plot(
                np.asarray(xs, float),
                np.asarray(ys, float),
                connect="pairs",
                pen=pg.mkPen(rgb, width=2.5 if level == 0 else 1.0),
            )


def _top(figure: Figure) -> float:
    return max((y for s in figure.series for y in s.y), default=0.0)


def _beam(figure: Figure) -> float:
    """An error bar's cap width: 15% of the closest points' gap (in the view's coordinates)."""
    xs = sorted({(math.log10(x) if x > 0 else 0.0) if figure.log_axes else x for s in figure.series for x in s.x})
    gaps = [b - a for a, b in zip(xs, xs[1:]) if b > a]
    return (min(gaps) if gaps else 1.0) * 0.15


def _fit_range(plot_item, figure: Figure) -> None:
    """Keep the limit lines and the error bars in view, and start the y axis at zero."""
    ys = [y + e for s in figure.series for y, e in zip(s.y, s.err or [0.0] * len(s.y))]
    if figure.kind == "stacked":  # the bars' tops, not their segments
        tops: dict[float, float] = {}
        for s in figure.series:
            for x, y in zip(s.x, s.y):
                tops[x] = tops.get(x, 0.0) + y
        ys = [top * 1.45 for top in tops.values()]  # room for the legend above the bars
    ys += [max(limit.y or [limit.value]) for limit in figure.limits] + [y for s in figure.markers for y in s.y]
    xs = [x for s in figure.series for x in s.x] + [e for s in figure.series for ends in s.x_whiskers for e in ends]
    labelled = any(s.labels for s in figure.series)
    if figure.log_axes:
        _fit_log_range(plot_item, figure, ys, xs)
        return
    if figure.kind == "scatter":
        if xs:
            for lo, hi, set_range in ((min(xs), max(xs), plot_item.setXRange), (min(ys), max(ys), plot_item.setYRange)):
                pad = max((hi - lo) * 0.15, abs(hi) * 0.05, 1e-6)
                set_range(lo - pad, hi + pad * 2, padding=0)  # room for the labels above and right
        return
    if ys:
        plot_item.setYRange(0, max(ys) * (1.18 if labelled else 1.1) or 1.0, padding=0)
    if xs:
        lo, hi = min(xs), max(xs)
        pad = 0.6 if figure.kind in ("bar", "stacked") else max((hi - lo) * 0.06, 0.5)
        plot_item.setXRange(lo - pad, hi + pad * (3 if labelled else 1), padding=0)  # labels sit right of points


def _fit_log_range(plot_item, figure: Figure, tops: list[float], xs: list[float]) -> None:
    """A log-log figure's view (log10 coordinates): every point, bar and limit, a margin around."""
    bottoms = [y - e for s in figure.series for y, e in zip(s.y, s.err_low or s.err or [0.0] * len(s.y))]
    bottoms += [min(limit.y or [limit.value]) for limit in figure.limits]
    ys = [math.log10(y) for y in tops + bottoms + [y for s in figure.series for y in s.y] if y > 0]
    logs = [math.log10(x) for x in xs if x > 0]
    for values, set_range, side, powers_of_two in (
        (ys, plot_item.setYRange, "left", False),
        (logs, plot_item.setXRange, "bottom", True),
    ):
        if values:
            lo, hi = min(values), max(values)
            pad = max((hi - lo) * 0.06, 0.05)
            set_range(lo - pad, hi + pad, padding=0)
            plot_item.getAxis(side).setTicks(log_ticks(lo - pad, hi + pad, powers_of_two))


def _legend_columns(figure: Figure) -> tuple[int, ...]:
    """The legend's numbers of columns, the preferred first: a stacked figure's legend is short, in two."""
    return (2, 1) if figure.kind == "stacked" else (1, 2)


def _place_legend(plot_item, figure: Figure) -> bool:
    """Put the legend in the plot's emptiest corner, clear of every mark drawn (legend_place.py),
    else in a column right of the plot (True). A plot not laid out yet keeps it where it is."""
    view, legend = plot_item.getViewBox(), plot_item.legend
    plot_item.layout.activate()  # the title and axes this figure set take their room now: the view's final size
    if not legend.items or not view.width() or not view.height():
        return False
    marks, lines = drawn_marks(plot_item)
    corners = legend_place.RISING_CORNERS if figure.log_axes else legend_place.CORNERS
    sizes = _legend_sizes(legend, figure)
    placement = legend_place.place(_box(view.sceneBoundingRect()), sizes, marks, lines, corners)
    whole = plot_item.sceneBoundingRect()
    budget = whole.width() * LEGEND_COLUMN_SHARE - 2 * legend_place.MARGIN
    if placement.corner is None and sizes[placement.columns][0] > budget:
        # beside the plot at its full width, the legend pushed the grid's next plots out of view: its
        # labels wrap to half the plot's width, in one column as tall as the plot (a narrower legend may
        # fit a corner then)
        fewest = min(sizes)
        for chars in range(LEGEND_WRAP_CHARS, MIN_WRAP_CHARS - 1, -4):
            _wrap_labels(legend, chars)
            sizes = _legend_sizes(legend, figure)
            if sizes[fewest][0] <= budget:
                break
        placement = legend_place.place(_box(view.sceneBoundingRect()), sizes, marks, lines, corners)
        if placement.corner is None and sizes[fewest][1] <= whole.height():
            placement = legend_place.Placement(None, fewest)
    legend.setColumnCount(placement.columns)
    legend.resize(*sizes[placement.columns])  # the size it was placed by, not the last one measured
    if placement.corner is not None:
        corner = placement.corner
        legend.anchor(itemPos=corner.value, parentPos=corner.value, offset=corner.offset())
        return False
    column = _legend_column(plot_item)
    width = sizes[placement.columns][0] + 2 * legend_place.MARGIN
    column.setMinimumWidth(width)
    column.setMaximumWidth(width)
    legend.setParentItem(column)
    legend.anchor(itemPos=(0, 0), parentPos=(0, 0), offset=(legend_place.MARGIN, legend_place.MARGIN))
    plot_item.layout.activate()  # the plot narrows now, not at the next paint: a PNG renders at once
    return True


def _legend_sizes(legend, figure: Figure) -> dict[int, tuple[float, float]]:
    """The legend's (width, height) in each of its numbers of columns, the preferred first."""
    from pyqtgraph.Qt import QtCore

    sizes = {}
    for columns in _legend_columns(figure)[: len(legend.items)]:
        legend.setColumnCount(columns)
        legend.layout.invalidate()
        size = legend.layout.effectiveSizeHint(QtCore.Qt.SizeHint.PreferredSize)
        legend.resize(size)  # a legend kept the width of its longest label so far: its labels' now
        sizes[columns] = (size.width(), size.height())
    return sizes


def _wrap_labels(legend, chars: int) -> None:
    """Each of the legend's labels in lines of at most `chars` characters (a word longer stays whole)."""
    for _sample, label in legend.items:
        text = label.text.replace("<br>", " ")
        label.setText("<br>".join(textwrap.wrap(text, chars, break_long_words=False)) or text)


def _legend_inside(plot_item) -> None:
    """The legend back in the plot, its column beside it closed."""
    legend, column = plot_item.legend, _legend_column(plot_item, create=False)
    if column is not None and column.maximumWidth() > 0:
        column.setMinimumWidth(0)
        column.setMaximumWidth(0)
        plot_item.layout.activate()
    if legend.parentItem() is not plot_item.getViewBox():
        legend.setParentItem(plot_item.getViewBox())


def _legend_column(plot_item, create: bool = True):
    """The cell right of the plot (rows of the top axis to the bottom one) that holds a legend put outside."""
    import pyqtgraph as pg

    layout = plot_item.layout
    item = layout.itemAt(1, 3) if layout.rowCount() > 1 and layout.columnCount() > 3 else None
    if isinstance(item, pg.GraphicsWidget) and item.objectName() == LEGEND_COLUMN:
        return item
    if not create:
        return None
    column = pg.GraphicsWidget()
    column.setObjectName(LEGEND_COLUMN)
    column.setMaximumWidth(0)
    plot_item.layout.addItem(column, 1, 3, 3, 1)
    return column


def drawn_marks(plot_item) -> tuple[list[Box], list[Segment]]:
    """What the plot shows, in scene pixels: the marks a legend must not cover (points, bars, error
    bars with their caps, whiskers and ticks, text: limit lines' and points' labels), and the lines
    it may (curves between points, limit lines)."""
    import numpy as np
    import pyqtgraph as pg
    from pyqtgraph.Qt import QtCore

    view = plot_item.getViewBox()
    view.updateMatrix()

    def point(x: float, y: float) -> tuple[float, float]:
        p = view.mapViewToScene(QtCore.QPointF(float(x), float(y)))
        return p.x(), p.y()

    def span(x0: float, y0: float, x1: float, y1: float, grow: float = 0.0) -> Box:
        (ax, ay), (bx, by) = point(x0, y0), point(x1, y1)
        return Box(min(ax, bx), min(ay, by), max(ax, bx), max(ay, by)).grown(grow)

    marks: list[Box] = []
    lines: list[Segment] = []
    for item in plot_item.items:
        if isinstance(item, pg.PlotDataItem):
            x, y = item.getData()
            if x is None or y is None:
                continue
            keep = np.isfinite(x) & np.isfinite(y)
            if item.opts.get("symbol") is not None:
                radius = item.opts.get("symbolSize", 10) / 2 + 1
                marks += [Box(*point(px, py), *point(px, py)).grown(radius) for px, py in zip(x[keep], y[keep])]
            pen = item.opts.get("pen")
            if pen is None:
                continue
            width = pg.mkPen(pen).widthF()
            if isinstance(item.opts.get("connect"), str) and item.opts["connect"] == "pairs":  # whiskers, ticks
                marks += [span(x[i], y[i], x[i + 1], y[i + 1], width / 2) for i in range(0, len(x) - 1, 2)]
            else:
                xs, ys = x[keep], y[keep]
                lines += [Segment(*point(xs[i], ys[i]), *point(xs[i + 1], ys[i + 1])) for i in range(len(xs) - 1)]
        elif isinstance(item, pg.BarGraphItem):
            for polygon in item.shape().toSubpathPolygons():
                marks.append(_box(item.mapRectToScene(polygon.boundingRect())))
        elif isinstance(item, pg.ErrorBarItem):
            marks += _error_bar_marks(item, span)
        elif isinstance(item, pg.InfiniteLine):
            (x0, x1), _ = view.viewRange()
            lines.append(Segment(*point(x0, item.value()), *point(x1, item.value())))
            if item.label is not None and item.label.isVisible():
                item.viewTransformChanged()  # its label follows the view's range lazily: where it is now
                item.label.viewTransformChanged()
                marks.append(_box(item.label.sceneBoundingRect()))
        elif isinstance(item, pg.TextItem) and item.isVisible():
            item.updateTransform(force=True)
            marks.append(_box(item.sceneBoundingRect()))
    return marks, lines


def _error_bar_marks(item, span) -> list[Box]:
    """One box per error bar: from its low to its high end, as wide as its caps."""
    import numpy as np
    import pyqtgraph as pg

    opts = item.opts
    if opts.get("x") is None or opts.get("y") is None:
        return []
    x, y = np.atleast_1d(opts["x"]), np.atleast_1d(opts["y"])
    top = np.broadcast_to(opts["top"] if opts.get("top") is not None else 0.0, x.shape)
    bottom = np.broadcast_to(opts["bottom"] if opts.get("bottom") is not None else 0.0, x.shape)
    half = (opts.get("beam") or 0.0) / 2
    grow = pg.mkPen(opts.get("pen")).widthF() / 2 + 1
    return [span(px - half, py - lo, px + half, py + hi, grow) for px, py, hi, lo in zip(x, y, top, bottom)]


def _box(rect) -> Box:
    return Box(rect.left(), rect.top(), rect.right(), rect.bottom())


def log_ticks(lo: float, hi: float, powers_of_two: bool = False) -> list[list[tuple[float, str]]]:
    """A log axis's ticks from 10**lo to 10**hi in pyqtgraph's levels, as (log10 of the value, the
    value written out): pyqtgraph's own write 3·10¹. A decade's usual marks (1, 2, 5), the powers of
    ten major; or powers of two (a doubling grid's own values), every other one major. pyqtgraph
    writes a minor level's values only where they fit (a narrow plot in the window)."""
    if powers_of_two:
        first, last = math.floor(lo / math.log10(2)), math.ceil(hi / math.log10(2))
        marks = [(2.0**k, k % 2 == 0) for k in range(first, last + 1)]
    else:
        marks = [(m * 10.0**e, m == 1) for e in range(math.floor(lo) - 1, math.ceil(hi) + 1) for m in (1, 2, 5)]
    levels: list[list[tuple[float, str]]] = [[], []]
    for value, major in marks:
        if lo <= math.log10(value) <= hi:
            levels[0 if major else 1].append((math.log10(value), f"{value:g}" if value < 1e5 else f"{value:.0e}"))
    return levels


def render_png(figure: Figure, path: Path, size: tuple[int, int] = DEFAULT_SIZE) -> Path:
    """Render offscreen (no window is shown) to a PNG of exactly `size` pixels."""
    app = ensure_qt_app()
    import pyqtgraph as pg
    from pyqtgraph.exporters import ImageExporter
    from pyqtgraph.Qt import QtCore

    width, height = size
    widget = pg.PlotWidget(background="w")
    try:
        widget.resize(width, height)
        rect = QtCore.QRectF(0, 0, width, height)
        widget.centralWidget.setGeometry(rect)  # lay out without showing the widget
        widget.setSceneRect(rect)
        draw(widget.getPlotItem(), figure)
        app.processEvents()
        exporter = ImageExporter(widget.getPlotItem())
        exporter.parameters()["width"] = width
        exporter.parameters()["height"] = height
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp.png")  # Qt picks the format from the suffix
        if not exporter.export(str(tmp)) and not tmp.exists():
            raise RuntimeError(f"could not write {path}")
        os.replace(tmp, path)
    finally:
        widget.close()
        widget.deleteLater()
    return path


def render_all(
    figures: list[Figure], out_dir: Path, prefix: str = "", size: tuple[int, int] = DEFAULT_SIZE
) -> list[Path]:
    return [render_png(f, Path(out_dir) / f"{prefix}{f.name}.png", size) for f in figures]
