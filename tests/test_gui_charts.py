"""The window's per-token charts against the records they draw: the ITL histogram and the race."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pyqtgraph")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QPointF  # noqa: E402
from PySide6.QtGui import QColor  # noqa: E402

from tests.test_gui import FAST, configure, make_window, private_qsettings, run, settings  # noqa: E402,F401 (fixtures)
from whistle_stop.backends.results.summary import measured_gaps  # noqa: E402

pytestmark = pytest.mark.gui


def _histogram(window) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out = {}
    for name, curve in window.histogram.curves.items():
        x, y = curve.getData()
        out[name] = (np.asarray([] if x is None else x), np.asarray([] if y is None else y))
    return out


def test_replay_keeps_the_itl_histogram_of_the_measured_runs(qtbot, make_window):
    """Replay redraws the panes and live curves, not the records: the histogram still pools every
    measured gap afterwards (it was left empty, axes and a stale title, until the next run)."""
    window = make_window(FAST)
    configure(window, ["fast", "other"], new_tokens=20, repeats=2, warmup=1)
    result = run(qtbot, window)
    window.tabs.setCurrentWidget(window.histogram)
    before = _histogram(window)
    gaps = measured_gaps(result.runs, result.tokens)
    for name in ("fast", "other"):
        edges, counts = before[name]
        pooled = np.asarray(gaps[name])
        assert pooled.size == 2 * 19  # the measured runs' gaps: no warm-up, no TTFT
        assert np.array_equal(counts, np.histogram(pooled[pooled <= edges[-1]], bins=edges)[0])

    with qtbot.waitSignal(window.replayer.finished, timeout=30_000):
        assert window.replay(speed=4.0)
    after = _histogram(window)
    for name in ("fast", "other"):
        assert np.array_equal(after[name][0], before[name][0]) and np.array_equal(after[name][1], before[name][1])


def _under_legend(chart) -> list[tuple[str, int]]:
    """(engine, token) of every point of the chart's curves that its legend box covers."""
    box, view = chart.legend.sceneBoundingRect(), chart.plotItem.vb
    covered = []
    for name, curve in chart.curves.items():
        x, y = curve.getData()
        for index, (px, py) in enumerate(zip(x, y)):
            if box.contains(view.mapViewToScene(QPointF(float(px), float(py)))):
                covered.append((name, index))
    return covered


def test_the_race_legend_hides_no_engine_finishing(qtbot, make_window):
    """The race's curves climb to the top right, where the slowest run ends: the legend, top right
    on the other charts, covered that engine's last tokens there."""
    window = make_window(FAST)
    window.resize(1200, 900)
    configure(window, ["fast", "other"], new_tokens=40)
    run(qtbot, window)
    race = window.race
    window.tabs.setCurrentWidget(race)
    end = max(float(curve.getData()[0][-1]) for curve in race.curves.values())

    def fitted() -> bool:  # the view fits the whole runs (it is fitted when next painted)
        (_, x1), (_, y1) = race.plotItem.vb.viewRange()
        return end <= x1 < 1.1 * end and 40 <= y1 < 44

    qtbot.waitUntil(fitted)
    assert race.legend.isVisible() and race.point_count("other") == 40
    assert _under_legend(race) == []


def test_the_race_legend_covers_no_curve_when_tokens_come_late(qtbot):
    """No corner of the race's plot is free of data in every session: a fast engine climbs in the top
    left, one whose tokens come late climbs at the right edge, bottom to top (a legend in the bottom
    right hid it). The legend sits in its own column beside the plot, and inside what a PNG exports."""
    from whistle_stop.gui.charts import RaceChart

    race = RaceChart()
    qtbot.addWidget(race)
    race.resize(1000, 350)
    race.show()
    race.set_engines({"early": QColor("#1f77b4"), "late": QColor("#ff7f0e"), "steady": QColor("#2ca02c")})
    race.set_series("early", np.linspace(0.002, 0.1, 60))
    race.set_series("late", np.linspace(0.95, 1.0, 60))  # a long first token, then all at once
    race.set_series("steady", np.linspace(0.01, 0.9, 60))

    def fitted() -> bool:
        (_, x1), (_, y1) = race.plotItem.vb.viewRange()
        return 1.0 <= x1 < 1.1 and 60 <= y1 < 66

    def laid_out() -> bool:  # the plot's layout has made room for the legend's column
        return race.plotItem.sceneBoundingRect().contains(race.legend.sceneBoundingRect())  # (the exported item)

    qtbot.waitUntil(lambda: fitted() and laid_out())
    assert race.legend.isVisible() and _under_legend(race) == []
    assert not race.legend.sceneBoundingRect().intersects(race.plotItem.vb.sceneBoundingRect())


