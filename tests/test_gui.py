"""The desktop app, offscreen: runs, faults, cancel, replay, files, bad input, settings.

Every wait is on a signal or a condition (never a fixed sleep). Scripted engines are used
where the engine does not matter; one test runs the real hf and hf-int8 on random:tiny.
"""

from __future__ import annotations

import psutil
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pyqtgraph")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt  # noqa: E402

from tests.fake_engines import spec  # noqa: E402
from whistle_stop.backends.results.export import read_csv  # noqa: E402
from whistle_stop.backends.results.records import RUN_COLUMNS  # noqa: E402

pytestmark = pytest.mark.gui
RUN_TIMEOUT_MS = 120_000


@pytest.fixture(autouse=True)
def private_qsettings(tmp_path_factory):
    """Even default QSettings land in a temporary folder, never in the user's."""
    folder = str(tmp_path_factory.mktemp("qsettings"))
    for fmt in (QSettings.Format.NativeFormat, QSettings.Format.IniFormat):
        QSettings.setPath(fmt, QSettings.Scope.UserScope, folder)


@pytest.fixture
def settings(tmp_path):
    from whistle_stop.gui.settings import settings_in

    return settings_in(tmp_path / "settings")


@pytest.fixture
def make_window(use_engines, qtbot, settings):
    """`make_window(specs, show)`: the window, with these test engines in the registry (`use_engines`)."""
    from whistle_stop.gui.main_window import MainWindow

    def make(specs=None, show=True):
        use_engines(*(specs or {}).values())
        window = MainWindow(settings=settings)
        qtbot.addWidget(window)  # closed (cancelling any run) at teardown
        if show:
            window.show()
        return window

    return make


def configure(
    window, engines, new_tokens=20, repeats=1, warmup=0, mode="fair", prompt="Hello world, this is", model="random:tiny"
):
    setup = window.setup
    setup.set_model_spec(model)
    setup.set_engines(engines)
    setup.prompt.setPlainText(prompt)
    setup.new_tokens.setValue(new_tokens)
    setup.repeats.setValue(repeats)
    setup.warmup.setValue(warmup)
    (setup.race if mode == "race" else setup.fair).setChecked(True)
    setup.flush()


def run(qtbot, window):
    with qtbot.waitSignal(window.bench.job.result, timeout=RUN_TIMEOUT_MS) as blocker:
        assert window.start_run(), window.setup.problem()
    return blocker.args[0]


def live_children() -> list[psutil.Process]:
    """Engine workers still running (multiprocessing's resource tracker is not one)."""
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(child.cmdline()):
                out.append(child)
        except psutil.NoSuchProcess:
            continue
    return out


FAST = {"fast": spec("fast", decode_s=0.002), "other": spec("other", decode_s=0.003)}


def test_real_engines_fill_panes_charts_table_and_export(qtbot, make_window, tmp_path):
    window = make_window()
    configure(window, ["hf", "hf-int8"], new_tokens=16)
    assert window.setup.badge.isVisible() and "random weights" in window.setup.badge.text()
    result = run(qtbot, window)

    assert not result.failed and not result.cancelled
    for name in ("hf", "hf-int8"):
        pane = window.grid.panes[name]
        assert pane.generated_text().strip(), f"{name} pane is empty"
        assert pane.token_count == 16
        assert pane.status.text().startswith("run 1 of 1  ·  TTFT")  # which run; complete (no "16/16")
        assert window.latency.point_count(name) == 16  # one point per token
    assert window.table.runs.rowCount() == len(result.runs) == 2
    assert window.table.model().columnCount() == len(RUN_COLUMNS)
    assert window.grid.panes["hf"].tag.text() == "reference"
    assert "random:tiny" in window.grid.info.text()

    out = tmp_path / "export"
    assert window.export_csv(out)
    runs, tokens = read_csv(out / "runs.csv"), read_csv(out / "tokens.csv")
    assert [r["backend"] for r in runs] == ["hf", "hf-int8"]
    assert len(tokens) == 32 and (out / "environment.json").exists()
    assert "| hf |" in window.copy_markdown()
    harness = result.environment["harness"]  # the window calibrates the harness as bench does
    assert harness["null_itl_us_median"] > 0 and "error" not in harness
    assert "harness cost per token (null engine)" in window.summary.note.text()
    assert "harness cost per token (null engine)" in window.copy_markdown()
    charts = window.export_charts(tmp_path / "charts")
    assert len(charts) == 4 and all(p.stat().st_size > 0 for p in charts)
    assert window.store.last_folder() == str(tmp_path / "charts")  # the next dialog opens where these went
    assert window.grab().save(str(tmp_path / "window.png"))


