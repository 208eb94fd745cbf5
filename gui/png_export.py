"""A chart's PNG: laid out at a fixed size whatever its size on screen (a tab never shown included), so
its text has one size against the plot in every export, rendered once its layout holds still."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pyqtgraph as pg
import pyqtgraph.exporters
from PySide6.QtCore import QCoreApplication, QEvent, QRectF, QSizeF
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QGraphicsItem, QGraphicsWidget

from whistle_stop.backends.storage.atomic import check_writable_dir

EXPORT_SCALE = 1.4  # an exported PNG's pixels per pixel of its layout


def save_png(
    item: pg.GraphicsWidget,
    path: Path,
    size: QSizeF,
    width: int | None = None,
    redraw: Callable[[], None] = lambda: None,
) -> None:
    """`item` laid out at `size` (see `laid_out`) and written as a PNG `width` pixels wide
    (`EXPORT_SCALE` times `size` by default)."""
    with laid_out(item, size, redraw):
        write_png(item, path, width or round(EXPORT_SCALE * size.width()))


@contextmanager
def laid_out(item: pg.GraphicsWidget, size: QSizeF, redraw: Callable[[], None] = lambda: None) -> Iterator[None]:
    """`item` laid out at `size` (its layout's pixels) for an export, then as it was.

    Every export is laid out alike, whatever the item's size on screen: text keeps its size in pixels,
    so a PNG of a wide, short dock and one of a tab never shown (its view gets no size while hidden:
    Qt's default 640x480, laid out once) had titles, ticks and legends of different sizes against the
    plot. `redraw` draws again what was drawn for the size it had (called at the export's size, then
    at the item's own)."""
    before = item.geometry()
    try:
        item.setGeometry(QRectF(before.topLeft(), size))
        _settle(item)
        redraw()
        yield
    finally:
        item.setGeometry(before)
        _settle(item)
        redraw()


def write_png(item: pg.GraphicsWidget, path: Path, width: int) -> None:
    """`item` as it is laid out, as a PNG `width` pixels wide; OSError if it was not written (Qt's save
    says only False, and a chart reported as written must be on disk)."""
    if not _render(item, width).save(str(path)):
        raise OSError(f"cannot write {path}")


def _settle(item: pg.GraphicsWidget) -> None:
    """Lay out now what waits for Qt's next layout pass (a resized layout, an axis that grew), within
    the item: the window's own widgets are laid out by the event loop, as ever."""
    for widget in _widgets(item):
        QCoreApplication.sendPostedEvents(widget, QEvent.Type.LayoutRequest)


def _render(item: pg.GraphicsWidget, width: int) -> QImage:
    """The item as an image, once its layout holds still: axes fit their width to the tick labels they
    paint, so a first paint at a new size may move the plot (a hidden tab's axes were drawn from a stale
    layout, tick labels missing and the axis title over them)."""
    image = QImage()
    for _ in range(3):
        _settle(item)
        layout = [widget.sceneBoundingRect() for widget in _widgets(item)]
        exporter = pg.exporters.ImageExporter(item)
        exporter.parameters()["width"] = int(width)
        image = exporter.export(toBytes=True)
        _settle(item)
        if [widget.sceneBoundingRect() for widget in _widgets(item)] == layout:
            break
    return image


def _widgets(item: QGraphicsItem) -> list[QGraphicsWidget]:
    """The item and the widgets in it, each before those inside it."""
    inside = [widget for child in item.childItems() for widget in _widgets(child)]
    return [item, *inside] if isinstance(item, QGraphicsWidget) else inside


def write_pngs(folder: Path, writers: Mapping[str, Callable[[Path], None]], written: list[Path]) -> None:
    """Each `writers` entry's file, `folder / name`, appended to `written` once it is there: the Bench's
    charts and a tab's figures alike. OSError at the first that fails (an unwritable folder before any
    file, with its plain why), the ones before it kept."""
    check_writable_dir(folder)
    for name, write in writers.items():
        path = folder / name
        write(path)
        written.append(path)
