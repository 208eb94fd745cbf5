"""The Sweep and Quality tabs, report export and the remote engine's settings, offscreen.

Sweeps use scripted engines and a fake bandwidth probe (no benchmark runs here); quality runs
the real hf and hf-int8 on random:tiny over a short text. Every wait is on a signal or a
condition, never a fixed sleep.
"""

from __future__ import annotations

import csv
import json
import shutil
import socket

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pyqtgraph")
pytest.importorskip("pytestqt")

import pyqtgraph as pg  # noqa: E402
from PySide6.QtCore import QSettings  # noqa: E402

from tests.fake_engines import spec  # noqa: E402
from tests.test_gui import configure, live_children, run  # noqa: E402
from whistle_stop.backends.machine.bandwidth import Bandwidth  # noqa: E402

pytestmark = pytest.mark.gui
TIMEOUT_MS = 120_000
SECRET = "sk-gui-test-5f1e0c9a7b3d"
TEXT = (
    "The lighthouse keeper climbed the stairs every evening to light the lamp. Ships passed in the night, "
    "and the keeper wrote their names in a book. "
) * 6


@pytest.fixture(autouse=True)
def private_qsettings(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("qsettings"))
    for fmt in (QSettings.Format.NativeFormat, QSettings.Format.IniFormat):
        QSettings.setPath(fmt, QSettings.Scope.UserScope, folder)


@pytest.fixture(autouse=True)
def fake_bandwidth(monkeypatch):
    """The memory-bandwidth probe (sweep, profile) is a benchmark: a fixed answer instead."""
    for target in ("sweep.probe_bandwidth", "profile.fresh_bandwidth"):
        monkeypatch.setattr(
            f"whistle_stop.backends.runs.{target}",
            lambda threads, *_, **__: Bandwidth(10.0, 9.0, 1 << 30, threads, 5, "test cpu", "now"),
        )


@pytest.fixture
def settings(tmp_path):
    from whistle_stop.gui.settings import settings_in

    return settings_in(tmp_path / "settings")


@pytest.fixture
def make_window(use_engines, qtbot, settings):
    """`make_window(specs)`: the window, with these test engines in the registry (`use_engines`)."""
    from whistle_stop.gui.main_window import MainWindow

    def make(specs=None):
        use_engines(*(specs or {}).values())
        window = MainWindow(settings=settings)
        qtbot.addWidget(window)  # closed (cancelling any job) at teardown
        window.show()
        return window

    return make


def _sweep(window, tmp_path, prompts: str, news: str, folder: str = "sweep"):
    tab = window.sweep_tab
    tab.prompt_lengths.setText(prompts)
    tab.new_lengths.setText(news)
    tab.folder.setText(str(tmp_path / folder))
    return tab


def _measured_rows(folder) -> list[dict]:
    with (folder / "runs.csv").open(encoding="utf-8") as f:
        return [r for r in csv.DictReader(f) if r["is_warmup"] == "false"]


def test_sweep_skips_what_does_not_fit_runs_alone_and_plots(qtbot, make_window, tmp_path):
    window = make_window({n: spec(n, decode_s=0.002) for n in ("a", "b")})
    configure(window, ["a", "b"], repeats=1, warmup=0)
    tab = _sweep(window, tmp_path, "4, 1000", "3, 30")
    assert tab.grid.states[(1000, 30)] == "skipped"  # 1000 + 30 > 1024, before anything runs
    assert "exceed the context of 1024" in tab.grid.reasons[(1000, 30)]
    tab.new_lengths.setText("3, x")
    assert "'x' is not a whole number" in tab.reason.text() and not tab.run_button.isEnabled()
    tab.new_lengths.setText("3, 30")
    assert tab.run_button.isEnabled()
    assert not tab.progress.isTextVisible()  # no "0 / 1 cells" beside a grid of four before a plan

    with qtbot.waitSignal(tab.finished, timeout=TIMEOUT_MS) as blocker:
        assert tab.start()
        # one job at a time: the bench and the quality evaluation wait for the sweep
        assert not window.actions.run.isEnabled() and not window.setup.run_button.isEnabled()
        assert window.start_run() is False
        assert not window.quality_tab.run_button.isEnabled()
        assert window.quality_tab.reason.text() == "a sweep is running"
    result = blocker.args[0]

    assert not result.cancelled and not result.failed
    assert tab.grid.states == {(4, 3): "done", (4, 30): "done", (1000, 3): "done", (1000, 30): "skipped"}
    assert tab.progress.isTextVisible() and tab.progress.text() == "3 / 3 cells"
    assert "skipped: prompt 1000, new 30" in tab.log.toPlainText()
    for plot, figure in zip(tab.figures.plots, tab.figures.figures):
        points = [item for item in plot.listDataItems() if item.getData()[0] is not None and len(item.getData()[0])]
        curves = [limit for limit in figure.limits if limit.x]  # drawn as data: prefill's roofline
        assert len(points) == 2 + len(curves), figure.name  # one curve per engine
        assert curves or any(isinstance(item, pg.InfiniteLine) for item in plot.items), figure.name  # the limit
    assert [limit.label.split(" (")[0] for limit in tab.figures.figures[0].limits] == ["fp32 roofline"]
    assert window.actions.run.isEnabled() and window.quality_tab.reason.text() == ""

    report = window.export_report(tmp_path / "report")  # the sweep folder is in it
    html = report.read_text(encoding="utf-8")
    assert "data:image/png;base64," in html and "sweep" in html

    window.setup.repeats.setValue(2)  # other settings into the same folder: refused, in this tab's words
    with qtbot.waitSignal(tab.error, timeout=TIMEOUT_MS) as refused:
        assert tab.start()
    assert "repeats: 1 then, 2 now" in refused.args[1] and 'tick "Start over"' in refused.args[1]
    assert "--restart" not in refused.args[1]
    tab.restart.setChecked(True)
    assert tab.grid.count("earlier") == 0 and tab.grid.count("to run") == 3
    with qtbot.waitSignal(tab.finished, timeout=TIMEOUT_MS):
        assert tab.start()
    assert len(_measured_rows(tmp_path / "sweep")) == 3 * 2 * 2  # started over: 3 cells, 2 engines, 2 repeats