def test_crashing_engine_shows_its_error_while_the_other_completes(qtbot, make_window):
    specs = {"steady": spec("steady", decode_s=0.002), "crashy": spec("crashy", decode_s=0.002, crash_at=3)}
    window = make_window(specs)
    configure(window, ["steady", "crashy"], new_tokens=25)
    result = run(qtbot, window)

    crashy, steady = window.grid.panes["crashy"], window.grid.panes["steady"]
    assert "crashed" in crashy.text.toPlainText() and crashy.tag.text() == "failed"
    assert steady.token_count == 25 and steady.tag.text() != "failed"
    statuses = {r.backend: r.status for r in result.runs}
    assert statuses == {"steady": "ok", "crashy": "crashed"}
    assert "failed: crashy" in window.state.text()
    assert window.table.runs.rowCount() == 2


def test_cancel_mid_run_keeps_partial_results_and_no_worker(qtbot, make_window):
    window = make_window({"slow": spec("slow", decode_s=0.02)})
    configure(window, ["slow"], new_tokens=500, repeats=2, mode="race")  # race mode streams live
    assert window.start_run()
    pane = window.grid.panes["slow"]
    qtbot.waitUntil(lambda: pane.token_count >= 5, timeout=RUN_TIMEOUT_MS)
    with qtbot.waitSignal(window.bench.job.result, timeout=30_000) as blocker:
        window.actions.cancel.trigger()
    result = blocker.args[0]

    assert result.cancelled and result.runs[0].status == "cancelled"
    assert 5 <= result.runs[0].tokens_generated < 500
    assert window.table.runs.rowCount() == len(result.runs) >= 1
    assert window.actions.export_csv.isEnabled()  # partial results can be exported
    assert not window.bench.job.running
    qtbot.waitUntil(lambda: not live_children(), timeout=15_000)


def test_status_bar_says_cancelling_until_the_cancelled_job_ends(qtbot, make_window, monkeypatch):
    """The cancelled run's record arrives right after Cancel: its "1 run(s) recorded…" replaced
    "cancelling…" while the job was still stopping."""
    window = make_window({"slow": spec("slow", decode_s=0.02)})
    configure(window, ["slow"], new_tokens=500, repeats=2, mode="race")  # race mode streams live
    assert window.start_run()
    pane = window.grid.panes["slow"]
    qtbot.waitUntil(lambda: pane.token_count >= 5, timeout=RUN_TIMEOUT_MS)
    said: list[str] = []
    say = window.bench.messages.say
    monkeypatch.setattr(window.bench.messages, "say", lambda text: (said.append(text), say(text)))
    with qtbot.waitSignal(window.bench.job.result, timeout=30_000) as blocker:
        window.actions.cancel.trigger()
        assert window.state.text().startswith("cancelling")
    assert blocker.args[0].cancelled and blocker.args[0].runs  # the cancelled run was recorded
    *stopping, ended = said
    assert stopping and all(text.startswith("cancelling") for text in stopping), said
    assert ended.startswith("Cancelled after") and window.state.text() == ended


