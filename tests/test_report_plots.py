"""The report's figures as drawn (offscreen, at a report's size): the legend covers no mark (points,
bars, error bars with their caps, limit lines' labels) and goes beside the plot when no corner is
free; a category keeps its colour whatever else a figure shows."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager

import pytest

from whistle_stop.backends.profile.breakdown import EngineProfile, PhaseBreakdown
from whistle_stop.backends.profilers.categories import Category
from whistle_stop.backends.report import figures as fg
from whistle_stop.backends.report.legend_place import Box, Corner, Segment, place

WINDOW_SIZE = (560, 400)  # about the window's Profile tab: a plot narrower than a report's


@contextmanager
def laid_out_plot(size: tuple[int, int] | None = None):
    """A PlotItem laid out as render_png lays one out (at a report's size unless told), kept open."""
    import pyqtgraph as pg
    from pyqtgraph.Qt import QtCore

    from whistle_stop.backends.report.plots import DEFAULT_SIZE, ensure_qt_app

    app = ensure_qt_app()
    width, height = size or DEFAULT_SIZE
    widget = pg.PlotWidget(background="w")
    widget.resize(width, height)
    rect = QtCore.QRectF(0, 0, width, height)
    widget.centralWidget.setGeometry(rect)
    widget.setSceneRect(rect)
    try:
        yield app, widget.getPlotItem()
    finally:
        widget.close()
        widget.deleteLater()


def drawn(app, plot, figure):
    from whistle_stop.backends.report.plots import draw

    draw(plot, figure)
    app.processEvents()
    plot.getViewBox().prepareForPaint()  # the geometry a PNG is rendered with (a paint does this first)
    return plot.legend.sceneBoundingRect()


def limit_labels(plot):
    import pyqtgraph as pg

    return [item.label.sceneBoundingRect() for item in plot.items if isinstance(item, pg.InfiniteLine)]


def error_bars(plot):
    """Each error bar's scene rect, from its low end to its high end and as wide as its caps."""
    import pyqtgraph as pg
    from pyqtgraph.Qt import QtCore

    view, out = plot.getViewBox(), []
    for item in plot.items:
        if isinstance(item, pg.ErrorBarItem):
            o, half = item.opts, item.opts["beam"] / 2
            for x, y, top, bottom in zip(o["x"], o["y"], o["top"], o["bottom"]):
                a = view.mapViewToScene(QtCore.QPointF(x - half, y + top))
                b = view.mapViewToScene(QtCore.QPointF(x + half, y - bottom))
                out.append(QtCore.QRectF(a, b).normalized())
    return out


def points(plot, figure):
    from pyqtgraph.Qt import QtCore

    view = plot.getViewBox()
    return [view.mapViewToScene(QtCore.QPointF(x, y)) for s in figure.series for x, y in zip(s.x, s.y)]


def bars(plot):
    import pyqtgraph as pg

    return [
        item.mapRectToScene(polygon.boundingRect())
        for item in plot.items
        if isinstance(item, pg.BarGraphItem)
        for polygon in item.shape().toSubpathPolygons()
    ]


def rising(count: int, top: float, error: float) -> fg.Figure:
    figure = fg.Figure("itl_vs_position", "ms/token vs position", "position (tokens)", "ms/token")
    for index in range(count):
        y = [2.0 + index, 2.5 + index, top if index == count - 1 else 3.0 + index]
        figure.series.append(fg.Series(f"engine-{index}", [0.0, 100.0, 200.0], y, [error] * 3, [], [error] * 3))
    return figure


def test_the_legend_covers_no_limit_line_s_label():
    """Floors lie above the curves, their labels staggered along them: the last one, long (a KV
    cache size in it), reaches the top right corner, where the legend sat over it."""
    figure = rising(4, 6.0, 0.3)
    figure.limits += [
        fg.Limit("fp32 floor: 7.9 ms at 50 GB/s", 7.9),
        fg.Limit("bf16 floor: 7.2 ms", 7.2),
        fg.Limit("int8 floor, KV 20 kB/position: 6.7 ms", 6.7),
    ]
    with laid_out_plot() as (app, plot):
        legend = drawn(app, plot, figure)
        labels = limit_labels(plot)
        assert len(labels) == 3 and not any(legend.intersects(label) for label in labels)
        assert not any(legend.intersects(bar) for bar in error_bars(plot))
        assert not any(legend.contains(p) for p in points(plot, figure))
        assert plot.getViewBox().sceneBoundingRect().contains(legend)  # a corner was free: inside


def test_the_legend_covers_no_error_bar_s_cap():
    """The highest point at the right end, with a wide interval: the range widened until the point
    ended left of the legend, and its cap, half a beam right of it, still ran under the legend."""
    figure = rising(3, 12.0, 1.5)
    with laid_out_plot() as (app, plot):
        legend = drawn(app, plot, figure)
        caps = error_bars(plot)
        assert len(caps) == 9 and not any(legend.intersects(cap) for cap in caps)
        assert not any(legend.contains(p) for p in points(plot, figure))


def profile(engine: str, categories: dict[str, float]) -> EngineProfile:
    return EngineProfile(
        engine,
        precision="fp32",
        decode=PhaseBreakdown("decode", 9, sum(categories.values()), categories),
        bytes_per_token=1.5e8,
        probe_gb_s=50.0,
    )


def test_one_engine_s_profile_has_its_legend_clear_of_its_bar():
    """One engine profiled: one wide bar, nine categories and the floor in the legend, which sat over
    the bar's top in the window's plot."""
    one = profile("numpy", {c.value: 1.0 + 0.3 * i for i, c in enumerate(Category)})
    figure = fg.profile_breakdown([one])
    with laid_out_plot(WINDOW_SIZE) as (app, plot):
        legend = drawn(app, plot, figure)
        segments = bars(plot)
        assert len(segments) == len(Category) and not any(legend.intersects(bar) for bar in segments)
        assert plot.sceneBoundingRect().contains(legend)  # in the exported item, whole


def test_with_no_corner_free_the_legend_goes_beside_the_plot_and_back_in_when_one_is():
    """Points in all four corners: the legend goes in a column right of the plot (in what a PNG
    exports); the next figure drawn into the same plot (the window reuses its plots) has a free
    corner: the legend is back inside and the plot has its width back."""
    full = fg.Figure("corners", "corners", "x", "y")
    for index, (x, y) in enumerate([(0.0, 0.1), (0.0, 10.0), (10.0, 0.1), (10.0, 10.0), (5.0, 5.0)]):
        full.series.append(fg.Series(f"engine-{index}", [x, x + 0.2], [y, y]))
    with laid_out_plot() as (app, plot):
        view = plot.getViewBox()
        legend = drawn(app, plot, rising(2, 4.0, 0.0))
        inside_width = view.sceneBoundingRect().width()
        assert view.sceneBoundingRect().contains(legend)

        legend = drawn(app, plot, full)
        assert not legend.intersects(view.sceneBoundingRect()) and legend.left() >= view.sceneBoundingRect().right()
        assert plot.sceneBoundingRect().contains(legend)
        assert view.sceneBoundingRect().width() < inside_width

        legend = drawn(app, plot, rising(2, 4.0, 0.0))
        assert view.sceneBoundingRect().contains(legend)
        assert view.sceneBoundingRect().width() == pytest.approx(inside_width)


def bar_colours(plot) -> list[tuple[int, int, int]]:
    import pyqtgraph as pg

    out = []
    for item in plot.items:
        if isinstance(item, pg.BarGraphItem):
            colour = pg.mkBrush(item.opts["brush"]).color()
            out.append((colour.red(), colour.green(), colour.blue()))
    return out


def test_a_category_has_one_colour_whatever_else_a_profile_shows():
    """'attention' was the second colour where matmul was shown and the first where not: a reader
    comparing two runs' profiles read one category as another."""
    import pyqtgraph as pg

    from whistle_stop.backends.report.colours import category_colour, rgb
    from whistle_stop.backends.report.plots import draw, ensure_qt_app

    ensure_qt_app()
    colours = {}
    for name, categories in (
        ("both", {"matmul": 5.0, "attention": 2.0}),
        ("no matmul", {"attention": 2.0, "kv cache": 1.0}),
    ):
        figure = fg.profile_breakdown([profile("numpy", categories)])
        plot = pg.PlotItem()
        draw(plot, figure)
        colours[name] = dict(zip([s.name for s in figure.series], bar_colours(plot)))
    assert colours["both"]["attention"] == colours["no matmul"]["attention"] == rgb(category_colour("attention"))
    assert colours["both"]["matmul"] == rgb(category_colour("matmul"))
    assert len(set(colours["no matmul"].values())) == 2


def test_known_categories_have_fixed_distinct_colours_and_others_a_stable_one():
    """A profile's categories never share a colour in one figure; one the table does not know gets
    the same colour in every process (Python's own hash of a string changes from one to the next)."""
    from whistle_stop.backends.report.colours import category_colour

    assert len({category_colour(c.value) for c in Category}) == len(Category)
    assert category_colour("cold start") != category_colour("one-time build")
    code = "from whistle_stop.backends.report.colours import category_colour; print(category_colour('dequantize'))"
    seen = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }
    assert seen == {category_colour("dequantize")}