def test_a_named_grid_fills_the_lengths(qtbot, make_window):
    from whistle_stop.backends.runs.sweep_grid import GRIDS

    tab = make_window().sweep_tab
    tab.grid_choice.setCurrentText("ttft-vs-length")
    grid = GRIDS["ttft-vs-length"].grid
    assert tab.lengths() == (grid.prompt_tokens, grid.new_tokens, "")
    assert tab.grid.states[(1023, 1)] == "to run" and not tab.grid.count("skipped")
    tab.grid_choice.setCurrentText("long-context")
    assert tab.lengths()[:2] == ((16,), (1000,))


def test_closing_the_window_mid_sweep_leaves_no_child_process(qtbot, make_window, tmp_path):
    window = make_window({"slow": spec("slow", decode_s=0.02)})
    configure(window, ["slow"], repeats=1, warmup=0)
    tab = _sweep(window, tmp_path, "4", "300, 400")
    assert tab.start()
    qtbot.waitUntil(lambda: tab.grid.count("running") == 1 and bool(live_children()), timeout=TIMEOUT_MS)
    window.close()
    assert not tab.job.controller.running
    qtbot.waitUntil(lambda: not live_children(), timeout=15_000)


def test_cancelled_sweep_resumes_without_repeating_finished_cells(qtbot, make_window, tmp_path):
    window = make_window({n: spec(n, decode_s=0.01) for n in ("a", "b")})
    configure(window, ["a", "b"], repeats=1, warmup=0)
    tab = _sweep(window, tmp_path, "4, 8", "10, 20")
    started: list[tuple[int, int]] = []
    tab.job.controller.events.connect(
        lambda batch: started.extend(
            (e.prompt_tokens, e.new_tokens) for e in batch if type(e).__name__ == "CellStarted"
        )
    )

    assert tab.start()
    qtbot.waitUntil(lambda: tab.grid.count("done") >= 1, timeout=TIMEOUT_MS)
    with qtbot.waitSignal(tab.finished, timeout=30_000) as blocker:
        window.actions.cancel.trigger()  # Esc cancels whichever job runs
    assert blocker.args[0].cancelled
    finished = sorted(k for k, s in tab.grid.states.items() if s == "done")
    assert 1 <= len(finished) < 4 and "Run sweep again to resume" in tab.current.text()
    folder = tmp_path / "sweep"
    before = {r["run_id"]: r["ttft_ms"] for r in _measured_rows(folder)}
    partial = tmp_path / "partial"
    shutil.copytree(folder, partial)

    started.clear()
    with qtbot.waitSignal(tab.finished, timeout=TIMEOUT_MS) as blocker:
        assert tab.start()
    assert not blocker.args[0].cancelled
    assert not set(started) & set(finished)  # the finished cells did not run again
    assert all(tab.grid.states[k] == "earlier" for k in finished)
    assert f"resuming: {len(finished)} cell(s) already complete" in tab.log.toPlainText()
    rows = _measured_rows(folder)
    assert len(rows) == 4 * 2 and len({r["run_id"] for r in rows}) == 8  # 4 cells x 2 engines, once each
    assert all(
        before[run_id] == ttft for run_id, ttft in before.items() if run_id in {r["run_id"] for r in rows}
    )  # kept as they were
    assert json.loads((folder / "environment.json").read_text())["sweep"]["completed"] == [
        [4, 10],
        [4, 20],
        [8, 10],
        [8, 20],
    ]

    from whistle_stop.gui.reports import CompareDialog

    dialog = CompareDialog([partial], str(tmp_path), window)
    build = dialog.buttons.button(dialog.buttons.StandardButton.Ok)
    assert not build.isEnabled()  # a comparison needs two folders
    dialog.list.addItem(str(folder))
    assert build.isEnabled() and dialog.folders() == [partial, folder]
    dialog.reject()
    compare = window.compare_folders([partial, folder], tmp_path / "compare")
    html = compare.read_text(encoding="utf-8")
    assert "Comparison" in html and "data:image/png;base64," in html
    assert (tmp_path / "compare" / "compare_decode_tok_s.png").exists()