def test_model_download_shows_progress_and_cancel_ends_it(qtbot, make_window, monkeypatch):
    """prepare() runs in the session thread with a progress callback; Cancel ends the run at once."""
    import threading

    from whistle_stop.backends.runs.bench import BenchSession

    release = threading.Event()

    def slow_prepare(self, progress=None):
        for step in range(1, 1000):
            progress("downloading model.safetensors", step / 1000)  # raises once cancelled
            if release.wait(0.01):
                break
        raise AssertionError("the download should have been stopped")

    monkeypatch.setattr(BenchSession, "prepare", slow_prepare)
    window = make_window(FAST)
    configure(window, ["fast"], new_tokens=5)
    assert window.start_run()
    qtbot.waitUntil(lambda: window.prepare_bar.isVisible() and window.prepare_bar.value() > 0, timeout=20_000)
    assert "downloading model.safetensors" in window.state.text()
    with qtbot.waitSignal(window.bench.job.cancelled, timeout=5_000):
        window.actions.cancel.trigger()
    assert "Cancelled" in window.state.text() and window.grid.panes["fast"].tag.text() == "cancelled"
    assert window.last_error == ""  # a cancel is not an error: no dialog
    assert not window.bench.job.running and not window.prepare_bar.isVisible()
    assert window.actions.run.isEnabled()
    release.set()


def test_closing_the_window_mid_run_leaves_no_child_process(qtbot, make_window):
    window = make_window({"slow": spec("slow", decode_s=0.02)})
    configure(window, ["slow"], new_tokens=500)
    assert window.start_run()
    qtbot.waitUntil(lambda: window.bench.job.quiet, timeout=RUN_TIMEOUT_MS)  # a measured run is being timed
    assert live_children()
    window.close()
    assert not window.bench.job.running
    qtbot.waitUntil(lambda: not live_children(), timeout=15_000)


def test_invalid_input_is_refused_with_a_reason(qtbot, make_window, tmp_path):
    window = make_window(show=False)
    setup = window.setup
    configure(window, ["hf"], new_tokens=1000, prompt="word " * 60)
    assert not setup.run_button.isEnabled() and not window.actions.run.isEnabled()
    assert "exceed the model's context of 1024 tokens" in setup.reason.text()
    assert "/ 1024 tokens" in setup.counter.text() and "color" in setup.counter.styleSheet()
    assert window.start_run() is False

    configure(window, ["hf"], new_tokens=20, prompt="   ")
    assert setup.reason.text() == "the prompt is empty" and not setup.run_button.isEnabled()
    configure(window, [], prompt="Hello")
    assert setup.reason.text() == "select at least one engine"
    configure(window, ["hf"], prompt="Hello")
    assert setup.run_button.isEnabled() and setup.reason.text() == ""

    for box, wrong, clamped in [
        (setup.new_tokens, -5, 1),
        (setup.repeats, 0, 1),
        (setup.top_k, -1, 0),
        (setup.warmup, 99, 10),
    ]:
        box.setValue(wrong)
        assert box.value() == clamped  # out-of-range values cannot be entered
    setup.top_p.setValue(2.0)
    assert setup.top_p.value() == 1.0
    assert not setup.temperature.isEnabled()  # greedy: sampling settings are off
    setup.decoding.setCurrentText("sample")
    assert setup.temperature.isEnabled()

    empty = tmp_path / "not-a-model"  # a local folder is checked in the background
    empty.mkdir()
    setup.set_model_spec(str(empty))
    qtbot.waitUntil(lambda: "has no model.safetensors" in setup.reason.text(), timeout=10_000)
    assert not setup.run_button.isEnabled()


def test_unavailable_engines_are_greyed_with_the_reason(make_window):
    from whistle_stop.backends import registry

    window = make_window({"fake": spec("fake")}, show=False)
    items = {
        window.setup.engines.item(i).data(Qt.ItemDataRole.UserRole): window.setup.engines.item(i)
        for i in range(window.setup.engines.count())
        if window.setup.engines.item(i).data(Qt.ItemDataRole.UserRole)
    }  # (not the section headers)
    assert set(registry.names()) | {"fake"} == set(items)
    for name in registry.names():
        ok, why = registry.available(name)
        enabled = bool(items[name].flags() & Qt.ItemFlag.ItemIsEnabled)
        assert enabled == ok
        if not ok:
            assert why in items[name].toolTip()
    assert items["fake"].flags() & Qt.ItemFlag.ItemIsUserCheckable


