"""What a reader of a report meets: the serve cold-start table in the HTML, axis labels without
pyqtgraph's scale, a legend that leaves the curves in view, limit labels legible over curves."""

from __future__ import annotations

import pytest

from whistle_stop.backends.report import figures as fg
from whistle_stop.backends.report.html import build_report
from whistle_stop.backends.results.export import write_results

from .run_records import run_record


def _laid_out_plot():
    """A PlotItem laid out at a report's figure size (as render_png lays one out), its widget kept open."""
    import pyqtgraph as pg
    from pyqtgraph.Qt import QtCore

    from whistle_stop.backends.report.plots import DEFAULT_SIZE, ensure_qt_app

    app = ensure_qt_app()
    widget = pg.PlotWidget(background="w")
    widget.resize(*DEFAULT_SIZE)
    rect = QtCore.QRectF(0, 0, *DEFAULT_SIZE)
    widget.centralWidget.setGeometry(rect)
    widget.setSceneRect(rect)
    return app, widget


def test_the_html_report_shows_the_serve_cold_start_table(tmp_path):
    """`bench --serve-cold-start` wrote serve_cold_start.csv: the HTML shows it as the CLI and the
    Markdown page do, not only the engines' own cold starts."""
    from whistle_stop.backends.serve.cold_start import ServeColdStart, write_csv

    folder = tmp_path / "bench"
    write_results(folder, [run_record("numpy", 1, cold_start_s=0.401)], [], {})
    write_csv(
        folder,
        [
            ServeColdStart("numpy", "whistle-stop serve", "ok", 0.512, 0.401),
            ServeColdStart("numpy", "own server", "skipped", None, 0.401, "no server program"),
        ],
    )
    page = build_report([folder], tmp_path / "report").read_text(encoding="utf-8")
    assert "<h3>Serve cold start</h3>" in page and "<th>load to finish s</th>" in page
    assert "<td>numpy</td><td>whistle-stop serve</td><td>0.51</td><td>0.40</td><td>ok</td>" in page
    assert "<td>skipped: no server program</td>" in page and "Process start to the first completed response" in page


def test_no_serve_cold_start_section_without_its_file(tmp_path):
    write_results(tmp_path / "bench", [run_record("numpy", 1)], [], {})
    page = build_report([tmp_path / "bench"], tmp_path / "report").read_text(encoding="utf-8")
    assert "Serve cold start" not in page


def test_axis_labels_carry_no_scale_that_reads_as_part_of_the_unit():
    """A cold start of 0.4 s: pyqtgraph's automatic SI scale wrote "seconds (x0.001)" over ticks of
    400, and "engine (x0.001)" under the bars' names."""
    import pyqtgraph as pg

    from whistle_stop.backends.report.plots import draw, ensure_qt_app

    ensure_qt_app()
    plot = pg.PlotItem()
    draw(plot, fg.startup_bars([run_record("remote", 1, cold_start_s=0.4)]))
    for side, label in (("left", "seconds"), ("bottom", "backend")):
        text = plot.getAxis(side).labelString()
        assert label in text and "x0.001" not in text and "(x" not in text


def test_a_legend_of_many_engines_leaves_the_ends_of_their_curves_in_view():
    """Thirteen engines' legend sits top right over a third of the plot's height: the curves that run
    high at the right (hf, hf-assisted in a bench's position chart) end left of it, not under it."""
    from pyqtgraph.Qt import QtCore

    from whistle_stop.backends.report.plots import draw

    figure = fg.Figure("itl_vs_position", "ms/token vs position", "position (tokens)", "ms/token")
    for index in range(13):
        y = 40.0 if index < 2 else 2.0 + index
        figure.series.append(fg.Series(f"engine-{index}", [50.0, 150.0, 250.0], [y, y, y + index * 0.1]))
    app, widget = _laid_out_plot()
    try:
        plot = widget.getPlotItem()
        draw(plot, figure)
        app.processEvents()
        view, legend = plot.getViewBox(), plot.legend
        legend_left = legend.sceneBoundingRect().left()
        ends = [view.mapViewToScene(QtCore.QPointF(s.x[-1], s.y[-1])).x() for s in figure.series[:2]]
        assert max(ends) < legend_left
        (_, x_high), _ = view.viewRange()
        assert x_high < 250.0 * 1.6  # room for the legend, not a plot squeezed to its left edge
    finally:
        widget.close()
        widget.deleteLater()


def test_a_legend_that_covers_nothing_leaves_the_x_range_as_it_was():
    from whistle_stop.backends.report.plots import draw

    figure = fg.Figure("itl_vs_position", "ms/token vs position", "position (tokens)", "ms/token")
    figure.series.append(fg.Series("hf", [50.0, 150.0, 250.0], [9.0, 2.0, 1.0]))  # high only on the left
    app, widget = _laid_out_plot()
    try:
        plot = widget.getPlotItem()
        draw(plot, figure)
        (_, x_high), _ = plot.getViewBox().viewRange()
        assert x_high == pytest.approx(250.0 + 0.06 * 200.0)
    finally:
        widget.close()
        widget.deleteLater()


@pytest.mark.parametrize("foreground, dark", [((30, 30, 30), False), ((220, 220, 220), True)])
def test_a_limit_line_s_label_has_a_backdrop_in_the_theme_s_background(foreground, dark):
    """A floor lies among the curves it bounds (a bench's position chart): its label sits on a backdrop
    of the plot's background, so the curves running through it do not make it illegible."""
    import pyqtgraph as pg
    from pyqtgraph.Qt import QtCore

    from whistle_stop.backends.report.plots import draw, ensure_qt_app

    ensure_qt_app()
    figure = fg.Figure("itl_vs_position", "ms/token vs position", "position (tokens)", "ms/token")
    figure.series.append(fg.Series("hf", [50.0, 150.0], [10.0, 10.5]))
    figure.limits.append(fg.Limit("fp32 floor: 10.2 ms at 50 GB/s", 10.2))
    plot = pg.PlotItem()
    draw(plot, figure, foreground=foreground)
    (line,) = [item for item in plot.items if isinstance(item, pg.InfiniteLine)]
    fill = line.label.fill
    assert fill.style() != QtCore.Qt.BrushStyle.NoBrush and fill.color().alpha() >= 128
    assert (fill.color().lightness() < 128) == dark