def test_a_damaged_sweep_folder_is_said_in_one_line(qtbot, make_window, tmp_path):
    """A folder whose list of finished cells cannot be read: the preview shows every cell to run
    (no exception in the tab's slots) and Run sweep says in one line why it refuses, as the command does."""
    window = make_window({"a": spec("a")})
    configure(window, ["a"], repeats=1, warmup=0)
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / "environment.json").write_text(json.dumps({"sweep": {"fingerprint": {}, "completed": 5}}))
    tab = _sweep(window, tmp_path, "4, 8", "3")
    assert tab.grid.count("to run") == 2
    with qtbot.waitSignal(tab.error, timeout=TIMEOUT_MS) as refused:
        assert tab.start()
    assert 'tick "Start over"' in refused.args[1] and "\n" not in refused.args[1]


def test_quality_on_random_weights_fills_table_banner_and_scatter(qtbot, make_window, tmp_path):
    window = make_window()
    configure(window, ["hf", "hf-int8"], new_tokens=8, repeats=1, warmup=0)
    text = tmp_path / "eval.txt"
    text.write_text(TEXT, encoding="utf-8")
    tab = window.quality_tab
    window.tabs.setCurrentWidget(tab)
    tab.text_path.setText(str(tmp_path / "missing.txt"))
    assert "does not exist" in tab.reason.text() and not tab.run_button.isEnabled()
    tab.text_path.setText(str(text))
    tab.max_length.setValue(32)
    tab.stride.setValue(64)
    assert "the stride must be 1 to the max length" in tab.reason.text()
    tab.max_length.setValue(1)  # refused here, not after the model loads
    assert "at least 2 tokens" in tab.reason.text() and not tab.run_button.isEnabled()
    tab.max_length.setValue(32)
    tab.stride.setValue(16)

    with qtbot.waitSignal(tab.finished, timeout=TIMEOUT_MS) as blocker:
        assert tab.start()
        assert not window.sweep_tab.run_button.isEnabled()  # one job at a time
    _result, quality = blocker.args[0]

    assert [r.backend for r in quality.rows] == ["hf", "hf-int8"]
    assert tab.table.rowCount() == 2
    for row in range(2):
        assert float(tab.table.item(row, 2).text()) > 1  # a perplexity number
    assert tab.table.item(0, 3).text() == "reference" and "%" in tab.table.item(1, 3).text()
    assert tab.banner.isVisible() and "meaningless" in tab.banner.text()
    plot = tab.scatter.plots[0]
    points = [item for item in plot.listDataItems() if item.getData()[0] is not None]
    assert sorted(len(item.getData()[0]) for item in points) == [1, 1]  # one point per engine
    colours = {item.opts["symbolBrush"].color().name() for item in points}
    assert colours == {tab.colours["hf"].name(), tab.colours["hf-int8"].name()}  # the panes' colours
    tab.table.selectRow(1)
    assert "hf-int8" in tab.top.title.text()
    if quality.divergences:
        assert tab.top.table.rowCount() == 5

    assert window.actions.export_report.isEnabled()
    report = window.export_report(tmp_path / "report")
    html = report.read_text(encoding="utf-8")
    assert "data:image/png;base64," in html and "Quality" in html
    assert (tmp_path / "report" / "data" / "quality" / "quality.csv").exists()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed when the socket is: connections are refused


