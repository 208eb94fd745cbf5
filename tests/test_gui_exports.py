"""Every chart the window exports as PNG, whether its tab was ever shown or not: the same layout, the same
text against the plot, the legend scaled with the rest, and nothing cut off."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pyqtgraph")
pytest.importorskip("pytestqt")

from PySide6.QtGui import QColor, QImage  # noqa: E402

from tests.test_gui import make_window, private_qsettings, settings  # noqa: E402,F401 (fixtures)

pytestmark = pytest.mark.gui

TWO = {"fast": QColor("#1f77b4"), "other": QColor("#ff7f0e")}


def pixels(path: Path) -> np.ndarray:
    """An image's (rows, columns, RGB)."""
    image = QImage(str(path)).convertToFormat(QImage.Format.Format_RGB32)
    bits = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine() // 4, 4)
    return bits[:, : image.width(), 2::-1].astype(int)  # stored B, G, R, A


def legend_box(image: np.ndarray, legend) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) of a SideLegend's box in an exported image: where its fill colour is
    solid (its text and swatches sit inside; a faint grid line may have the same colour, one pixel wide)."""
    fill = legend.opts["brush"].color()
    covered = np.all(image == (fill.red(), fill.green(), fill.blue()), axis=2)
    solid = covered.copy()
    for shift in (-2, -1, 1, 2):
        solid &= np.roll(covered, shift, axis=0) & np.roll(covered, shift, axis=1)
    rows, columns = np.nonzero(solid.sum(axis=1) >= 10)[0], np.nonzero(solid.sum(axis=0) >= 10)[0]
    assert rows.size and columns.size, "no legend in the image"
    return int(rows[0]), int(rows[-1]), int(columns[0]), int(columns[-1])


def _differing(a: np.ndarray, b: np.ndarray) -> float:
    """The share of pixels that differ by more than antialiasing does."""
    return float((np.abs(a - b).sum(axis=2) > 60).mean())


def _opened_session(qtbot, window, folder: Path) -> None:
    from tests.test_gui_reopened import recorded
    from whistle_stop.backends.results.export import write_results

    records, tokens = [], []
    for name, ttft_ms, gap_ms in (("fast", 12.0, 2.0), ("other", 20.0, 3.0)):
        for repeat in (1, 2):
            record, run_tokens = recorded(name, repeat, [ttft_ms + gap_ms * i + (i % 5) * 0.3 for i in range(30)])
            records.append(record)
            tokens += run_tokens
    write_results(folder, records, tokens, {"reference": "fast"})
    with qtbot.waitSignal(window.session_loaded):
        assert window.open_session(folder)


def test_every_chart_exports_alike_whether_its_tab_was_shown_or_not(qtbot, make_window, tmp_path):  # noqa: F811
    """The "Export charts as PNG" action exports every chart, most of them in tabs never shown: such a view
    never got its size (Qt's default 640x480, laid out once), so its PNG had another shape than a shown
    one's, its text and legend of another size against the plot, and the legend did not scale with the
    rest. Every export is now laid out alike: a chart's PNG is the same before and after its tab shows."""
    window = make_window()
    _opened_session(qtbot, window, tmp_path / "session")
    charts = [window.latency, window.race, window.summary.bars, window.histogram]  # export_charts' order
    assert window.tabs.currentWidget() is window.latency and not window.race.isVisible()
    on_screen = window.latency.plotItem.sceneBoundingRect()
    never = [pixels(path) for path in window.export_charts(tmp_path / "never")]
    assert window.latency.plotItem.sceneBoundingRect() == on_screen  # the shown chart is as it was
    assert window.summary.bars.minimumWidth() < 1000  # and the summary gives the verdict beside it its room

    for chart in charts:
        window.tabs.setCurrentWidget(window.summary if chart is window.summary.bars else chart)
        qtbot.waitUntil(lambda chart=chart: chart.isVisible() and chart.sceneRect().width() == chart.width())
    window.resize(1900, 1000)  # another size on screen: the same PNGs
    qtbot.waitUntil(lambda: window.histogram.sceneRect().width() == window.histogram.width() > 1440)
    shown = [pixels(path) for path in window.export_charts(tmp_path / "shown")]

    for chart, before, after in zip(charts, never, shown):
        assert before.shape == after.shape, type(chart).__name__
        assert _differing(before, after) < 0.005, type(chart).__name__
    for chart, before, after in zip(charts, never, shown):
        if chart is window.summary.bars:
            continue
        (top, bottom, _, _), (top2, bottom2, _, _) = legend_box(before, chart.legend), legend_box(after, chart.legend)
        # two entries' text, the same height against the image
        assert abs((bottom - top) - (bottom2 - top2)) <= 2 and bottom - top > 0.05 * before.shape[0]


def test_a_chart_s_legend_scales_with_its_export_as_its_axes_do(qtbot, tmp_path):
    """pyqtgraph's LegendItem keeps its size in pixels however the painter is scaled: a PNG wider than
    the chart's layout had the title and axes scaled up and the legend not (its text came out small
    beside them). In a column of the layout it scales with them."""
    from whistle_stop.gui.charts import RaceChart

    race = RaceChart()
    qtbot.addWidget(race)
    race.set_engines(TWO)
    for index, name in enumerate(TWO):
        race.set_series(name, np.linspace(0.01, 0.5 + index, 40))
    heights = []
    for width in (1000, 2000):
        race.export_png(tmp_path / f"race{width}.png", width=width)
        image = pixels(tmp_path / f"race{width}.png")
        assert image.shape[1] == width
        top, bottom, left, right = legend_box(image, race.legend)
        assert right < width - 1  # whole, inside the image
        heights.append(bottom - top)
    assert heights[1] == pytest.approx(2 * heights[0], rel=0.1)


def test_the_summary_s_png_names_its_engines(qtbot, tmp_path, monkeypatch):
    """The bars' axis names no engine (under narrow bars the names overlap): the window names them in a
    label above the chart, which is no part of what it exports. The PNG carries that line under the bars."""
    import pyqtgraph as pg
    from PySide6.QtWidgets import QGraphicsTextItem

    from tests.test_gui_window import _summaries
    from whistle_stop.gui.summary_chart import SummaryBars

    bars = SummaryBars()
    qtbot.addWidget(bars)
    bars.resize(900, 250)
    bars.show()
    bars.set_summaries(_summaries(2), dict(zip(("engine-0", "engine-1"), TWO.values())))
    qtbot.waitUntil(lambda: bars.ci.sceneBoundingRect().width() == bars.viewport().width())
    heights = [plot.sceneBoundingRect().height() for plot in bars.plots]
    painted: list[str] = []
    export = pg.exporters.ImageExporter.export

    def spied(exporter, *args, **kwargs):
        scene = exporter.getScene()
        painted[:] = [item.toPlainText() for item in scene.items() if isinstance(item, QGraphicsTextItem)]
        return export(exporter, *args, **kwargs)

    monkeypatch.setattr(pg.exporters.ImageExporter, "export", spied)
    bars.export_png(tmp_path / "summary.png")
    named = [text for text in painted if "engine-0" in text]
    assert named and "engine-1" in named[0]  # one line: both engines, in their colours
    assert pixels(tmp_path / "summary.png").shape[1] == round(1.4 * bars.EXPORT_SIZE.width())
    # the line is gone from the window, and the bars are as they were
    assert [plot.sceneBoundingRect().height() for plot in bars.plots] == heights
    assert bars.width() == 900 and bars.minimumWidth() < 900  # (the line's width was its minimum: it widened)
    assert bars.plots[-1].sceneBoundingRect().right() <= bars.viewport().width()


def _figure(name: str):
    from whistle_stop.backends.report.figures import Figure, Limit, Series

    return Figure(
        name,
        "Output tokens/s vs median ITL under load",
        "median ITL (ms)",
        "output tokens/s",
        [Series("fast", [2.0, 2.5, 3.5], [480, 900, 1400]), Series("other", [3.0, 3.6, 5.0], [320, 600, 900])],
        limits=[Limit("fp32 limit (one read of the weights at 33 GB/s): 1500 tok/s", 1500.0)],
    )


def test_a_tab_s_figures_export_alike_shown_or_not(qtbot, tmp_path):
    """The Sweep, Quality, Profile and Load tabs' figures: each plot at a report figure's size in the
    PNG, whatever its size on screen or if never shown, with its legend scaled as its axes."""
    from PySide6.QtWidgets import QGraphicsItem

    from whistle_stop.gui.figure_view import FigureGrid

    images = []
    for shown in (False, True):
        grid = FigureGrid(2)
        qtbot.addWidget(grid)
        grid.show_figures([_figure("a"), _figure("b")], TWO)
        if shown:
            grid.resize(700, 260)
            grid.show()
            qtbot.waitUntil(lambda grid=grid: grid.sceneRect().width() == 700)
        for plot in grid.plots:  # scaled by the exporter's painter as the title and axes
            assert not plot.legend.flags() & QGraphicsItem.GraphicsItemFlag.ItemIgnoresTransformations
        grid.export_png(tmp_path / f"grid{shown}.png")
        images.append(pixels(tmp_path / f"grid{shown}.png"))
    assert images[0].shape == images[1].shape and images[0].shape[1] == round(1.4 * 2 * 900)
    assert _differing(*images) < 0.005


def _tab_grids(window) -> dict[str, tuple]:
    """Each tab with figures: (the tab, its grid, the figures' names as the report writes them)."""
    return {
        "sweep": (
            window.sweep_tab,
            window.sweep_tab.figures,
            ("ttft_vs_prompt", "decode_vs_output", "itl_vs_position"),
        ),
        "quality": (window.quality_tab, window.quality_tab.scatter, ("speed_vs_quality",)),
        "profile": (window.profile_tab, window.profile_tab.charts, ("profile_decode",)),
        "load": (window.load_tab, window.load_tab.chart, ("load_curve",)),
    }


def test_each_tab_exports_its_figures_as_the_report_writes_them(qtbot, make_window, tmp_path, monkeypatch):  # noqa: F811
    """The Sweep, Quality, Profile and Load tabs had no export of their own: their figures' files came only
    with the HTML report. Each has "Export PNG…", off while there is nothing to export, which writes one
    `<figure>.png` per figure with data, each laid out at a report figure's size, into a folder asked for from
    the one QSettings remembers, and remembered in turn."""
    from PySide6.QtWidgets import QFileDialog

    from whistle_stop.backends.report.figures import Figure
    from whistle_stop.gui.figure_view import FigureGrid

    window = make_window(show=False)
    asked: list[str] = []
    answers: list[Path] = []
    monkeypatch.setattr(
        QFileDialog,
        "getExistingDirectory",
        lambda _parent, _title, start: (asked.append(start), str(answers.pop(0)))[1],
    )
    window.store.set_last_folder(tmp_path / "remembered")
    single = FigureGrid(1)
    qtbot.addWidget(single)
    single.show_figures([_figure("alone")], TWO)
    single.export_png(tmp_path / "alone.png")
    alone = pixels(tmp_path / "alone.png")
    for kind, (tab, grid, names) in _tab_grids(window).items():
        button = tab.figure_export.button
        assert button.text().strip() == "Export PNG…" and not button.isEnabled(), kind
        empty = Figure("empty", "nothing yet", "x", "y")
        with qtbot.waitSignal(grid.changed):
            grid.show_figures([empty] * len(names))
        assert not button.isEnabled(), kind  # a figure with no data is none to export (the report leaves it out)
        # the sweep's last figure has no data yet: the report leaves it out, and so does the export
        shown = [_figure(name) for name in names[:2]] + [Figure(name, "no points", "x", "y") for name in names[2:]]
        wanted = [f"{name}.png" for name in names[:2]]
        with qtbot.waitSignal(grid.changed):
            grid.show_figures(shown, TWO)
        assert button.isEnabled(), kind
        folder = tmp_path / kind
        answers.append(folder)
        before = window.store.last_folder()
        button.click()
        assert asked[-1] == before  # the dialog opens where the last export went
        assert sorted(p.name for p in folder.iterdir()) == sorted(wanted), kind
        for name in wanted:  # each alone, at the size and layout of a one-figure export
            assert pixels(folder / name).shape == alone.shape, (kind, name)
        assert window.store.last_folder() == str(folder)
        assert window.state.text() == "Wrote " + ", ".join(wanted) + f" to {folder}"
        with qtbot.waitSignal(grid.changed):
            grid.clear_figures()
        assert not button.isEnabled(), kind
    assert asked[0] == str(tmp_path / "remembered")


def test_a_figure_exported_alone_has_its_title_as_the_report_s_png_has_it(qtbot, tmp_path, monkeypatch):
    """The window wraps a long title in two lines so three plots fit side by side; a figure exported
    alone, at the report's width, kept the two lines: its title is laid out as `render_png` lays it out."""
    import pyqtgraph as pg

    import whistle_stop.gui.png_export as png_export
    from whistle_stop.backends.report import plots
    from whistle_stop.gui.figure_view import TITLE_CHARS, FigureGrid

    figure = _figure("load_curve")
    assert len(figure.title) > TITLE_CHARS  # the window wraps it
    report = pg.PlotWidget(background="w")  # as render_png lays out its plot
    qtbot.addWidget(report)
    report.resize(*plots.DEFAULT_SIZE)
    report.centralWidget.setGeometry(0, 0, *plots.DEFAULT_SIZE)
    plots.draw(report.getPlotItem(), figure)
    wanted = report.getPlotItem().titleLabel

    exported = []
    write_png = png_export.write_png

    def spied(item, path, width):
        title = item.getItem(0, 0).titleLabel
        exported.append((title.text, title.item.boundingRect().size()))
        write_png(item, path, width)

    monkeypatch.setattr(png_export, "write_png", spied)
    grid = FigureGrid(3)
    qtbot.addWidget(grid)
    grid.show_figures([figure], TWO)
    assert "<br>" in grid.plots[0].titleLabel.text  # on screen: two lines
    grid.export_figure(figure, tmp_path / "load_curve.png")
    assert exported == [(wanted.text, wanted.item.boundingRect().size())]
    assert "<br>" in grid.plots[0].titleLabel.text  # the window's own plots keep theirs


def test_a_tab_s_export_to_an_unwritable_place_is_one_line_in_the_status_bar(qtbot, make_window, tmp_path):  # noqa: F811
    window = make_window(show=False)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    for kind, (tab, grid, names) in _tab_grids(window).items():
        grid.show_figures([_figure(name) for name in names], TWO)
        assert tab.figure_export.export(blocker / "sub") == [], kind
        line = window.state.text()
        assert line.startswith(f"Export failed: Could not write the figures to {blocker / 'sub'}: "), line
        assert "\n" not in line and "Traceback" not in window.last_error
        assert grid.exportable()  # what is on screen stays
    assert window.store.last_folder() != str(blocker / "sub")


def test_the_latency_chart_s_hover_stays_out_of_its_png(qtbot, tmp_path):
    """The latency chart draws a line and the values where the mouse is: exported while hovering, both went
    into the PNG. They are hidden for the export, and shown again after it."""
    from whistle_stop.gui.charts import LatencyChart

    latency = LatencyChart()
    qtbot.addWidget(latency)
    latency.resize(900, 400)
    latency.show()
    latency.set_engines(TWO)
    for index, name in enumerate(TWO):
        values = 5.0 + index + np.arange(40) % 3
        latency.set_series(name, values, [f"t{i}" for i in range(40)])
    qtbot.waitUntil(lambda: latency.plotItem.vb.sceneBoundingRect().width() > 500)
    latency.export_png(tmp_path / "still.png")
    middle = latency.plotItem.vb.sceneBoundingRect().center()
    assert "token" in latency.hover_at(middle)
    assert latency._cursor.isVisible() and latency._label.isVisible()
    latency.export_png(tmp_path / "hovering.png")
    assert _differing(pixels(tmp_path / "still.png"), pixels(tmp_path / "hovering.png")) == 0
    assert latency._cursor.isVisible() and latency._label.isVisible()  # the hover is back on screen