def test_compile_without_a_cxx_compiler_is_greyed_with_the_reason(make_window, monkeypatch, tmp_path):
    """The engine's own module declares torch.compile's C++ compiler: the list shows what `backends` says."""
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no g++
    window = make_window(show=False)
    item = next(
        window.setup.engines.item(i)
        for i in range(window.setup.engines.count())
        if window.setup.engines.item(i).data(Qt.ItemDataRole.UserRole) == "torch-static-compile"
    )
    assert not item.flags() & Qt.ItemFlag.ItemIsEnabled
    assert item.toolTip().endswith(
        "unavailable: needs a C++ compiler for torch.compile on the CPU (g++ not found: install it, or set $CXX)"
    )


def test_replay_save_and_open_session(qtbot, make_window, tmp_path):
    window = make_window(FAST)
    configure(window, ["fast", "other"], new_tokens=30)
    result = run(qtbot, window)
    assert window.actions.replay.isEnabled()

    with qtbot.waitSignal(window.replayer.finished, timeout=30_000):
        assert window.replay(speed=0.25)
        assert all(p.token_count < 30 for p in window.grid.panes.values())  # the panes were emptied
    for name, pane in window.grid.panes.items():
        assert pane.token_count == 30 and pane.status.text().startswith("run 1 of 1  ·  TTFT")
        assert window.latency.point_count(name) == 30

    folder = tmp_path / "session"
    assert window.save_session(folder)
    reopened = make_window(FAST)
    with qtbot.waitSignal(reopened.session_loaded):
        assert reopened.open_session(folder)
    assert reopened.table.runs.rowCount() == len(result.runs)
    assert [r.run_id for r in reopened.view.data.runs] == [r.run_id for r in result.runs]
    for name in ("fast", "other"):
        assert reopened.grid.panes[name].token_count == 30
        assert reopened.latency.point_count(name) == 30
    assert reopened.grid.panes["fast"].tag.text() == "reference"
    assert reopened.summary.table.rowCount() == 2
    assert reopened.actions.replay.isEnabled()

    (tmp_path / "not-a-session").mkdir()
    assert not reopened.open_session(tmp_path / "not-a-session")
    assert "runs.csv" in reopened.last_error and reopened.table.runs.rowCount() == len(result.runs)


def test_export_to_an_unwritable_place_says_so_and_keeps_results(qtbot, make_window, tmp_path):
    window = make_window(FAST)
    configure(window, ["fast"], new_tokens=10)
    run(qtbot, window)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert not window.export_csv(blocker / "sub")
    assert "Could not write" in window.last_error and "Export failed" in window.state.text()
    assert window.table.runs.rowCount() == 1 and window.view.data.runs
    assert window.export_csv(tmp_path / "fine")


def test_fair_mode_keeps_still_while_a_measured_run_is_timed(qtbot, make_window):
    """No observer effect: warm-ups stream live, a measured fair-mode run is drawn only once it
    is recorded (the pane says so meanwhile), and a cancel still ends it with its partial record."""
    # 50 s a run: the first measured run cannot end on its own before the cancel lands, however loaded the machine
    window = make_window({"slow": spec("slow", decode_s=0.1)})
    configure(window, ["slow"], new_tokens=500, repeats=2, warmup=0)
    assert window.start_run()
    pane = window.grid.panes["slow"]
    qtbot.waitUntil(lambda: window.bench.job.quiet, timeout=RUN_TIMEOUT_MS)
    assert pane.token_count == 0 and "timing this run" in pane.status.text()
    with qtbot.waitSignal(window.bench.job.result, timeout=30_000) as blocker:
        window.actions.cancel.trigger()
    result = blocker.args[0]
    assert result.cancelled and result.runs[0].status == "cancelled" and not result.runs[0].is_warmup
    assert pane.token_count == result.runs[0].tokens_generated  # drawn from the record at the end
    assert not window.bench.job.quiet
    qtbot.waitUntil(lambda: not live_children(), timeout=15_000)