def test_remote_settings_validate_the_url_and_never_keep_the_key(qtbot, make_window, tmp_path):
    window = make_window()
    configure(window, ["remote"], new_tokens=4)
    remote, setup = window.setup.option_forms["remote"], window.setup
    url, key, key_env = (remote.edits[name] for name in ("url", "api_key", "api_key_env"))
    assert remote.isVisible() and key.echoMode() == key.EchoMode.Password
    for bad in ("ftp://127.0.0.1:9/v1", "127.0.0.1:8000/v1"):
        url.setText(bad)
        assert "must start with http:// or https://" in setup.reason.text()
        assert not setup.run_button.isEnabled() and window.start_run() is False
    url.setText(f"http://127.0.0.1:{_closed_port()}/v1")
    key_env.setText("NOT A NAME")
    assert "not an environment variable name" in setup.reason.text()
    key_env.clear()
    key.setText(SECRET)
    assert setup.reason.text() == ""
    config = setup.config()
    assert config.engine_options["remote"].api_key == SECRET
    assert SECRET not in json.dumps(config.as_dict())

    result = run(qtbot, window)
    assert [r.status for r in result.runs] == ["error"]
    assert "connection refused" in window.grid.panes["remote"].text.toPlainText()
    out = tmp_path / "export"
    assert window.export_csv(out)
    for name in ("runs.csv", "tokens.csv", "environment.json"):
        assert SECRET not in (out / name).read_text(encoding="utf-8")
    window.close()
    saved = (tmp_path / "settings" / "whistle-stop.ini").read_text(encoding="utf-8")
    assert "127.0.0.1" in saved and SECRET not in saved  # the URL is remembered, the key never


def test_cancel_while_the_model_downloads_stops_it_without_falling_back(qtbot, make_window, tmp_path, monkeypatch):
    """The tab's job resolves the model with a cancel event: the (fake) download stops at its
    next progress report, and `auto`'s fallback to random weights is never taken."""
    import threading

    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    import whistle_stop.backends.sources.model_files as models

    release, updates = threading.Event(), []

    def slow_download(repo_id, allow_patterns=None, local_files_only=False, tqdm_class=None, **kwargs):
        if local_files_only:
            raise LocalEntryNotFoundError("not in the cache")
        bar = tqdm_class(total=1000, desc="model.safetensors")
        for _ in range(1000):
            bar.update(1)  # raises DownloadCancelled once Cancel is pressed
            updates.append(1)
            if release.wait(0.01):  # the pace of a slow network
                break
        raise AssertionError("the download was not stopped")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", slow_download)
    monkeypatch.setattr(models, "_random", lambda spec, asked: pytest.fail("fell back to random weights"))
    window = make_window({"a": spec("a")})
    configure(window, ["a"], repeats=1, warmup=0, model="auto")
    tab = _sweep(window, tmp_path, "4", "3")
    assert tab.start()
    qtbot.waitUntil(lambda: "downloading model.safetensors" in tab.current.text(), timeout=TIMEOUT_MS)
    with qtbot.waitSignal(tab.job.controller.cancelled, timeout=10_000):
        window.actions.cancel.trigger()
    release.set()
    assert len(updates) < 1000
    assert not tab.job.controller.running and "cancelled before the engines started" in tab.current.text()


def test_profile_tab_names_its_first_column_backend_as_the_runs_table_does(make_window):
    """Both steps' tables: the column of engines is `backend`, as in the bench tables and the files."""
    from whistle_stop.backends.results.summary import SUMMARY_HEADERS

    tab = make_window().profile_tab
    for phase in ("prefill", "decode"):
        tab.phase.setCurrentText(phase)
        assert tab.table.horizontalHeaderItem(0).text() == SUMMARY_HEADERS[0] == "backend", phase


def test_profile_tab_shows_what_the_command_writes(qtbot, make_window, tmp_path):
    """The Profile tab runs the same session as `main.py profile`: its table rows are the
    command's rows, the files land in the chosen folder, the charts and top operations show."""
    from tests.fake_engines import phased_spec
    from whistle_stop.backends.profile.table import PREFILL_HEADERS, profile_row

    window = make_window({"phased": phased_spec()})
    configure(window, ["phased"], new_tokens=10, repeats=1, warmup=1)
    tab = window.profile_tab
    tab.out.setText(str(tmp_path / "prof"))
    with qtbot.waitSignal(tab.finished, timeout=TIMEOUT_MS) as blocker:
        assert tab.start(), tab.reason.text()
    result = blocker.args[0]
    (profile,) = result.profiles
    assert profile.status == "ok" and tab.table.rowCount() == 1
    assert [tab.table.item(0, c).text() for c in range(tab.table.columnCount())] == profile_row(profile)
    tab.phase.setCurrentText("prefill")  # prefill's table: TTFT against its roofline
    labels = [tab.table.horizontalHeaderItem(c).text() for c in range(tab.table.columnCount())]
    assert labels == PREFILL_HEADERS and "roofline share" in labels
    assert [tab.table.item(0, c).text() for c in range(tab.table.columnCount())] == profile_row(profile, "prefill")
    assert tab.caption.text() == "ms for the prompt"  # the unit of the category columns

    def ops_shown() -> list[tuple[str, str]]:
        return [(tab.ops.item(r, 0).text(), tab.ops.item(r, 1).text()) for r in range(tab.ops.rowCount())]

    prefill_ops = [(op.phase, op.name) for op in profile.top_ops if op.phase == "prefill"]
    assert ops_shown() == prefill_ops and prefill_ops  # the step's operations, not decode's first
    tab.phase.setCurrentText("decode")
    assert tab.caption.text() == "ms per token"
    assert ops_shown() == [(op.phase, op.name) for op in profile.top_ops if op.phase == "decode"]
    assert tab.ops.item(0, 1).text() == "linear"
    assert all(figure is not None for figure in tab.charts.figures)
    for name in ("breakdown.csv", "top_ops.csv", "profile.json", "runs.csv", "phased.trace.json"):
        assert (tmp_path / "prof" / name).exists(), name
    for name in ("profile_decode.png", "profile_prefill.png"):  # the charts `profile` writes beside them
        assert (tmp_path / "prof" / name).read_bytes().startswith(b"\x89PNG"), name
    assert tab.open_folder.isEnabled() and not window.jobs.busy()


