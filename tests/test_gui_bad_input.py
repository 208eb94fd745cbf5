"""The window's bad input and failures beyond the setup panel's basics: text that only looks like a
number, a damaged settings file, a chart or a profile folder that cannot be written, a cancelled
profile. Each is one line saying what is wrong, and nothing on screen is lost.

Every wait is on a signal or a condition (never a fixed sleep)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pyqtgraph")
pytest.importorskip("pytestqt")

from tests.fake_engines import spec  # noqa: E402
from tests.test_gui import (  # noqa: E402, F401 (make_window, private_qsettings, settings: fixtures)
    FAST,
    RUN_TIMEOUT_MS,
    configure,
    live_children,
    make_window,
    private_qsettings,
    run,
    settings,
)

pytestmark = pytest.mark.gui
SUPERSCRIPT_TWO = "²"  # str.isdigit() says yes, int() says no


def test_text_that_only_looks_like_a_number_is_refused_with_a_reason(make_window):  # noqa: F811 (the fixture)
    window = make_window(FAST, show=False)
    configure(window, ["fast"], new_tokens=5)
    for name, field in (("native-spec", "k"), ("vllm", "ngram_tokens")):
        form = window.setup.option_forms[name]
        form.edits[field].setText(SUPERSCRIPT_TWO)
        assert SUPERSCRIPT_TWO in form.problem()  # said, not raised in the form's slot
        form.edits[field].setText("")

    sweep = window.sweep_tab
    sweep.prompt_lengths.setText(f"16, {SUPERSCRIPT_TWO}")
    assert "is not a whole number" in sweep.reason.text() and not sweep.run_button.isEnabled()
    assert sweep.start() is False

    load = window.load_tab
    load.concurrency.setText(SUPERSCRIPT_TWO)
    assert "is not a whole number" in load.reason.text() and not load.run_button.isEnabled()


def test_damaged_saved_numbers_are_clamped_and_the_window_opens(qtbot, settings, use_engines):  # noqa: F811 (the fixture)
    from whistle_stop.gui.main_window import MainWindow

    huge = 10**12  # past C's int: a spin box's setValue raises OverflowError
    settings.setValue(
        "ui/prefs", json.dumps({"serve": {"port": huge, "queue": -huge}, "quality": {"max_length": huge}})
    )
    window = MainWindow(settings=settings)
    qtbot.addWidget(window)
    assert window.serve_tab.port.value() == window.serve_tab.port.maximum()
    assert window.serve_tab.queue.value() == window.serve_tab.queue.minimum()
    assert window.quality_tab.max_length.value() == window.quality_tab.max_length.maximum()


def test_a_chart_that_cannot_be_written_is_said_and_not_claimed(qtbot, make_window, tmp_path):  # noqa: F811 (the fixture)
    window = make_window(FAST)
    configure(window, ["fast"], new_tokens=5)
    run(qtbot, window)
    folder = tmp_path / "charts"
    (folder / "latency.png").mkdir(parents=True)  # Qt's save fails there, and says only False
    written = window.export_charts(folder)
    assert all(path.name != "latency.png" for path in written)
    assert "Could not write the charts" in window.last_error and "Wrote" not in window.state.text()
    assert window.view.data.runs  # the results are still here
    assert len(window.export_charts(tmp_path / "fine")) == 4


def test_a_profile_folder_that_cannot_be_written_is_refused_before_it_runs(qtbot, make_window, tmp_path):  # noqa: F811 (the fixture)
    window = make_window(FAST, show=False)
    configure(window, ["fast"], new_tokens=5)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    window.profile_tab.out.setText(str(blocker / "profile"))
    assert window.profile_tab.start() is False
    assert window.last_error.startswith("cannot write to") and "Traceback" not in window.last_error
    assert not window.profile_tab.job.controller.running and not live_children()


def test_a_cancelled_profile_names_no_engine_as_failed(qtbot, make_window, tmp_path):  # noqa: F811 (the fixture)
    window = make_window({"slow": spec("slow", decode_s=0.02)})
    configure(window, ["slow"], new_tokens=300)
    tab = window.profile_tab
    tab.out.setText(str(tmp_path / "profile"))
    assert tab.start(), tab.problem()
    qtbot.waitUntil(lambda: "profiling slow" in tab.status.text() and bool(live_children()), timeout=RUN_TIMEOUT_MS)
    with qtbot.waitSignal(tab.finished, timeout=30_000):
        tab.job.controller.cancel()
    assert tab.status.text().startswith("Profile cancelled") and "failed" not in tab.status.text()
    qtbot.waitUntil(lambda: not live_children(), timeout=15_000)