def test_fair_run_draws_each_measured_run_between_runs(qtbot, make_window):
    window = make_window(FAST)
    configure(window, ["fast", "other"], new_tokens=15, repeats=2, warmup=1)
    result = run(qtbot, window)
    assert [r.status for r in result.runs] == ["ok"] * 6
    assert window.table.runs.rowCount() == 6 and all(p.token_count == 15 for p in window.grid.panes.values())


def test_race_mode_flags_contended_timings(qtbot, make_window):
    window = make_window(FAST)
    configure(window, ["fast", "other"], new_tokens=15, mode="race")
    result = run(qtbot, window)
    assert all(r.concurrent for r in result.runs)
    assert window.grid.banner.isVisible() and "contended" in window.grid.banner.text()
    assert "contended" in window.summary.note.text()
    assert not window.actions.replay.isEnabled()  # replay is for fair runs
    for chart in (window.latency, window.race, window.histogram):  # their titles go into exported PNGs
        assert "race mode: contended" in chart.plotItem.titleLabel.text
    configure(window, ["fast", "other"], new_tokens=15, mode="fair")
    run(qtbot, window)
    assert not any("contended" in c.plotItem.titleLabel.text for c in (window.latency, window.race, window.histogram))


def test_live_batch_updates_each_curve_once_per_tick(make_window):
    """A batch of many tokens is drawn with one text insert and one setData per engine."""
    from whistle_stop.backends.sampling import SamplingParams
    from whistle_stop.backends.worker.events import BackendEvent, RunContext, RunRequest, RunStarted, Token

    window = make_window(FAST)  # shown: a hidden chart defers its drawing until its tab is shown
    window.view.show_engines(["fast"])
    window.live.begin("prompt", "fast", True, 1)
    calls = {"setData": 0, "append": 0}
    curve, pane = window.latency.curves["fast"], window.grid.panes["fast"]
    original_set, original_append = curve.setData, pane.append
    curve.setData = lambda *a, **k: (calls.__setitem__("setData", calls["setData"] + 1), original_set(*a, **k))
    pane.append = lambda texts: (calls.__setitem__("append", calls["append"] + 1), original_append(texts))
    batch = [
        BackendEvent("fast", RunRequest("fast/r1", (1, 2), 200, SamplingParams()), RunContext(1, False)),
        BackendEvent("fast", RunStarted("fast/r1", 1_000_000)),
    ]
    batch += [BackendEvent("fast", Token("fast/r1", i, 300 + i, "x", 2_000_000 + i * 1_000_000)) for i in range(200)]
    window.live.apply(batch)
    assert calls == {"setData": 1, "append": 1}
    assert window.latency.point_count("fast") == 200 and pane.token_count == 200
    assert "TTFT 1.0 ms" in pane.status.text() and "1.00 ms/token" in pane.status.text()

    from PySide6.QtCore import QPointF  # hovering shows the token's text and latency

    view = window.latency.plotItem.vb
    view.autoRange()  # normally done at the next paint
    scene_pos = view.mapViewToScene(QPointF(10, 0.0))
    shown = window.latency.hover_at(scene_pos)
    assert "token 10" in shown and "1.00 ms" in shown


def test_parameters_persist_between_sessions(make_window):
    first = make_window(show=False)
    configure(first, ["hf", "hf-int8"], new_tokens=77, repeats=4, warmup=2, mode="race", prompt="Remember me")
    first.setup.threads.setValue(1)
    first.close()
    second = make_window(show=False)
    params = second.setup.params()
    assert params["engines"] == ["hf", "hf-int8"] and params["new_tokens"] == 77 and params["repeats"] == 4
    assert params["warmup"] == 2 and params["mode"] == "race" and params["prompt"] == "Remember me"
    assert params["model"] == "random:tiny" and params["threads"] == 1