def test_the_profile_tab_s_live_rows_are_all_held_to_the_best_peak_so_far(make_window):
    """An engine's probe of the peaks may read faster than the earlier ones': its ProfileEngineDone
    carries every row so far at that peak, and the table shows those, not the earlier rows as they were."""
    from whistle_stop.backends.profile.breakdown import EngineProfile
    from whistle_stop.backends.profile.table import profile_row
    from whistle_stop.backends.runs.profile import ProfileEngineDone

    tab = make_window().profile_tab
    tab.phase.setCurrentText("prefill")
    first = EngineProfile("a", "fp32", ttft_ms=2.0, prefill_flops=1e9, peak_gops=1000.0)
    tab._engine_done(ProfileEngineDone((first,)))
    again = [EngineProfile(n, "fp32", ttft_ms=2.0, prefill_flops=1e9, peak_gops=2000.0) for n in ("a", "b")]
    tab._engine_done(ProfileEngineDone(tuple(again)))
    rows = [[tab.table.item(r, c).text() for c in range(tab.table.columnCount())] for r in range(tab.table.rowCount())]
    assert rows == [profile_row(p, "prefill") for p in again]


@pytest.mark.parametrize("tab_name", ["profile_tab", "load_tab"])
def test_a_long_note_neither_squeezes_the_results_nor_is_cut_off(qtbot, make_window, tab_name):
    """At 1280x720 the Profile tab's note (and a Load note with many engines) is taller than the tab:
    the tables keep room for a few rows, and the whole note can be read (it scrolls)."""
    window = make_window()
    window.resize(1280, 720)
    tab = getattr(window, tab_name)
    window.tabs.setCurrentWidget(tab)
    if tab_name == "load_tab":
        tab.note.setText("\n".join(["remote at 4: the server's own /metrics over 8 request(s), and more " * 2] * 14))
    qtbot.waitExposed(tab)
    qtbot.waitUntil(lambda: tab.table.isVisible() and tab.table.height() > 0)
    header, row = tab.table.horizontalHeader().height(), tab.table.verticalHeader().defaultSectionSize()
    assert tab.table.height() >= header + 2 * row, (tab.table.height(), tab.height())
    qtbot.waitUntil(lambda: tab.note.height() >= tab.note.heightForWidth(tab.note.width()), timeout=5000)


def test_the_profile_tab_says_why_an_engine_failed_as_the_command_prints_it(qtbot, make_window, tmp_path):
    """A failed engine's error in the note's first lines (`profile` prints it under its tables), not only in
    a tooltip: the status line names the engine, the note says why."""
    window = make_window({"fine": spec("fine"), "broken": spec("broken", fail_load=True)})
    configure(window, ["fine", "broken"], new_tokens=4, repeats=1, warmup=0)
    tab = window.profile_tab
    tab.out.setText(str(tmp_path / "prof"))
    with qtbot.waitSignal(tab.finished, timeout=TIMEOUT_MS):
        assert tab.start(), tab.reason.text()
    assert "failed: broken" in tab.status.text()
    first = tab.note.text().splitlines()[0]
    assert first.startswith("broken: error: ") and "scripted load failure" in first


def test_profile_tab_cancel_keeps_what_was_measured_and_leaves_no_worker(qtbot, make_window, tmp_path):
    window = make_window({"first": spec("first", decode_s=0.001), "second": spec("second", decode_s=0.02)})
    configure(window, ["first", "second"], new_tokens=400, repeats=2, warmup=0)
    tab = window.profile_tab
    tab.out.setText(str(tmp_path / "prof"))
    assert tab.start(), tab.reason.text()
    qtbot.waitUntil(lambda: tab.table.rowCount() == 1, timeout=TIMEOUT_MS)  # one engine done, the next under way
    with qtbot.waitSignal(tab.finished, timeout=30_000) as blocker:
        tab.job.cancel_button.click()
    result = blocker.args[0]
    assert result.cancelled and len(result.profiles) == 2
    assert result.profiles[0].status == "ok" and result.profiles[1].status == "cancelled"
    assert "cancelled" in tab.status.text().lower()
    qtbot.waitUntil(lambda: not live_children(), timeout=15_000)


