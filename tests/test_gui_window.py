"""The window as a person sees it: nothing wider than the screen, no value label clipped or run into
another, no pane left "waiting" once the session has ended. Offscreen; every wait is on a signal or
a condition."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pyqtgraph")
pytest.importorskip("pytestqt")

from PySide6.QtWidgets import QApplication  # noqa: E402

from tests.fake_engines import spec  # noqa: E402
from tests.test_gui import make_window, private_qsettings, settings  # noqa: E402,F401 (fixtures)

pytestmark = pytest.mark.gui
RUN_TIMEOUT_MS = 120_000


def test_a_long_pane_status_never_widens_the_window(make_window):
    """A QLabel is as wide as its text: an engine's long error, or three panes of a run's figures,
    made the window wider than a 1280-pixel screen. The line is cut with "…" and whole in its tooltip."""
    window = make_window()
    window.view.show_engines(["a", "b", "c"])
    error = "RemoteError: connection refused by 127.0.0.1:9 (is the server running?) " * 4
    window.grid.panes["a"].show_error(error, "the traceback")
    for name in ("b", "c"):
        window.grid.panes[name].set_status("run 2 of 3  ·  TTFT 109.8 ms  ·  0.89 ms/token  ·  169 tok/s")
    assert all(pane.minimumSizeHint().width() < 1280 // 3 for pane in window.grid.panes.values())
    window.resize(1280, 720)
    QApplication.sendPostedEvents()  # the layouts settle: the window keeps the size asked for
    assert window.width() == 1280
    status = window.grid.panes["a"].status
    assert status.text() == error and status.elided().endswith("…")
    assert status.toolTip() == "the traceback"  # an error keeps its detail as the tooltip


def test_panes_of_engines_a_cancel_never_reached_say_so(qtbot, make_window):
    """Fair mode, cancelled during the first engine's warm-up: the others never ran, and their panes
    must not go on saying "waiting for its turn" once the session has ended."""
    window = make_window({"first": spec("first", decode_s=0.02), "second": spec("second", decode_s=0.002)})
    setup = window.setup
    setup.set_model_spec("random:tiny")
    setup.set_engines(["first", "second"])
    setup.prompt.setPlainText("Hello world, this is")
    setup.new_tokens.setValue(500)
    setup.repeats.setValue(2)
    setup.warmup.setValue(1)  # a warm-up streams live in fair mode
    setup.fair.setChecked(True)
    setup.flush()
    assert window.start_run(), setup.problem()
    started = window.grid.panes[window.setup.selected_engines()[0]]
    qtbot.waitUntil(lambda: started.token_count >= 3, timeout=RUN_TIMEOUT_MS)
    with qtbot.waitSignal(window.bench.job.result, timeout=30_000) as blocker:
        window.actions.cancel.trigger()
    ran = {r.backend for r in blocker.args[0].runs}
    never = [name for name in window.grid.panes if name not in ran]
    assert never, "the cancel came after every engine had run"
    for name in never:
        pane = window.grid.panes[name]
        assert pane.tag.text() == "not run" and "ended before its turn" in pane.status.text()


def _summaries(engines: int):
    from tests.test_stats import _run
    from whistle_stop.backends.results.summary import summarize_backends

    runs = [_run(f"engine-{e}", r, 20.0 + 5 * e + r) for e in range(engines) for r in range(1, 4)]
    return summarize_backends(runs)


def test_summary_bar_labels_are_neither_clipped_nor_run_together(qtbot):
    """The tallest bar's label sat above the plot's top in a short plot (the range kept a fixed 22%
    for it, fewer pixels than the text), and labels of narrow bars ran into each other."""
    from whistle_stop.gui.summary_chart import SummaryBars

    bars = SummaryBars()
    qtbot.addWidget(bars)
    bars.resize(900, 130)
    bars.show()
    qtbot.waitExposed(bars)
    bars.set_summaries(_summaries(3), {})

    def inside(plot, labels) -> bool:
        box = plot.getViewBox().sceneBoundingRect()
        return all(box.top() <= label.sceneBoundingRect().top() for label in labels if label.isVisible())

    qtbot.waitUntil(lambda: all(inside(p, labels) for p, labels in zip(bars.plots, bars._labels)))
    bars.resize(400, 130)  # eight engines in narrow plots: no two labels overlap
    bars.set_summaries(_summaries(8), {})

    def apart(labels) -> bool:  # the texts themselves, without their items' blank margins
        margin = labels[0].textItem.document().documentMargin() if labels else 0.0
        rects = [label.sceneBoundingRect().adjusted(margin, 0, -margin, 0) for label in labels if label.isVisible()]
        return not any(a.intersects(b) for i, a in enumerate(rects) for b in rects[i + 1 :])

    qtbot.waitUntil(lambda: all(apart(labels) for labels in bars._labels))
    qtbot.waitUntil(lambda: all(inside(p, labels) for p, labels in zip(bars.plots, bars._labels)))


def test_summary_bars_are_never_cut_off_by_the_verdict_beside_them(qtbot):
    """The plots' titles and axes need some 770 pixels: the splitter gave the bars less at a small
    window, and the last plot (peak RSS) was cut off at the right. The verdict gives way instead."""
    from whistle_stop.gui.summary_chart import SummaryView

    view = SummaryView()
    qtbot.addWidget(view)
    view.resize(1150, 330)
    view.show()
    qtbot.waitExposed(view)
    view.set_summaries(_summaries(3), {}, None, False)
    bars = view.bars
    qtbot.waitUntil(lambda: bars.ci.sceneBoundingRect().right() <= bars.viewport().width())
    assert bars.plots[-1].sceneBoundingRect().right() <= bars.viewport().width()