def test_grid_reflows_with_the_engine_count():
    from whistle_stop.gui.streams_grid import grid_columns

    assert [grid_columns(n, 1400) for n in (1, 2, 3, 4, 5, 6)] == [1, 2, 3, 2, 3, 3]
    assert grid_columns(4, 500) == 1 and grid_columns(2, 700) == 2


def test_run_app_without_a_display_says_how_and_returns_2(monkeypatch, capsys):
    from whistle_stop.gui import app

    for variable in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(app.sys, "platform", "linux")
    assert app.run_app() == 2
    err = capsys.readouterr().err
    assert "xvfb-run python main.py" in err and "QT_QPA_PLATFORM=offscreen" in err and err.count("\n") == 1


def test_theme_follows_the_system_scheme(qapp, make_window, monkeypatch):
    """A change of the system's colour scheme restyles the widgets and pyqtgraph's backgrounds."""
    import pyqtgraph as pg

    from whistle_stop.gui import theme

    window = make_window(show=False)
    try:
        monkeypatch.setattr(theme, "system_is_dark", lambda app: True)
        window.on_scheme_changed()
        assert window.theme is theme.DARK
        assert window.latency.backgroundBrush().color().name() == theme.DARK.plot_bg
        assert pg.getConfigOption("background") == theme.DARK.plot_bg
        monkeypatch.setattr(theme, "system_is_dark", lambda app: False)
        window.on_scheme_changed()
        assert window.theme is theme.LIGHT
        assert window.latency.backgroundBrush().color().name() == theme.LIGHT.plot_bg
    finally:
        monkeypatch.undo()
        theme.apply_theme(qapp)


def test_an_unchecked_engine_s_box_shows_in_the_dark_theme(qtbot, qapp, monkeypatch):
    """Fusion draws a check box's frame a shade darker than the window's colour: in the dark theme an
    unchecked engine in the list (a box on the list's own dark base) could not be seen on screen. Its
    frame now stands out from the base."""
    from PySide6.QtGui import QPalette
    from PySide6.QtWidgets import QListWidget, QListWidgetItem

    from whistle_stop.gui import theme

    monkeypatch.setattr(theme, "system_is_dark", lambda app: True)
    try:
        theme.apply_theme(qapp)
        listing = QListWidget()
        qtbot.addWidget(listing)
        item = QListWidgetItem("native · fp32")
        item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
        item.setCheckState(Qt.CheckState.Unchecked)
        listing.addItem(item)
        listing.resize(240, 80)
        listing.show()
        qtbot.waitExposed(listing)
        image = listing.viewport().grab().toImage()
        base = listing.palette().color(QPalette.ColorRole.Base).lightness()  # the list's own background
        row = listing.visualItemRect(item)
        box = [
            image.pixelColor(x, y).lightness()
            for x in range(row.left(), row.left() + 24)
            for y in range(row.top(), row.bottom())
        ]
        assert max(box) - base >= 60, (base, max(box))
    finally:
        monkeypatch.undo()
        theme.apply_theme(qapp)


def test_job_controller_delivers_in_order_and_one_job_runs_at_a_time(qtbot):
    """Events and control signals arrive in the order the job posted them; while one job runs,
    another kind is refused; a cancel before "ready" ends the job at once."""
    import threading

    from whistle_stop.backends.errors import UsageError
    from whistle_stop.gui.job_controller import JobStatus
    from whistle_stop.gui.job_manager import JobKind, JobManager

    jobs = JobManager()
    bench, sweep = jobs.controller(JobKind.BENCH, "benchmark run"), jobs.controller(JobKind.SWEEP, "sweep")
    seen: list = []
    bench.events.connect(seen.extend)
    bench.ready.connect(lambda value: seen.append(("ready", value)))
    release = threading.Event()
    post = bench.sink()

    def work(context):
        post(1)
        context.ready("r")
        post(2)
        release.wait(30)
        return "done"

    bench.start(work, release.set)
    assert bench.status is JobStatus.PREPARING and jobs.busy()
    assert jobs.blocker(JobKind.SWEEP) == JobKind.BENCH.reason
    with pytest.raises(UsageError, match="benchmark run is in progress"):
        sweep.sink()
    qtbot.waitUntil(lambda: bench.status is JobStatus.RUNNING, timeout=10_000)
    with qtbot.waitSignal(bench.result, timeout=10_000) as blocker:
        assert jobs.cancel()  # engines running: the job ends when they stop (here: at once)
    assert blocker.args == ["done"] and seen == [1, ("ready", "r"), 2]
    assert not jobs.busy() and jobs.blocker(JobKind.SWEEP) == ""

    stuck = threading.Event()
    sweep.sink()
    sweep.start(lambda context: stuck.wait(30), lambda: None)  # never "ready": still preparing
    with qtbot.waitSignal(sweep.cancelled, timeout=1_000):
        sweep.cancel()
    stuck.set()
    assert sweep.status is JobStatus.IDLE