def test_a_figure_under_one_ms_keeps_its_ticks_in_its_label_s_unit(qtbot):
    """A decode step of 0.3 ms on "ms per step": the ticks read 0.1..0.3, not 100..300 with "(x0.001)"."""
    from whistle_stop.backends.report.figures import Figure, Series
    from whistle_stop.gui.figure_view import FigureGrid

    grid = FigureGrid(1)
    qtbot.addWidget(grid)
    grid.show()
    figure = Figure("steps", "Where a decode step goes", "engine", "ms per step", [Series("numpy", [0, 1], [0.3, 0.1])])
    grid.show_figures([figure])
    axis = grid.plots[0].getAxis("left")
    qtbot.waitUntil(lambda: axis.range[1] > 0.2)  # the view has taken the figure's range
    assert axis.autoSIPrefixScale == 1.0 and "x0.001" not in axis.labelString()


def test_a_figure_drawn_after_one_under_one_ms_keeps_its_ticks_in_ms(qtbot):
    """The Profile tab's Step from decode (0.3 ms) to prefill (1.2 ms) in the same plot: prefill's ticks
    read 0.5, 1.0, not 500, 1000 (pyqtgraph kept the scale it took from the decode chart's range)."""
    from whistle_stop.backends.report.figures import Figure, Series
    from whistle_stop.gui.figure_view import FigureGrid

    grid = FigureGrid(1)
    qtbot.addWidget(grid)
    grid.show()
    axis = grid.plots[0].getAxis("left")
    for top in (0.3, 1.2):
        figure = Figure("steps", "Where a step goes", "engine", "ms per step", [Series("numpy", [0, 1], [top, 0.1])])
        grid.show_figures([figure])
        qtbot.waitUntil(lambda top=top: 0.6 * top < axis.range[1] < 2 * top)  # the view took this figure's range
    spacing, values = axis.tickValues(*axis.range, 300)[0]
    labels = axis.tickStrings(values, axis.autoSIPrefixScale * axis.scale, spacing)
    assert axis.autoSIPrefixScale == 1.0 and max(float(label) for label in labels) < 2, labels


def _rising(engines: int = 3):
    """Curves from bottom left to top right: the legend fits top left in a report-sized plot, in none
    of its corners in a narrow one."""
    from whistle_stop.backends.report.figures import Figure, Series

    xs = [float(x) for x in range(12)]
    series = [Series(f"engine-{i}", xs, [x + 0.3 * i for x in xs]) for i in range(engines)]
    return Figure("rise", "Rising", "x", "y", series)


def _shown_grid(qtbot, width: int, height: int):
    """A one-plot FigureGrid of this size, on screen (offscreen), laid out before a figure is drawn."""
    from whistle_stop.gui.figure_view import FigureGrid

    grid = FigureGrid(1)
    qtbot.addWidget(grid)
    grid.resize(width, height)
    grid.show()
    qtbot.waitExposed(grid)
    return grid


def _legend_clear_of_marks(plot) -> bool:
    from whistle_stop.backends.report.legend_place import Box
    from whistle_stop.backends.report.plots import drawn_marks

    rect = plot.legend.sceneBoundingRect()
    legend = Box(rect.left(), rect.top(), rect.right(), rect.bottom())
    return not any(legend.overlap(mark) for mark in drawn_marks(plot)[0])


def test_a_figure_s_legend_is_placed_again_once_its_grid_is_resized(qtbot, monkeypatch):
    """The legend was placed when the figure was drawn: narrowed (the window, a splitter), the plot kept
    it in its corner over the curves' points; widened again, it kept a column it no longer needed. A
    resize draws the figures again at the new size, once a drag pauses, not at every step of it."""

    grid = _shown_grid(qtbot, 900, 520)
    grid.show_figures([_rising()])
    plot = grid.plots[0]
    view = plot.getViewBox()
    assert view.sceneBoundingRect().contains(plot.legend.sceneBoundingRect()) and _legend_clear_of_marks(plot)
    redraws = []
    redraw = grid._redraw
    monkeypatch.setattr(grid, "_redraw", lambda: (redraws.append(grid.width()), redraw())[1])
    for width in range(860, 299, -40):  # a drag
        grid.resize(width, 260)
    qtbot.waitUntil(lambda: bool(redraws) and not grid._resized.isActive())
    assert redraws == [300]  # once, at the size the drag ended at
    assert _legend_clear_of_marks(plot)
    assert plot.legend.sceneBoundingRect().left() >= view.sceneBoundingRect().right()  # beside the plot

    grid.resize(900, 520)
    qtbot.waitUntil(lambda: len(redraws) == 2 and not grid._resized.isActive())
    assert view.sceneBoundingRect().contains(plot.legend.sceneBoundingRect()) and _legend_clear_of_marks(plot)
    assert view.sceneBoundingRect().right() == pytest.approx(plot.sceneBoundingRect().right(), abs=2)  # no column
    grid.resize(500, 300)
    grid.close()  # pyqtgraph's close() clears the scene: the pending redraw has nothing to draw into
    qtbot.waitUntil(lambda: not grid._resized.isActive())
    assert len(redraws) == 2