def test_the_latency_chart_names_the_run_it_draws_in_its_export(qtbot, make_window, tmp_path):
    """A pane shows its engine's typical run ("run 3 of 4"), and the charts draw that run: their legend
    says which, beside the engine, and an exported PNG holds the legend (the pane's tag it does not)."""
    from tests.test_gui_exports import legend_box, pixels
    from tests.test_gui_reopened import recorded
    from whistle_stop.backends.results.export import write_results

    records, tokens = [], []
    for repeat, ttft_ms, gap_ms in ((1, 300.0, 5.0), (2, 10.0, 4.0), (3, 10.0, 6.0), (4, 10.0, 30.0)):
        record, run_tokens = recorded("hf", repeat, [ttft_ms + gap_ms * i for i in range(20)])
        records.append(record)
        tokens += run_tokens
    record, run_tokens = recorded("onnx", 1, [8.0 + 3 * i for i in range(20)])
    write_results(tmp_path / "s", [*records, record], tokens + run_tokens, {"reference": "hf"})
    window = make_window()
    with qtbot.waitSignal(window.session_loaded):
        assert window.open_session(tmp_path / "s")
    assert window.grid.panes["hf"].status.text().startswith("run 3 of 4")
    for chart in (window.latency, window.race):
        labels = [label.text for _sample, label in chart.legend.items]
        assert labels == ["hf · run 3 of 4", "onnx · run 1 of 1"]

    latency = window.latency
    path = tmp_path / "latency.png"
    latency.export_png(path, width=1400)
    image = pixels(path)
    top, bottom, left, right = legend_box(image, latency.legend)
    assert right < image.shape[1] - 1 and bottom < image.shape[0] - 1  # whole, inside the image
    first = image[top : top + (bottom - top) // 2, left:right].reshape(-1, 3)  # the first entry's row
    assert len({tuple(colour) for colour in first}) > 10  # its text and swatch, not a blank strip


def test_a_dozen_engines_legend_fits_beside_a_short_plot(qtbot):
    """Thirteen entries are taller than a short chart: they go in columns, and the whole legend stays
    inside what a PNG exports."""
    from whistle_stop.gui.charts import RaceChart

    race = RaceChart()
    qtbot.addWidget(race)
    race.resize(1000, 300)
    race.show()
    race.set_engines({f"engine-{k}": QColor.fromHsv(k * 27, 200, 200) for k in range(13)})
    for k in range(13):
        race.set_series(f"engine-{k}", np.linspace(0.01 * (k + 1), 0.1 * (k + 1), 30))
        race.set_run(f"engine-{k}", "run 2 of 3")
    plot = race.plotItem
    qtbot.waitUntil(lambda: plot.sceneBoundingRect().contains(race.legend.sceneBoundingRect()))
    assert race.legend.columnCount > 1
    assert not race.legend.sceneBoundingRect().intersects(plot.vb.sceneBoundingRect())
    race.resize(1000, 900)  # room for one column again
    qtbot.waitUntil(lambda: race.legend.columnCount == 1)
    qtbot.waitUntil(lambda: plot.sceneBoundingRect().contains(race.legend.sceneBoundingRect()))


def test_a_race_of_milliseconds_keeps_its_axis_in_seconds(qtbot):
    """The axis label carries its unit ("(s)"): pyqtgraph's automatic scale would add "(x0.001)" to it for
    a race that ends within a second, and the ticks would read milliseconds under a label in seconds."""
    from whistle_stop.gui.charts import RaceChart

    race = RaceChart()
    qtbot.addWidget(race)
    race.set_engines({"fast": QColor("#1f77b4")})
    race.resize(800, 300)
    race.show()
    race.set_series("fast", np.linspace(0.001, 0.5, 60))
    axis = race.plotItem.getAxis("bottom")
    qtbot.waitUntil(lambda: 0.5 < axis.range[1] < 0.9)  # the race fitted (the empty plot spans 0 to 1)
    assert axis.labelString().count("(s)") == 1 and "x0.001" not in axis.labelString()
    assert axis.autoSIPrefixScale == 1.0