def test_harness_calibration_keeps_the_window_still(qtbot):
    """The null engine's timing is a measurement too: the window stops drawing once it starts
    (after drawing what came before) and draws again when it ends, in race mode as in fair."""
    import threading

    from whistle_stop.backends.runs.events import HarnessCalibrated, HarnessCalibrating
    from whistle_stop.gui.job_manager import JobKind, JobManager

    controller = JobManager().controller(JobKind.BENCH, "benchmark run")
    post, release, quiet_seen = controller.sink(), threading.Event(), []

    def work(context):
        context.ready(None)
        post(HarnessCalibrating(200))  # returns once the window has drawn everything before it
        release.wait(30)
        post(HarnessCalibrated({"null_itl_us_median": 40.0}))
        return "done"

    controller.start(work, release.set)
    qtbot.waitUntil(lambda: controller.quiet, timeout=10_000)
    quiet_seen.append(controller.quiet)
    with qtbot.waitSignal(controller.result, timeout=10_000):
        release.set()
    assert quiet_seen == [True] and not controller.quiet


def test_observer_probe_compares_bench_and_window_on_tiny(qapp, tiny_model, monkeypatch):
    """scripts/observer_probe runs the same settings headless and in the window, then divides the
    window's median ms/token by bench's (the figure itself is for a real model on a quiet machine:
    not asserted here; what it is made of is)."""
    import statistics

    from scripts.observer_probe import probe
    from whistle_stop.backends import registry
    from whistle_stop.backends.runs.bench import BenchSession

    if not registry.available("numpy")[0]:
        pytest.skip("numpy engine unavailable")
    sessions = []  # (config, result) of each session, headless and the window's, in the order they end
    run = BenchSession.run

    def recorded(self, *args, **kwargs):
        result = run(self, *args, **kwargs)
        sessions.append((self.config, result))
        return result

    monkeypatch.setattr(BenchSession, "run", recorded)
    rounds = probe("random:tiny", ["numpy"], tokens=6, repeats=2, warmup=1, threads=1)
    (comparison,) = rounds[0]
    (bench_config, headless), (window_config, shown) = sessions  # bench first, then the window
    assert bench_config == window_config and window_config.repeats == 2 and window_config.threads == 1
    medians = []
    for result in (headless, shown):
        measured = [r for r in result.runs if r.backend == "numpy" and not r.is_warmup]
        assert [r.status for r in measured] == ["ok", "ok"] and all(r.tokens_generated == 6 for r in measured)
        medians.append(statistics.median(r.tpot_ms for r in measured))
    assert comparison.engine == "numpy" and (comparison.bench_ms, comparison.window_ms) == tuple(medians)
    assert comparison.ratio == pytest.approx(medians[1] / medians[0])


