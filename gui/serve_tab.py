"""The Serve tab: the winner, served. `whistle-stop serve` runs as a subprocess (gui/serve_job.py), so the
window never waits on it; the tab shows its URL, one line per request (time, status, tokens, TTFT, how it
finished, its error if any; until the first, what to send the server) and its own live figures (requests,
queue depth, TTFT and ITL p50 from its /metrics, read a few times a second off the GUI thread). The model
and its engine settings come from the setup panel, the engine from this tab. A server runs beside the
other jobs (the Load tab can measure it with the `remote` engine); its Stop button or closing the window
stops it, workers and all.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QFormLayout, QLabel, QPlainTextEdit, QTableWidget, QTableWidgetItem, QWidget

from whistle_stop.backends import registry
from whistle_stop.backends.errors import UsageError

from .job_controls import JobControls, JobWording
from .job_handlers import EventRoutes, JobHandlers
from .job_manager import JobKind, JobManager
from .serve_job import HOST, P50_NOTE, ServerLine, ServerListening, ServerSample, ServeSettings, start_serve
from .setup_panel import SetupPanel
from .theme import Theme
from .widgets import controls_column, read_only_table, set_clamped, spin, stacked, three_panes

WORDING = JobWording("server", " Start server", "Server", "stopping the server…", could_not_run="The server stopped")
INTRO = (
    "Serve one engine behind an OpenAI-compatible API (/v1/completions, /v1/models, /health, /metrics) on "
    "127.0.0.1, with the setup's model; `whistle-stop serve` does the same from a terminal."
)
# finish: why generation ended (length, stop, abort, error); error: what the server answered instead
LOG_HEADERS = ["time", "status", "tokens", "TTFT ms", "total ms", "finish", "error"]
MAX_LOG_ROWS = 500
MAX_OUTPUT_LINES = 200


class ServeTab(QWidget):
    message = Signal(str)
    error = Signal(str, str)

    def __init__(self, setup: SetupPanel, jobs: JobManager, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setup, self.jobs = setup, jobs
        self.url = ""
        self._build()
        self.job.controller.attach(
            JobHandlers(
                events=EventRoutes(
                    {ServerListening: self._listening, ServerLine: self._line, ServerSample: self._sample}
                ),
                result=self._stopped,
                failed=self._failed,
                cancelled=lambda: self._stopped(None),
            )
        )
        setup.changed.connect(self.refresh)
        self.refresh()

    # --- building -------------------------------------------------------------------------------
    def _build(self) -> None:
        self.engine = QComboBox()
        for name in registry.names():
            ok, why = registry.available(name)
            self.engine.addItem(name)
            if not ok:
                item = self.engine.model().item(self.engine.count() - 1)
                item.setEnabled(False)
                item.setToolTip(why)
        self.engine.setToolTip("the engine to serve (one worker process each)")
        self.port = spin(1, 65535, 8000, "port on 127.0.0.1")
        self.workers = spin(1, 16, 1, "engine processes: N concurrent streams at N times the memory, the cores split")
        self.queue = spin(0, 1024, 32, "requests that may wait; beyond them the server answers 503 with Retry-After")
        for widget in (self.engine, self.port, self.workers, self.queue):
            signal = widget.currentTextChanged if isinstance(widget, QComboBox) else widget.valueChanged
            signal.connect(lambda *_: self.refresh())
        self.job = JobControls(
            self.jobs,
            JobKind.SERVE,
            WORDING,
            INTRO,
            (self.engine, self.port, self.workers, self.queue),
            self.refresh,
            self.message.emit,
            self.error.emit,
        )
        self.start_button, self.stop_button = self.job.run_button, self.job.cancel_button
        self.stop_button.setText(" Stop server")
        self.start_button.clicked.connect(self.start)
        self.address = QLabel("not serving")
        self.address.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        form = QFormLayout()
        form.addRow("Engine", self.engine)
        form.addRow("Port", self.port)
        form.addRow("Workers", self.workers)
        form.addRow("Queue", self.queue)
        form.addRow("URL", self.address)
        controls = controls_column(form, self.start_button, self.stop_button, status=(self.job.reason, self.job.status))

        self.log = read_only_table(QTableWidget(0, len(LOG_HEADERS)), LOG_HEADERS)
        self.hint = QLabel()  # what to send the server, while its log is empty
        self.hint.setObjectName("muted")
        self.hint.setWordWrap(True)
        self.hint.setTextFormat(Qt.TextFormat.PlainText)
        self.hint.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.port.valueChanged.connect(lambda *_: self._show_hint())
        self._show_hint()
        self.figures: dict[str, QLabel] = {}
        figures = QFormLayout()
        for key, label in (
            ("health", "State"),
            ("requests", "Requests"),
            ("running", "Running"),
            ("waiting", "Queue depth"),
            ("tokens", "Tokens"),
            ("ttft", f"TTFT ({P50_NOTE})"),
            ("itl", f"ITL ({P50_NOTE})"),
        ):
            self.figures[key] = QLabel("-")
            figures.addRow(label, self.figures[key])
        holder = QWidget()
        holder.setLayout(figures)
        self.output = QPlainTextEdit()
        self.output.setReadOnly(True)
        self.output.setMaximumBlockCount(MAX_OUTPUT_LINES)
        self.output.setPlaceholderText("the server's own messages")
        requests = stacked(self.hint, self.log, stretch=self.log)
        three_panes(
            self,
            (controls, requests, stacked(holder, self.output, stretch=self.output)),
            stretch=1,
            sizes=(280, 620, 420),
        )

    # --- starting -------------------------------------------------------------------------------
    def settings(self) -> ServeSettings:
        name = self.engine.currentText()
        form = self.setup.option_forms.get(name)
        return ServeSettings(
            name,
            self.setup.model_spec(),
            self.port.value(),
            self.workers.value(),
            self.queue.value(),
            self.setup.threads.value(),
            form.settings() if form else None,
        )

    def problem(self) -> str:
        """Why Start cannot start now, or ""."""
        blocked = self.job.blocker()
        if blocked:
            return blocked
        name = self.engine.currentText()
        ok, why = registry.available(name) if name else (False, "choose an engine")
        if not ok:
            return f"{name}: {why}"
        form = self.setup.option_forms.get(name)
        if form is not None and form.problem():
            return form.problem()
        if self.setup.model_info.error:
            return self.setup.model_info.error
        return ""

    def refresh(self) -> None:
        self.job.show_problem(self.problem())

    def start(self) -> bool:
        self.setup.flush()
        if self.job.refuse(self.problem()):
            return False
        settings = self.settings()
        try:
            start_serve(self.job.controller, settings)
        except UsageError as exc:
            self.error.emit("Cannot start the server", str(exc))
            return False
        self.log.setRowCount(0)
        self._show_hint()
        self.output.clear()
        for label in self.figures.values():
            label.setText("-")
        self.job.status.setText(f"starting {settings.engine} with {settings.model}…")
        self.message.emit(f"starting the server ({settings.engine})…")
        return True

    def stop(self) -> None:
        self.job.controller.cancel()

    # --- events (GUI thread) --------------------------------------------------------------------
    def _listening(self, event: ServerListening) -> None:
        self.url = event.url
        self.address.setText(event.url)
        self._show_hint()
        self.message.emit(f"serving at {event.url}")

    def _line(self, event: ServerLine) -> None:
        entry = event.entry
        if entry is None:
            self.output.appendPlainText(event.text)
            self.job.status.setText(event.text)
            return
        if self.log.rowCount() >= MAX_LOG_ROWS:
            self.log.removeRow(0)
        row = self.log.rowCount()
        self.log.insertRow(row)
        cells = [
            entry.time.split("T")[-1],
            str(entry.status),
            str(entry.tokens),
            "-" if entry.ttft_ms is None else f"{entry.ttft_ms:.1f}",
            f"{entry.total_ms:.1f}",
            entry.finish,
            entry.error,
        ]
        for column, text in enumerate(cells):
            self.log.setItem(row, column, QTableWidgetItem(text))
        self.log.scrollToBottom()
        self._show_hint()

    def _show_hint(self) -> None:
        """Until a request comes, what will appear and what to send: the URL this tab serves (or will)."""
        self.hint.setVisible(self.log.rowCount() == 0)
        self.hint.setText(request_hint(self.url or f"http://{HOST}:{self.port.value()}/v1"))

    def _sample(self, sample: ServerSample) -> None:
        state = sample.health + (f": {sample.reason}" if sample.reason and sample.health != "ok" else "")
        values = {
            "health": state,
            "requests": str(sample.requests),
            "running": str(sample.running),
            "waiting": str(sample.waiting),
            "tokens": str(sample.tokens),
            "ttft": sample.ttft_text,  # the bucket holding the median: what the server's histogram knows
            "itl": sample.itl_text,
        }
        for key, text in values.items():
            self.figures[key].setText(text)

    def _stopped(self, code: object) -> None:
        self.url = ""
        self.address.setText("not serving")
        self.figures["health"].setText("stopped")
        text = "server stopped" + (f" (exit status {code})" if code not in (None, 0) else "")
        self.job.status.setText(text)
        self.message.emit(text)

    def _failed(self, message: str) -> None:
        self.url = ""
        self.address.setText("not serving")
        self.figures["health"].setText("stopped")
        self.job.show_failure(message)

    # --- preferences and theme ------------------------------------------------------------------
    def prefs(self) -> dict:
        return {
            "engine": self.engine.currentText(),
            "port": self.port.value(),
            "workers": self.workers.value(),
            "queue": self.queue.value(),
        }

    def set_prefs(self, prefs: object) -> None:
        if not isinstance(prefs, dict):
            return
        if isinstance(prefs.get("engine"), str) and self.engine.findText(prefs["engine"]) >= 0:
            self.engine.setCurrentText(prefs["engine"])
        for key, box in (("port", self.port), ("workers", self.workers), ("queue", self.queue)):
            value = prefs.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                set_clamped(box, value)

    def apply_theme(self, theme: Theme) -> None:
        """Nothing themed beyond the application's palette."""


def request_hint(url: str) -> str:
    """The empty log's text: one row per request, and the commands that send some to `url` (.../v1)."""
    return (
        "One row per request once the server runs: time, status, tokens, TTFT, total, how it finished "
        "(length, stop, abort) or its error. Send one:\n"
        f'curl {url}/completions -d \'{{"prompt": "Hello", "max_tokens": 20}}\'\n'
        "or measure it under load (or in the Load tab, with the remote engine):\n"
        f"whistle-stop bench --backends remote --remote-url {url} --concurrency 1,2,4,8"
    )
