"""The window's per-token charts against the records they draw: the ITL histogram and the race."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pyqtgraph")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QPointF  # noqa: E402

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