def test_cycles_are_collected_in_the_gui_thread_only_while_the_window_lives(qtbot, make_window):
    """A collection in a job thread can free PySide objects there and deadlock with the GUI
    thread (gui/gc_guard.py): with a window open, garbage made in another thread is collected
    in the GUI thread; once the window closes, automatic collection is back."""
    import gc
    import threading

    from whistle_stop.gui import gc_guard

    window = make_window(show=False)
    assert gc_guard.active() and not gc.isenabled()
    collected_in: list[str] = []

    class Cycle:
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            collected_in.append(threading.current_thread().name)

    def make_garbage() -> None:  # far past gen 0's threshold: automatic collection would run here
        for _ in range(20 * gc.get_threshold()[0]):
            Cycle()

    worker = threading.Thread(target=make_garbage, name="job-like")
    worker.start()
    worker.join()
    assert collected_in == []  # nothing was collected in the job-like thread
    qtbot.waitUntil(lambda: bool(collected_in), timeout=5000)  # the guard's timer, in this thread
    assert set(collected_in) == {threading.main_thread().name}
    window.close()
    assert not gc_guard.active() and gc.isenabled()


def test_itl_histogram_counts_the_runs_the_table_counts():
    """The histogram pools the gaps of the runs the table summarises (measured and ok): a failed
    or cancelled run's gaps, and a warm-up's, stay out of both."""
    from tests.test_stats import _run, _tokens
    from whistle_stop.gui.session_data import SessionData

    runs = [
        _run("a", 0, 9.0, warmup=True),
        _run("a", 1, 2.0),
        _run("a", 2, 3.0, status="error"),
        _run("a", 3, 4.0, status="cancelled"),
        _run("b", 1, 5.0, status="crashed"),
    ]
    tokens = [
        t
        for run, gaps in zip(runs, ([90.0], [1.0, 2.0, 3.0], [50.0, 60.0], [70.0], [80.0]))
        for t in _tokens(run, gaps)
    ]
    data = SessionData(runs, tokens, backends=["a", "b"])
    itl = data.measured_itl()
    assert sorted(itl["a"].tolist()) == [1.0, 2.0, 3.0] and itl["b"].size == 0
    a, b = data.summaries()
    assert (a.runs, a.itl_pooled_ms.n, b.runs, b.itl_pooled_ms.n) == (1, itl["a"].size, 0, itl["b"].size)


def test_window_summary_gives_the_interval_its_true_level(qtbot):
    """Six runs: the whiskers and brackets are min..max at 96.9%, and the note says so."""
    from tests.test_stats import _run
    from whistle_stop.backends.results.summary import SUMMARY_HEADERS, summarize_backends
    from whistle_stop.gui.summary_chart import SummaryView

    view = SummaryView()
    qtbot.addWidget(view)
    view.set_summaries(summarize_backends([_run("a", r, 2.0 + r) for r in range(6)]), {}, None, False)
    assert view.table.item(0, SUMMARY_HEADERS.index("ms/token")).text() == "4.50 [2.00–7.00]"
    note = view.note.text()
    assert "6 runs: 96.9% (min–max)" in note and "5 runs or fewer" not in note


def test_summary_bars_of_all_zeros_have_a_plain_axis(qtbot):
    """No engine built anything: the build chart's axis reads 0..1, not 2e-10 steps of nothing."""
    from tests.test_stats import _run
    from whistle_stop.backends.results.summary import summarize_backends
    from whistle_stop.gui.summary_chart import METRICS, SummaryView

    view = SummaryView()
    qtbot.addWidget(view)
    view.set_summaries(summarize_backends([_run("a", r, 2.0 + r) for r in range(3)]), {}, None, False)
    build = [title for title, _, _ in METRICS].index("build (s)")
    low, high = view.bars.plots[build].getViewBox().viewRange()[1]
    assert (low, high) == (0.0, 1.0)


def test_a_display_that_does_not_answer_is_one_line_and_exit_2():
    """DISPLAY set but nobody there (an ssh session's stale :10, a stopped Xvfb): Qt aborted the process
    with a paragraph and SIGABRT; the app now says so in one line and returns 2."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env["DISPLAY"] = ":97"  # no X server there
    proc = subprocess.run([sys.executable, "main.py"], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    # Qt's own reason depends on the machine: no server at :97, or (where libxcb-cursor0 is missing) the
    # xcb plugin that cannot load before it tries.
    assert line.startswith("error: cannot open the window: Qt cannot start here (qt.qpa."), line
    assert "xvfb-run python main.py" in line
