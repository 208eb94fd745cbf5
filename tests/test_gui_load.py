"""The Load tab, offscreen: levels against the fake vLLM server through the remote engine, the
table and the curve from the result's records, one job at a time, bad input, local engines only.

Every wait is on a signal or a condition, never a fixed sleep.
"""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pyqtgraph")
pytest.importorskip("pytestqt")

import pyqtgraph as pg  # noqa: E402

from tests.fake_engines import spec  # noqa: E402
from tests.fake_servers import fake_vllm_server  # noqa: E402
from tests.test_gui import configure, make_window, private_qsettings, settings  # noqa: E402,F401
from whistle_stop.backends.results.load import LOAD_HEADERS, Slo, load_levels, load_rows, requests_from_runs  # noqa: E402

pytestmark = pytest.mark.gui
TIMEOUT_MS = 120_000
PROMPT = "The keeper climbed the stairs to light"  # a handful of tokens: tiny rounds


def _rows(tab) -> list[list[str]]:
    return [[tab.table.item(r, c).text() for c in range(len(LOAD_HEADERS))] for r in range(tab.table.rowCount())]


def _curves(tab) -> dict[str, int]:
    """{series name: points} of the load plot's named curves (whiskers are unnamed)."""
    return {item.name(): len(item.getData()[0]) for item in tab.chart.plots[0].listDataItems() if item.name()}


def test_levels_against_a_server_fill_the_table_and_the_curve(qtbot, make_window):
    window = make_window()
    configure(window, ["remote"], new_tokens=6, repeats=1, warmup=0, prompt=PROMPT)
    tab = window.load_tab
    window.tabs.setCurrentWidget(tab)
    with fake_vllm_server(FAKE_VLLM_STEP_MS="5", FAKE_VLLM_PER_SEQ_MS="1") as server:
        window.setup.option_forms["remote"].edits["url"].setText(server.base_url + "/v1")
        tab.concurrency.setText("1,2")
        tab.slo_ttft.setText("10000")
        assert tab.run_button.isEnabled(), tab.reason.text()
        lines: list[str] = []  # the live line after each batch of events (connected after the tab's own slot)
        tab.job.controller.events.connect(lambda _batch: lines.append(tab.status.text()))
        with qtbot.waitSignal(tab.finished, timeout=TIMEOUT_MS) as blocker:
            assert tab.start()
            # one job at a time: Run and the other tabs wait for the load run
            assert not window.actions.run.isEnabled() and window.start_run() is False
            assert not window.sweep_tab.run_button.isEnabled()
            assert window.sweep_tab.reason.text() == "a load run is in progress"
        result = blocker.args[0]

    assert not result.failed and not result.cancelled
    assert result.config.concurrency == (1, 2) and result.config.mode == "fair"
    assert any(line.startswith("remote: c=2, round remote/c2/r1") for line in lines), lines
    rows = _rows(tab)
    assert [row[:3] for row in rows] == [["remote", "1", "server"], ["remote", "2", "server"]]
    # the rows are the records' levels, as bench --concurrency prints them (SLO from the tab's field)
    levels = load_levels(requests_from_runs(result.runs, result.tokens) + result.load, Slo(ttft_ms=10000.0), {"remote"})
    assert rows == load_rows(levels) and rows[1][LOAD_HEADERS.index("goodput req/s")] != "-"
    assert _curves(tab) == {"remote": 2}
    labels = sorted(item.toPlainText() for item in tab.chart.plots[0].items if isinstance(item, pg.TextItem))
    assert labels == ["c=1", "c=2"]
    assert not tab.notice.isVisible() and "Load run finished" in tab.status.text()
    assert window.actions.run.isEnabled() and window.sweep_tab.reason.text() == ""


def test_bad_levels_show_one_line_and_start_nothing(qtbot, make_window):
    window = make_window({"a": spec("a")})
    configure(window, ["a"], new_tokens=4)
    tab = window.load_tab
    assert tab.run_button.isEnabled(), tab.reason.text()
    tab.concurrency.setText("0,x")
    assert tab.reason.text() == "levels must be from 1 to 256, not 0"
    assert not tab.run_button.isEnabled()
    assert tab.start() is False and not tab.job.controller.running and not window.jobs.busy()
    tab.concurrency.setText("1, x")
    assert tab.reason.text() == "levels: 'x' is not a whole number"
    tab.concurrency.setText("1,2")
    tab.slo_itl.setText("fast")
    assert tab.reason.text() == "SLO ITL: 'fast' is not a number" and not tab.run_button.isEnabled()
    tab.slo_itl.clear()
    assert tab.reason.text() == "" and tab.run_button.isEnabled()


