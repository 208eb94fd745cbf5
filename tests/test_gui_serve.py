"""The Serve tab, offscreen: `serve` as a subprocess with the null engine, its URL, one log row per
request, its live figures from /metrics, Stop, and closing the window stops it with its workers."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

import math  # noqa: E402

import psutil  # noqa: E402

from tests.serve_helpers import complete  # noqa: E402
from tests.test_gui import configure, make_window, private_qsettings, settings  # noqa: E402,F401
from whistle_stop.backends.engines.server.lifecycle import free_port  # noqa: E402
from whistle_stop.backends.serve.metrics import ServeMetrics  # noqa: E402
from whistle_stop.gui.serve_job import bucket_text, server_sample  # noqa: E402

pytestmark = pytest.mark.gui
TIMEOUT_MS = 60_000


def _started(qtbot, window, port: int):
    tab = window.serve_tab
    window.tabs.setCurrentWidget(tab)
    tab.engine.setCurrentText("null")
    tab.port.setValue(port)
    assert tab.start_button.isEnabled(), tab.job.reason.text()
    assert tab.start()
    qtbot.waitUntil(lambda: tab.figures["health"].text() == "ok", timeout=TIMEOUT_MS)
    return tab


def _server_processes() -> list[psutil.Process]:
    return [
        p
        for p in psutil.Process().children(recursive=True)
        if "resource_tracker" not in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE
    ]


def test_serve_tab_shows_the_url_requests_and_figures_and_stops(qtbot, make_window, monkeypatch):  # noqa: F811 (the fixture)
    from whistle_stop.gui.serve_tab import ServeTab

    states: list[str] = []
    shown = ServeTab._sample
    monkeypatch.setattr(ServeTab, "_sample", lambda tab, s: (states.append(s.health), shown(tab, s)))
    window = make_window()
    configure(window, ["null"])
    port = free_port()
    tab = _started(qtbot, window, port)
    assert tab.address.text() == f"http://127.0.0.1:{port}/v1"
    assert "unreachable" not in states  # while it starts, the state says so
    assert not window.jobs.busy() and window.sweep_tab.reason.text() == ""  # a server blocks no other job
    processes = _server_processes()
    assert len(processes) >= 3  # the guard, the server and its engine worker
    status, _, body = complete(port, {"prompt": "Hello", "max_tokens": 3})
    assert status == 200, body
    assert complete(port, {"prompt": "Hello", "max_tokens": 0})[0] == 400
    qtbot.waitUntil(lambda: tab.log.rowCount() == 2, timeout=TIMEOUT_MS)
    assert [tab.log.item(0, c).text() for c in (1, 2, 5)] == ["200", "3", "length"]
    assert tab.log.item(1, 1).text() == "400" and "max_tokens" in tab.log.item(1, 6).text()
    assert tab.log.item(1, 5).text() == ""  # a refused request has no finish reason: its error has its own column
    qtbot.waitUntil(lambda: tab.figures["requests"].text() == "2", timeout=TIMEOUT_MS)
    assert tab.figures["tokens"].text() == "3" and tab.figures["waiting"].text() == "0"
    assert all(re.fullmatch(r"[\d.]+-[\d.]+ ms", tab.figures[k].text()) for k in ("ttft", "itl"))  # the p50's bucket
    assert "worker 1 ready" in tab.output.toPlainText()
    window.cancel()  # Esc stops the exclusive jobs, not a server
    assert tab.job.controller.running
    with qtbot.waitSignal(tab.job.controller.running_changed, timeout=TIMEOUT_MS):
        tab.stop_button.click()
    assert tab.address.text() == "not serving" and "server stopped" in tab.job.status.text()
    _, alive = psutil.wait_procs(processes, timeout=20)
    assert not alive


def test_the_empty_request_log_says_what_to_send_and_errors_have_their_own_column(qtbot, make_window):  # noqa: F811 (the fixture)
    """An empty log gave no hint of what would appear, nor how to make something appear; and its "finish"
    column held either a finish reason or an error's text. Until a request comes, a hint names the URL the
    tab serves (curl, and `bench` with the remote engine); "finish" holds only why generation ended."""
    from whistle_stop.backends.serve.request_log import RequestLogEntry
    from whistle_stop.gui.serve_job import ServerLine, ServerListening
    from whistle_stop.gui.serve_tab import LOG_HEADERS

    window = make_window()
    tab = window.serve_tab
    window.tabs.setCurrentWidget(tab)
    tab.port.setValue(8123)
    qtbot.waitUntil(lambda: tab.hint.isVisible())
    hint = tab.hint.text()
    assert "curl http://127.0.0.1:8123/v1/completions" in hint and '"max_tokens"' in hint
    assert "--backends remote --remote-url http://127.0.0.1:8123/v1" in hint
    tab._listening(ServerListening("http://127.0.0.1:8124/v1"))  # the URL the server says is the one shown
    assert "--remote-url http://127.0.0.1:8124/v1" in tab.hint.text()

    assert LOG_HEADERS[5:] == ["finish", "error"]
    for entry in (
        RequestLogEntry("2026-11-25T10:15:02.114", 200, "cmpl-1", 20, 12.4, 81.3, True, "length"),
        RequestLogEntry("2026-11-25T10:15:03.000", 503, "cmpl-2", 0, None, 1.0, error="the queue is full"),
    ):
        tab._line(ServerLine(entry.line(), entry))
    qtbot.waitUntil(lambda: not tab.hint.isVisible())  # rows now: the hint makes room
    assert [tab.log.item(0, c).text() for c in (5, 6)] == ["length", ""]
    assert [tab.log.item(1, c).text() for c in (5, 6)] == ["", "the queue is full"]


def test_the_p50_figures_are_close_and_say_their_bucket():
    """The tab's p50s come from the server's histograms: 100 requests of 110 ms had read 175 ms (linear
    inside vLLM-like 100-250 ms buckets). Finer buckets put the estimate near; the text gives the bucket."""
    metrics = ServeMetrics("random:tiny")
    for _ in range(100):
        metrics.first_token(0.110)
        metrics.gap(0.110)
    sample = server_sample('{"status": "ok"}', metrics.render(0, 0, 1))
    for p50, text in ((sample.ttft_p50_ms, sample.ttft_text), (sample.itl_p50_ms, sample.itl_text)):
        assert p50 == pytest.approx(110, rel=0.1) and text == "100-110 ms"
    assert sample.health == "ok" and server_sample("{}", "").ttft_text == "-"
    assert bucket_text((150.0, math.inf)) == "over 150 ms" and bucket_text((0.05, 0.06)) == "0.05-0.06 ms"


def test_closing_the_window_stops_the_server(qtbot, make_window):  # noqa: F811 (the fixture)
    window = make_window()
    configure(window, ["null"])
    _started(qtbot, window, free_port())
    processes = _server_processes()
    assert processes
    window.close()
    _, alive = psutil.wait_procs(processes, timeout=20)
    assert not alive


def test_a_busy_port_is_said(qtbot, make_window):  # noqa: F811 (the fixture)
    import socket

    window = make_window()
    configure(window, ["null"])
    tab = window.serve_tab
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        tab.engine.setCurrentText("null")
        tab.port.setValue(busy.getsockname()[1])
        with qtbot.waitSignal(window.serve_tab.error, timeout=TIMEOUT_MS) as blocker:
            assert tab.start()
    assert "cannot listen on 127.0.0.1" in blocker.args[1]
    assert not tab.job.controller.running and tab.start_button.isEnabled()


def test_a_port_another_http_server_holds_is_said_without_its_url_or_a_traceback(qtbot, make_window):  # noqa: F811 (the fixture)
    """Another program answering HTTP on the port is not our server: the tab never calls its URL ours,
    and the server's exit is said in its own words, not as a Python traceback."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Other(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # an HTML 404, as most web servers answer /health
            self.send_response(404)
            self.end_headers()
            self.wfile.write(b"<html>not found</html>")

        def log_message(self, *_args) -> None:
            pass

    window = make_window()
    configure(window, ["null"])
    tab = window.serve_tab
    messages: list[str] = []
    tab.message.connect(messages.append)
    with ThreadingHTTPServer(("127.0.0.1", 0), Other) as other:
        threading.Thread(target=other.serve_forever, daemon=True).start()
        tab.engine.setCurrentText("null")
        tab.port.setValue(other.server_address[1])
        with qtbot.waitSignal(tab.error, timeout=TIMEOUT_MS) as blocker:
            assert tab.start()
        other.shutdown()
    assert "cannot listen on 127.0.0.1" in blocker.args[1]
    assert "Traceback" not in blocker.args[1] and "RuntimeError" not in blocker.args[1]
    assert not any(m.startswith("serving at") for m in messages), messages
    assert tab.address.text() == "not serving" and tab.start_button.isEnabled()
