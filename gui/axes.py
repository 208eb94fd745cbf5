"""Axes that read at a glance: a log axis labelled 1, 2, 5, 10, 20, 50 (never "5·10¹"), and an
axis of counts (token index, tokens) with whole-number ticks only, never 0.1 ... 0.9."""

from __future__ import annotations

import math

import pyqtgraph as pg

STEPS = (1, 2, 5)  # ticks at 1-2-5 of every decade


def plain(value: float) -> str:
    """A tick's label: '2', '50', '0.5', '1500', '0.02'."""
    if value >= 1:
        return f"{value:.0f}"
    return f"{value:.{max(0, -math.floor(math.log10(value)))}f}"


def decade_ticks(low_log: float, high_log: float) -> list[float]:
    """The 1-2-5 values of every decade between two log10 bounds (as plain values)."""
    values = []
    for decade in range(math.floor(low_log) - 1, math.ceil(high_log) + 1):
        for step in STEPS:
            value = step * 10.0**decade
            if low_log <= math.log10(value) <= high_log:
                values.append(value)
    return values


class LogAxis(pg.AxisItem):
    """In log mode: major ticks at 1-2-5 of each decade (1-2-5 and 10, 20, 50...), labelled plainly."""

    def tickValues(self, minVal: float, maxVal: float, size: float):
        if not self.logMode:
            return super().tickValues(minVal, maxVal, size)
        values = decade_ticks(minVal, maxVal)
        if len(values) > max(3, size / 40):  # too dense for the axis's length: decades only
            values = [v for v in values if math.isclose(math.log10(v) % 1, 0, abs_tol=1e-9)] or values
        return [(None, [math.log10(v) for v in values])]

    def tickStrings(self, values, scale, spacing):
        if not self.logMode:
            return super().tickStrings(values, scale, spacing)
        return [plain(10**v * scale) for v in values]


class CountAxis(pg.AxisItem):
    """Whole numbers only: a count has no tick at 0.5."""

    def tickSpacing(self, minVal: float, maxVal: float, size: float):
        levels = super().tickSpacing(minVal, maxVal, size)
        whole = [(max(1.0, spacing), offset) for spacing, offset in levels if spacing >= 1]
        return whole or [(1.0, 0.0)]