def test_local_engines_give_the_concurrency_1_reference_only(qtbot, make_window):
    window = make_window({"a": spec("a", decode_s=0.002)})
    configure(window, ["a"], new_tokens=4, repeats=1, warmup=0)
    tab = window.load_tab
    window.tabs.setCurrentWidget(tab)
    tab.concurrency.setText("1,2")
    with qtbot.waitSignal(tab.finished, timeout=TIMEOUT_MS) as blocker:
        assert tab.start()
    assert blocker.args[0].load == []
    assert [row[:3] for row in _rows(tab)] == [["a", "1", "batch 1"]]
    assert _curves(tab) == {"a": 1}
    assert tab.notice.isVisible() and "No selected engine served concurrently" in tab.notice.text()


def test_a_server_that_is_not_there_is_said_with_its_error(qtbot, make_window):
    """Every request failed: the status line names the engine and says why (as the CLI's caveat does),
    not only that it failed."""
    from whistle_stop.backends.engines.server.lifecycle import free_port

    window = make_window()
    configure(window, ["remote"], new_tokens=4, repeats=1, warmup=0, prompt=PROMPT)
    tab = window.load_tab
    window.setup.option_forms["remote"].edits["url"].setText(f"http://127.0.0.1:{free_port()}/v1")
    tab.concurrency.setText("1,2")
    with qtbot.waitSignal(tab.finished, timeout=TIMEOUT_MS) as blocker:
        assert tab.start(), tab.reason.text()
    failed = [r for r in blocker.args[0].runs if r.status.is_failure]
    assert failed and failed[0].error
    assert "failed: remote" in tab.status.text()
    assert f"remote: {failed[0].error.splitlines()[0]}" in tab.status.text()


def test_request_rates_draw_latency_against_offered_rate_and_say_saturation(qtbot, make_window):
    """Open-loop levels (`bench --request-rate`) against a batch-1 server: the rate table, the rate curve
    (median TTFT and ITL per offered rate) and a plain SATURATED line where the server fell behind."""
    window = make_window()
    configure(window, ["remote"], new_tokens=3, repeats=1, warmup=0, prompt=PROMPT)
    tab = window.load_tab
    window.tabs.setCurrentWidget(tab)
    env = dict(FAKE_VLLM_STEP_MS="10", FAKE_VLLM_PER_SEQ_MS="0", FAKE_VLLM_MAX_SEQS="1")
    with fake_vllm_server(**env) as server:
        window.setup.option_forms["remote"].edits["url"].setText(server.base_url + "/v1")
        tab.concurrency.setText("1")
        tab.rates.setText("5,200")
        tab.rate_requests.setText("6")
        assert tab.run_button.isEnabled(), tab.reason.text()
        with qtbot.waitSignal(tab.finished, timeout=TIMEOUT_MS) as blocker:
            assert tab.start()
    result = blocker.args[0]
    assert not result.failed and result.config.rate.rates == (5.0, 200.0)
    rates = [tab.rate_table.item(r, 1).text() for r in range(tab.rate_table.rowCount())]
    flags = [tab.rate_table.item(r, 4).text() for r in range(tab.rate_table.rowCount())]
    assert rates == ["5", "200"] and flags == ["no", "SATURATED"]
    curves = {item.name(): item.getData()[0].tolist() for item in tab.chart.plots[1].listDataItems() if item.name()}
    assert curves == {"remote TTFT p50": [5.0, 200.0], "remote ITL p50": [5.0, 200.0]}
    labels = [item.toPlainText() for item in tab.chart.plots[1].items if isinstance(item, pg.TextItem)]
    assert "saturated" in labels
    assert tab.saturation.isVisible() and tab.saturation.text().startswith("SATURATED: remote falls behind from 200")
    # the tab's figures export as the report names them
    assert [f.name for f in tab.chart.exportable()] == ["load_curve", "rate_curve"]


def test_bad_request_rates_show_one_line(qtbot, make_window):
    window = make_window({"a": spec("a")})
    configure(window, ["a"], new_tokens=4)
    tab = window.load_tab
    tab.rates.setText("2,fast")
    assert tab.reason.text() == "--request-rate: 'fast' is not a rate in req/s (or inf, or sweep)"
    assert not tab.run_button.isEnabled()
    tab.rates.setText("2")
    tab.burstiness.setText("0")
    assert tab.reason.text() == "--burstiness must be a number > 0, got 0.0"
    tab.burstiness.setText("1")
    assert tab.reason.text() == "" and tab.run_button.isEnabled()
