"""One verdict everywhere: the CLI under bench's table, the window's Summary, the HTML report and
Copy summary as Markdown show the same text (results/verdict.py); the window's engine picker
(presets, filter, groups) and its estimate before Run."""

from __future__ import annotations

import html
import io

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402

from tests.test_verdict import _run  # noqa: E402
from whistle_stop.backends import registry  # noqa: E402

pytestmark = pytest.mark.gui


@pytest.fixture
def window(qtbot, tmp_path):
    from whistle_stop.gui.main_window import MainWindow
    from whistle_stop.gui.settings import settings_in

    made = MainWindow(settings=settings_in(tmp_path / "settings"))
    qtbot.addWidget(made)
    return made


def _records():
    runs = [_run("hf", r, 40.0 + r, weights="random") for r in range(1, 4)]
    runs += [
        _run(
            "onnx-int8",
            r,
            6.0 + r / 10,
            dtype="int8",
            weights="random",
            agree=41,
            build_s=18.6,
            cold=1.1 if r == 1 else None,
        )
        for r in range(1, 4)
    ]
    runs += [_run("native-int8", r, 6.05 + r / 10, dtype="int8", weights="random", agree=41) for r in range(1, 4)]
    runs.append(_run("boom", 0, None, status="crashed", error="worker died"))
    environment = {
        "reference": "hf",
        "model": {"id": "random:tiny", "weights": "random"},
        "settings": {"backends": ["hf", "onnx-int8", "native-int8", "boom"]},
    }
    return runs, environment


def _texts(verdict):
    """Each line's text without its list marker: what every view must hold."""
    return [line.lstrip(" -") for line in verdict.lines()]


def test_cli_window_report_and_markdown_show_the_same_verdict(window, tiny_model, tmp_path):
    from rich.console import Console

    from whistle_stop.backends.cli.bench_command import print_summary
    from whistle_stop.backends.report.html import build_report
    from whistle_stop.backends.results.export import write_results
    from whistle_stop.backends.results.verdict import verdict
    from whistle_stop.backends.runs.bench import BenchConfig, BenchResult
    from whistle_stop.gui.session_data import SessionData

    runs, environment = _records()
    expected = verdict(runs, environment["settings"]["backends"], "hf")
    assert expected.caveat(expected.caveats[0].kind) and "not distinguishable" in expected.text()
    config = BenchConfig(model="random:tiny", backends=tuple(environment["settings"]["backends"]))
    result = BenchResult(config, tiny_model, [1, 2, 3], runs, [], environment)
    buffer = io.StringIO()
    print_summary(result, Console(file=buffer, width=300))
    cli = buffer.getvalue()
    window.view.show(SessionData.from_folder(runs, [], environment))
    shown = window.summary.verdict.toPlainText()
    folder = tmp_path / "results"
    write_results(folder, runs, [], environment)
    page = html.unescape(build_report([folder], tmp_path / "report").read_text(encoding="utf-8"))
    markdown = window.copy_markdown()
    for text in _texts(expected):
        assert text in cli, text
        assert text in shown, text
        assert text in page, text
        assert text in markdown, text
    assert "one-time build 18.60 s" in shown and "boom (crashed: worker died)" in shown


def test_a_session_run_until_sure_shows_its_rounds_and_widths_under_the_verdict(window):
    """--repeats auto's lines (rounds, why they stopped, each engine's repeats and width) are bench's, and a
    reopened session shows them from its environment.json."""
    from whistle_stop.backends.results.sequential import SequentialRule, Width
    from whistle_stop.backends.runs.adaptive import AdaptiveOutcome
    from whistle_stop.gui.session_data import SessionData

    runs, environment = _records()
    outcome = AdaptiveOutcome(SequentialRule(5.0, 40), 12, "max repeats", {"hf": Width(12, 40.0, 38.0, 43.0, 0.99)})
    environment["adaptive_repeats"] = outcome.as_dict()
    window.view.show(SessionData.from_folder(runs, [], environment))
    shown = window.summary.verdict.toPlainText()
    for line in outcome.lines():
        assert line.strip() in shown, line
    assert "hf: 12 repeats, median interval 12.5% of its median (target not reached)" in shown


def test_presets_filter_and_groups_in_the_engine_picker(window, monkeypatch):
    here = {"hf", "onnx", "onnx-int8", "numpy", "native-int8"}
    monkeypatch.setattr(registry, "available", lambda name: (True, "") if name in here else (False, "not here"))
    from whistle_stop.gui.engine_picker import EnginePicker

    picker = EnginePicker(list(registry.ENGINES.values()))
    choice = picker.apply_preset("best-of-family")
    assert set(picker.selected()) == set(choice.engines) <= here and picker.selected()[0] == "hf"
    assert "skipped" in picker.preset_note.text() and "skipped nanogpt: not here" in picker.preset_note.toolTip()
    assert picker.headers()[:3] == ["hf", "torch static", "nanogpt"]  # by family, in registry order
    picker.filter.setText("int8")
    assert set(picker.visible_names()) == {
        n
        for n in registry.names()
        if "int8" in n or "int8" in registry.get(n).description.lower() or registry.get(n).precision == "int8"
    }
    hidden_headers = [
        picker.list.item(i).text()
        for i in range(picker.list.count())
        if picker.list.item(i).data(Qt.ItemDataRole.UserRole + 1) and picker.list.item(i).isHidden()
    ]
    assert "numpy runtime" in hidden_headers  # no int8 engine there
    picker.filter.clear()
    picker.grouping.setCurrentIndex(1)
    assert picker.headers()[:4] == ["fp32", "bf16/f16", "int8", "int4"]
    assert set(picker.selected()) == set(choice.engines)  # regrouping keeps the ticks
    numpy = next(
        picker.list.item(i)
        for i in range(picker.list.count())
        if picker.list.item(i).data(Qt.ItemDataRole.UserRole) == "numpy"
    )
    numpy.setCheckState(Qt.CheckState.Unchecked)  # by hand: no longer the preset
    assert picker.preset.currentIndex() == 0 and not picker.preset_note.isVisible()


def test_the_estimate_before_run_counts_runs_and_missing_builds(window, tiny_model, qtbot, monkeypatch, tmp_path):
    from whistle_stop.backends.results import engine_history

    monkeypatch.setattr(engine_history, "lookup", lambda *_: None)  # no history, whatever ran before in this session
    setup = window.setup
    setup.set_model_spec("random:tiny")
    qtbot.waitUntil(lambda: setup.model_info.files is not None, timeout=10_000)
    # Then an empty artefact cache, whatever this session (or this worker) exported before
    monkeypatch.setenv("WHISTLE_STOP_CACHE", str(tmp_path / "cache"))
    setup.set_engines(["hf", "onnx-int8"])
    setup.repeats.setValue(3)
    setup.warmup.setValue(1)
    text = setup.estimate_label.text()
    assert text.startswith("Run (bench): 8 runs: 2 engines x (1 warm-up + 3 repeats)")  # beside every tab: whose
    assert "one-time builds first: never timed here: onnx-int8" in text  # the empty cache has no ONNX export
    assert "a rough guess for hf, onnx-int8 (never run here with this model)" in text  # no history: a guess, said so
