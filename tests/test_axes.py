"""Axes at a glance: a log latency axis labelled 2, 5, 10, 20, 50; no meaningless ticks before data."""

import math

import numpy as np
import pytest

pytestmark = pytest.mark.gui


def test_log_axis_is_labelled_plainly_at_1_2_5(qapp):
    from whistle_stop.gui.axes import LogAxis

    axis = LogAxis(orientation="left")
    axis.setLogMode(False, True)
    ((_, values),) = axis.tickValues(math.log10(1.3), math.log10(60), 400)
    assert axis.tickStrings(values, 1.0, 1.0) == ["2", "5", "10", "20", "50"]
    assert "·" not in "".join(axis.tickStrings([math.log10(0.5), 1.0], 1.0, 1.0))
    ((_, sparse),) = axis.tickValues(0.0, 6.0, 100)  # six decades on a short axis: decades only
    assert axis.tickStrings(sparse, 1.0, 1.0) == ["1", "10", "100", "1000", "10000", "100000", "1000000"]


def test_count_axis_has_no_fractional_ticks(qapp):
    from whistle_stop.gui.axes import CountAxis

    axis = CountAxis(orientation="bottom")
    for low, high in ((0.0, 1.0), (0.0, 3.0), (0.0, 1000.0)):
        for spacing, _offset in axis.tickSpacing(low, high, 600):
            assert spacing >= 1 and float(spacing).is_integer()


def test_an_empty_chart_shows_no_tick_values_until_data_arrives(qapp):
    from PySide6.QtGui import QColor

    from whistle_stop.gui.charts import HistogramChart, LatencyChart

    chart = LatencyChart()
    assert not chart.values_shown
    chart.set_engines({"hf": QColor("#358be2")})
    assert not chart.values_shown
    chart.set_series("hf", np.array([30.0, 2.0, 2.5]), ["a", "b", "c"])
    assert chart.values_shown
    left = chart.plotItem.getAxis("left")
    assert left.logMode and type(left).__name__ == "LogAxis"
    histogram = HistogramChart()
    histogram.set_engines({"hf": QColor("#358be2")})
    histogram.set_data({"hf": np.array([])})
    assert not histogram.values_shown
    histogram.set_data({"hf": np.array([2.0, 2.1, 2.2])})
    assert histogram.values_shown
