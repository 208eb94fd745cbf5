"""File > Compare sessions…: the dialog shows `compare`'s table, refuses differing settings in one
line, and the setup's "until sure" builds a --repeats auto config."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from tests.test_compare import _folder, _noisy  # noqa: E402
from tests.test_gui import make_window, private_qsettings, settings  # noqa: E402,F401 (fixtures)
from whistle_stop.backends.report.comparison_text import HEADERS  # noqa: E402

pytestmark = pytest.mark.gui


def test_compare_sessions_shows_the_verdicts(qtbot, make_window, tmp_path):  # noqa: F811
    base = _folder(tmp_path / "a", {"hf": _noisy(2.0), "numpy": _noisy(3.0)})
    new = _folder(tmp_path / "b", {"hf": _noisy(2.6, seed=1), "numpy": _noisy(3.0, seed=2)})
    window = make_window(show=False)
    texts = [a.text() for a in window.menuBar().actions()[0].menu().actions()]
    assert "Compare sessions…" in texts
    dialog = window.compare_sessions()
    dialog.base.setText(str(base))
    dialog.new.setText(str(new))
    dialog.compare_button.click()
    verdict = HEADERS.index("verdict")
    cells = {
        (dialog.table.item(r, 0).text(), dialog.table.item(r, 1).text()): dialog.table.item(r, verdict).text()
        for r in range(dialog.table.rowCount())
    }
    assert cells[("hf", "ms/token (ms)")] == "slower"
    assert cells[("numpy", "ms/token (ms)")] == "not distinguishable"
    dialog.close()


def test_compare_sessions_refuses_different_settings_unless_allowed(qtbot, tmp_path):
    from whistle_stop.gui.compare_dialog import CompareSessionsDialog

    base = _folder(tmp_path / "a", {"hf": _noisy(2.0)})
    new = _folder(tmp_path / "b", {"hf": _noisy(2.0)}, new_tokens=40)
    dialog = CompareSessionsDialog()
    qtbot.addWidget(dialog)
    dialog.base.setText(str(base))
    dialog.new.setText(str(new))
    assert not dialog.compare()
    assert "new_tokens 20 vs 40" in dialog.notes.text() and dialog.table.rowCount() == 0
    dialog.allow_different.setChecked(True)
    assert dialog.compare() and dialog.table.rowCount() > 0


def test_until_sure_builds_a_repeats_auto_config(qtbot, make_window):  # noqa: F811
    window = make_window(show=False)
    window.setup.until_sure.setChecked(True)
    window.setup.target_width.setValue(3.0)
    config = window.setup.config()
    assert config.repeats_auto and config.target_width_pct == 3.0 and config.repeats >= 8
