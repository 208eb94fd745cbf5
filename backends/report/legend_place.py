"""Where a figure's legend goes, Qt-free: the emptiest corner of the plot, or beside it.

Everything is in pixels (y down). Marks are what carries information (points, bars, error bars with
their caps, whiskers, limit lines' labels): a legend never covers one. Lines (curves between points,
limit lines) may pass under it, as few as can be: among the corners that cover no mark, the one
they cross least. With no such corner it goes outside the plot, right of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

MARGIN = 10.0  # px between the legend and the plot's edges
CLEARANCE = 3.0  # px kept between the legend and a mark


@dataclass(frozen=True)
class Box:
    left: float
    top: float
    right: float
    bottom: float

    @property
    def width(self) -> float:
        return self.right - self.left

    @property
    def height(self) -> float:
        return self.bottom - self.top

    def grown(self, by: float) -> Box:
        return Box(self.left - by, self.top - by, self.right + by, self.bottom + by)

    def overlap(self, other: Box) -> float:
        """The area the two share (0 when they only touch)."""
        width = min(self.right, other.right) - max(self.left, other.left)
        height = min(self.bottom, other.bottom) - max(self.top, other.top)
        return width * height if width > 0 and height > 0 else 0.0

    def contains(self, other: Box) -> bool:
        inside_x = self.left <= other.left and other.right <= self.right
        return inside_x and self.top <= other.top and other.bottom <= self.bottom


@dataclass(frozen=True)
class Segment:
    x0: float
    y0: float
    x1: float
    y1: float

    def length_in(self, box: Box) -> float:
        """How much of the segment lies in `box` (Liang-Barsky clipping)."""
        dx, dy = self.x1 - self.x0, self.y1 - self.y0
        start, end = 0.0, 1.0
        for p, q in (
            (-dx, self.x0 - box.left),
            (dx, box.right - self.x0),
            (-dy, self.y0 - box.top),
            (dy, box.bottom - self.y0),
        ):
            if p == 0:
                if q < 0:
                    return 0.0
                continue
            t = q / p
            if p < 0:
                start = max(start, t)
            else:
                end = min(end, t)
            if start > end:
                return 0.0
        return (end - start) * (dx * dx + dy * dy) ** 0.5


class Corner(Enum):
    """A corner of the plot, as pyqtgraph's anchors name it: (x, y) fractions of the plot, y down."""

    TOP_RIGHT = (1, 0)
    TOP_LEFT = (0, 0)
    BOTTOM_RIGHT = (1, 1)
    BOTTOM_LEFT = (0, 1)

    def offset(self) -> tuple[float, float]:
        """The legend's offset from its corner, inwards."""
        x, y = self.value
        return (-MARGIN if x else MARGIN, -MARGIN if y else MARGIN)

    def box(self, plot: Box, size: tuple[float, float]) -> Box:
        """The legend's box when anchored at this corner of `plot`."""
        (x, y), (width, height) = self.value, size
        left = plot.right - MARGIN - width if x else plot.left + MARGIN
        top = plot.bottom - MARGIN - height if y else plot.top + MARGIN
        return Box(left, top, left + width, top + height)


CORNERS = (Corner.TOP_RIGHT, Corner.TOP_LEFT, Corner.BOTTOM_RIGHT, Corner.BOTTOM_LEFT)
RISING_CORNERS = (Corner.TOP_LEFT, Corner.BOTTOM_RIGHT, Corner.TOP_RIGHT, Corner.BOTTOM_LEFT)  # log-log


@dataclass(frozen=True)
class Placement:
    corner: Corner | None  # None: outside the plot, right of it
    columns: int


def place(
    plot: Box,
    sizes: dict[int, tuple[float, float]],
    marks: Sequence[Box],
    lines: Sequence[Segment] = (),
    corners: Sequence[Corner] = CORNERS,
) -> Placement:
    """The legend's corner and number of columns: `sizes` is its (width, height) per number of
    columns, in the order they are preferred, `corners` likewise. A corner qualifies when the legend
    fits in the plot there and covers no mark; of those, the one the lines cross least (the earlier
    on a tie). None qualifies: outside, in the fewest columns that fit the plot's height."""
    best: tuple[float, int] | None = None
    chosen: Placement | None = None
    rank = 0
    for columns, size in sizes.items():
        for corner in corners:
            rank += 1
            box = corner.box(plot, size)
            if not plot.contains(box):
                continue
            guarded = box.grown(CLEARANCE)
            if any(guarded.overlap(mark) > 0 for mark in marks):
                continue
            score = (sum(line.length_in(box) for line in lines), rank)
            if best is None or score < best:
                best, chosen = score, Placement(corner, columns)
    if chosen is not None:
        return chosen
    fitting = [columns for columns, (_, height) in sorted(sizes.items()) if height <= plot.height]
    return Placement(None, fitting[0] if fitting else max(sizes))