def test_a_grid_s_legend_is_placed_under_the_title_it_shows(qtbot, monkeypatch):
    """The window wraps a long title on two lines: the legend is placed once that title takes its room,
    not under the report's one-line title (the view then shrank under a legend placed for another height)."""
    from dataclasses import replace

    from whistle_stop.backends.report import plots
    from whistle_stop.gui.figure_view import wrap_title

    figure = replace(_rising(), title="Time to first token against the prompt's length, every engine")
    seen: list[str] = []
    place = plots._place_legend

    def placing(item, fig):
        seen.append(item.titleLabel.text)  # the title in place when the legend's room is measured
        return place(item, fig)

    monkeypatch.setattr(plots, "_place_legend", placing)
    grid = _shown_grid(qtbot, 420, 300)
    grid.show_figures([figure])
    wrapped = wrap_title(figure.title)
    assert "<br>" in wrapped and seen and all(wrapped in text for text in seen)
    assert _legend_clear_of_marks(grid.plots[0])


def test_a_long_legend_beside_a_plot_wraps_and_leaves_its_neighbours_in_view(qtbot):
    """The sweep's TTFT chart names each roofline with its peak and instructions; its legend went beside
    the plot at its full width, and the grid of three grew wider than the tab: the third chart was cut off
    at the window's edge. A column's legend now wraps its labels to at most half the plot's width."""
    from dataclasses import replace

    from whistle_stop.backends.report.figures import Limit
    from whistle_stop.gui.figure_view import FigureGrid

    long = "int8 roofline (int8 peak 943 G/s, avx512-vnni vpdpbusd zmm)"
    rising = _rising(2)
    figure = replace(rising, limits=[Limit(long, 12.0, list(rising.series[0].x), list(rising.series[0].x))])
    grid = FigureGrid(3)
    qtbot.addWidget(grid)
    grid.resize(1000, 300)  # the Sweep tab's charts at a window 1,650 px wide
    grid.show()
    qtbot.waitExposed(grid)
    grid.show_figures([figure, _rising(), _rising()])
    for plot in grid.plots:
        assert plot.sceneBoundingRect().right() <= grid.width() + 1  # every chart in view
    first = grid.plots[0]
    legend = first.legend
    assert legend.sceneBoundingRect().left() >= first.getViewBox().sceneBoundingRect().right()  # beside it
    assert legend.sceneBoundingRect().width() <= first.sceneBoundingRect().width() / 2 + 1
    texts = [label.text for _sample, label in legend.items]
    assert any("<br>" in text for text in texts)
    assert long in [text.replace("<br>", " ") for text in texts]  # wrapped, not cut


def test_clearing_a_grid_closes_the_column_its_legend_was_put_in(qtbot):
    """The last figure put its legend beside the plot (no corner free): cleared, the plot kept the empty
    column and its narrower width."""

    grid = _shown_grid(qtbot, 300, 260)
    grid.show_figures([_rising()])
    plot = grid.plots[0]
    view = plot.getViewBox()
    assert view.sceneBoundingRect().right() < plot.sceneBoundingRect().right() - 50  # the legend's column
    assert plot.titleLabel.text and plot.getAxis("left").labelText
    grid.clear_figures()
    assert plot.legend.parentItem() is view and not plot.legend.items
    assert view.sceneBoundingRect().right() == pytest.approx(plot.sceneBoundingRect().right(), abs=2)
    # nothing of the cleared figure is left to name a chart the plot no longer holds
    assert not plot.titleLabel.isVisible() and not plot.getAxis("left").label.isVisible()
    assert not plot.getAxis("bottom").labelText and not plot.getAxis("left").labelText


def test_the_top_logits_table_names_its_columns_when_nothing_diverged(qtbot):
    """No divergence (or none yet): the empty table's columns say what they hold, not Qt's "1", "2",
    nor the engines of the divergence shown before."""
    from whistle_stop.backends.runs.quality_rows import Divergence, QualityRow
    from whistle_stop.gui.quality_view import TopLogitsView

    view = TopLogitsView()
    qtbot.addWidget(view)

    def headers() -> list[str]:
        return [view.table.horizontalHeaderItem(c).text() for c in range(view.table.columnCount())]

    assert headers() == ["reference's top-5", "engine's top-5"]
    entry = {"text": " a", "logit": 1.0, "logprob": -0.5, "token_id": 257}
    diverged = Divergence("int8", "hf", "int8/r1", 3, 8, entry, entry, [entry], [entry])
    view.show_for(QualityRow("int8", reference="hf", agree_share=0.5, agree_tokens=3), diverged)
    assert headers() == ["hf", "int8"] and view.table.rowCount() == 1
    view.show_for(QualityRow("numpy", reference="hf", agree_share=1.0, agree_tokens=16), None)
    assert headers() == ["reference's top-5", "engine's top-5"] and view.table.rowCount() == 0