def test_placement_prefers_the_free_corner_lines_cross_least_and_else_goes_outside():
    plot = Box(0, 0, 400, 300)
    size = {1: (100.0, 60.0)}
    top_right_point = [Box(380, 10, 390, 20)]
    placement = place(plot, size, top_right_point)
    assert placement.corner is Corner.TOP_LEFT and placement.columns == 1
    # a curve across the top: of the three free corners, the first the curve does not cross
    assert place(plot, size, top_right_point, [Segment(0, 30, 400, 30)]).corner is Corner.BOTTOM_RIGHT
    across_the_bottom = [Segment(0, 280, 400, 280), Segment(200, 280, 400, 240)]  # more of it on the right
    assert place(plot, size, [Box(5, 5, 15, 15), *top_right_point], across_the_bottom).corner is Corner.BOTTOM_LEFT
    corners = [Box(0, 0, 400, 40), Box(0, 260, 400, 300)]
    assert place(plot, size, corners).corner is None
    assert Segment(0, 0, 100, 0).length_in(Box(50, -1, 200, 1)) == pytest.approx(50.0)


def test_a_curve_s_crowded_point_labels_merge_into_one():
    """A load curve saturates: its levels' points (c=2, c=4, c=8) lie within a few pixels and their
    labels were drawn over each other, unreadable. Labels of one series that would overlap are one
    label at the first of them; the rest keep their own."""
    import pyqtgraph as pg

    figure = fg.Figure("load", "Output tokens/s vs median ITL under load", "median ITL (ms)", "tokens/s")
    figure.series.append(
        fg.Series("remote", [7.0, 5.88, 5.84, 5.74], [74.0, 153.0, 156.0, 159.0], labels=["c=1", "c=2", "c=4", "c=8"])
    )
    with laid_out_plot(WINDOW_SIZE) as (app, plot):
        drawn(app, plot, figure)
        texts = [item for item in plot.items if isinstance(item, pg.TextItem) and item.isVisible()]
        assert sorted(item.toPlainText() for item in texts) == ["c=1", "c=2, c=4, c=8"]
        for item in texts:
            item.updateTransform(force=True)
        boxes = [item.sceneBoundingRect() for item in texts]
        assert not boxes[0].intersects(boxes[1])
