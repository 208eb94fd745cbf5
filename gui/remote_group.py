"""Settings of the `remote` engine (an OpenAI-compatible server), shown while it is ticked.

The API key is either typed (a password field, kept in memory only: never in QSettings, and
`BenchConfig.as_dict()` redacts it from every record) or named as an environment variable
that the engine reads in its worker. Both reach the engine only via `engine_options["remote"]`.
"""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFormLayout, QGroupBox, QLabel, QLineEdit, QWidget

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def engine_takes_api_key() -> bool:
    """Whether the remote engine reads a typed key from `extra["api_key"]` (it announces it with
    `ACCEPTS_API_KEY = True`); until then only an environment variable's name can be given."""
    from backends.engines.remote_engine import RemoteEngine

    return bool(getattr(RemoteEngine, "ACCEPTS_API_KEY", False))


def url_problem(url: str) -> str:
    """Why `url` cannot be a server's address, or ""."""
    url = url.strip()
    if not url:
        return "the remote engine needs its server's URL, e.g. http://127.0.0.1:8000/v1"
    if not url.lower().startswith(("http://", "https://")):
        return f"the remote URL must start with http:// or https:// (got {url[:40]!r})"
    parts = urlsplit(url)
    if not parts.hostname:
        return "the remote URL has no host name"
    try:
        parts.port
    except ValueError:
        return "the remote URL's port is not a number from 0 to 65535"
    return ""


class RemoteGroup(QGroupBox):
    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Remote server", parent)
        self.takes_key = engine_takes_api_key()
        form = QFormLayout(self)
        self.url = QLineEdit()
        self.url.setPlaceholderText("http://127.0.0.1:8000/v1")
        self.url.setToolTip("an OpenAI-compatible completions endpoint (vLLM, TGI, llama.cpp server…)")
        self.model = QLineEdit()
        self.model.setPlaceholderText("optional: the name the server expects")
        self.key = QLineEdit()
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setClearButtonEnabled(True)
        self.key.setPlaceholderText("kept in memory only" if self.takes_key else "use an environment variable")
        self.key.setEnabled(self.takes_key)
        self.key.setToolTip("sent to the engine for this session only; never saved, redacted from every record"
                            if self.takes_key else "this version of the remote engine reads its key only from an "
                            "environment variable: name it below")
        self.key_env = QLineEdit()
        self.key_env.setPlaceholderText("or an environment variable, e.g. OPENAI_API_KEY")
        self.hint = QLabel()
        self.hint.setObjectName("muted")
        self.hint.setWordWrap(True)
        for label, widget in [("URL", self.url), ("Model", self.model), ("API key", self.key),
                              ("Key variable", self.key_env)]:
            form.addRow(label, widget)
            widget.textChanged.connect(self._on_change)
        form.addRow(self.hint)
        self._on_change()

    def problem(self) -> str:
        """Why the remote engine cannot run with these settings, or ""."""
        problem = url_problem(self.url.text())
        if problem:
            return problem
        key, env = self.key.text(), self.key_env.text().strip()
        if key and env:
            return "give the remote API key or the name of an environment variable, not both"
        if env and not ENV_NAME.fullmatch(env):
            return f"{env!r} is not an environment variable name"
        return ""

    def options(self) -> dict:
        """`engine_options["remote"]`: every key whose name holds "key" is redacted in records."""
        options = {"url": self.url.text().strip(), "model": self.model.text().strip()}
        if self.key_env.text().strip():
            options["api_key_env"] = self.key_env.text().strip()
        if self.key.text() and self.takes_key:
            options["api_key"] = self.key.text()
        return options

    def params(self) -> dict:
        """What is remembered between sessions: never the key itself."""
        return {"url": self.url.text(), "model": self.model.text(), "key_env": self.key_env.text()}

    def set_params(self, params: object) -> None:
        if not isinstance(params, dict):
            return
        for key, edit in (("url", self.url), ("model", self.model), ("key_env", self.key_env)):
            if isinstance(params.get(key), str):
                edit.setText(params[key])

    def _on_change(self) -> None:
        env = self.key_env.text().strip()
        if env and ENV_NAME.fullmatch(env):
            state = "is set" if os.environ.get(env) else "is not set in this environment: no key will be sent"
            self.hint.setText(f"${env} {state}")
        elif self.key.text():
            self.hint.setText("the key is kept in memory for this session only")
        else:
            self.hint.setText("no API key")
        self.changed.emit()