def test_an_engine_that_failed_is_not_said_to_lack_greedy_decoding(qtbot):
    """A failed engine has no tokens to compare: not "agreement is measured for greedy decoding only"."""
    from whistle_stop.backends.runs.quality_rows import QualityRow
    from whistle_stop.backends.status import RunStatus
    from whistle_stop.gui.quality_view import TopLogitsView

    view = TopLogitsView()
    qtbot.addWidget(view)
    view.show_for(QualityRow("remote", reference="numpy", status=RunStatus.ERROR, error="connection refused"), None)
    assert view.title.text() == "remote did not finish (error): no tokens to compare."
    view.show_for(QualityRow("native", reference="numpy"), None)  # sampled: no agreement to measure
    assert "greedy decoding only" in view.title.text()


def test_a_long_quality_error_is_cut_visibly_as_the_terminal_cuts_it():
    """The status cell of `quality`'s table and the window's: the same text, a cut error ending in "…"."""
    from whistle_stop.backends.results.summary import STATUS_CELL_MOST, status_cell
    from whistle_stop.backends.runs.quality_rows import QualityRow
    from whistle_stop.backends.status import RunStatus
    from whistle_stop.gui.quality_view import row_cells

    error = "RemoteError: connection refused by 127.0.0.1:9 (is the server running?) " * 3
    cell = row_cells(QualityRow("remote", status=RunStatus.ERROR, error=error))[-1]
    assert cell == status_cell("error", error) and cell.endswith("…") and len(cell) == STATUS_CELL_MOST
    assert row_cells(QualityRow("numpy"))[-1] == "ok"


def _quality_on(tab, tmp_path) -> None:
    text = tmp_path / "eval.txt"
    text.write_text(TEXT, encoding="utf-8")
    tab.text_path.setText(str(text))
    tab.max_length.setValue(32)
    tab.stride.setValue(16)


def test_the_quality_tab_shows_the_verdict_quality_prints_and_writes_its_settings(qtbot, make_window, tmp_path):
    """The tab's verdict is `quality`'s (the same runs, reference and perplexity changes), and the files it
    writes say the settings the run had: no harness calibration, as `quality` says."""
    from whistle_stop.backends.results.verdict import verdict

    window = make_window()
    configure(window, ["numpy", "null"], new_tokens=8, repeats=1, warmup=0)
    tab = window.quality_tab
    _quality_on(tab, tmp_path)
    with qtbot.waitSignal(tab.finished, timeout=TIMEOUT_MS) as blocker:
        assert tab.start(), tab.reason.text()
    result, quality = blocker.args[0]
    printed = verdict(result.runs, ["numpy", "null"], "numpy", [vars(r) for r in quality.rows])  # as the command
    assert tab.verdict.verdict is not None and tab.verdict.verdict.markdown() == printed.markdown()  # NaN != NaN
    assert "Fastest overall" in tab.verdict.toPlainText()
    assert tab.status.text().endswith(f"· {quality.info['scored_tokens']} tokens scored")
    tab.write_results(tmp_path / "quality")
    environment = json.loads((tmp_path / "quality" / "environment.json").read_text(encoding="utf-8"))
    assert environment["settings"]["calibrate_harness"] is False and "harness" not in environment


def test_a_cancelled_quality_evaluation_says_how_many_engines_it_scored(qtbot, make_window, tmp_path):
    """Cancelled in the bench, no engine was scored: not "175 tokens scored" (the windows' planned tokens)."""
    window = make_window({"quick": spec("quick", decode_s=0.001), "slow": spec("slow", decode_s=0.05)})
    configure(window, ["quick", "slow"], new_tokens=200, repeats=1, warmup=0)
    tab = window.quality_tab
    _quality_on(tab, tmp_path)
    assert tab.start(), tab.reason.text()
    qtbot.waitUntil(lambda: tab._runs_done >= 1, timeout=TIMEOUT_MS)  # quick has run, slow is under way
    with qtbot.waitSignal(tab.finished, timeout=30_000):
        tab.job.cancel_button.click()
    assert tab.status.text() == "Quality evaluation cancelled · perplexity of 0 of 2 engines"
    assert tab.verdict.verdict is not None  # what was measured, as `quality` prints it when cancelled
