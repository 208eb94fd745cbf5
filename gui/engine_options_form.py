"""A form for one engine's typed settings (backends/engine_settings.py), shown while it is ticked.

One line edit per field that has a label; secret fields are password fields kept in memory
only: `params()` (what QSettings remembers) leaves them out, and records redact them.
"""

from __future__ import annotations

import dataclasses

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFormLayout, QGroupBox, QLabel, QLineEdit, QWidget

from whistle_stop.backends.engine_settings import REDACTED, EngineSettings, OptionMeta


class EngineOptionsForm(QGroupBox):
    changed = Signal()

    def __init__(self, settings_class: type[EngineSettings], parent: QWidget | None = None) -> None:
        super().__init__(settings_class.TITLE or settings_class.__name__, parent)
        self.settings_class = settings_class
        self.edits: dict[str, QLineEdit] = {}  # field name -> its edit
        form = QFormLayout(self)
        for field, meta in settings_class.options():
            if not meta.label:
                continue
            edit = QLineEdit()
            edit.setPlaceholderText(meta.placeholder)
            edit.setToolTip(meta.tooltip)
            if meta.secret:
                edit.setEchoMode(QLineEdit.EchoMode.Password)
                edit.setClearButtonEnabled(True)
            form.addRow(meta.label, edit)
            edit.textChanged.connect(self._on_change)
            self.edits[field.name] = edit
        self.hint = QLabel()
        self.hint.setObjectName("muted")
        self.hint.setWordWrap(True)
        form.addRow(self.hint)
        self._on_change()

    def settings(self) -> EngineSettings:
        """The typed settings; text is trimmed (secrets are taken as typed), and an empty field
        whose default is None stays unset."""
        values = {}
        for field, meta in self._shown():
            text = self.edits[field.name].text()
            text = text if meta.secret else text.strip()
            if text or field.default is not None:
                values[field.name] = text
        return self.settings_class(**values)

    def problem(self) -> str:
        """Why the engine cannot run with these settings, or ""."""
        return self.settings().problem()

    def params(self) -> dict:
        """What is remembered between sessions: never a secret."""
        return {
            meta.saved_as or field.name: self.edits[field.name].text()
            for field, meta in self._shown()
            if not meta.secret
        }

    def set_params(self, params: object) -> None:
        if not isinstance(params, dict):
            return
        for field, meta in self._shown():
            value = params.get(meta.saved_as or field.name)
            if isinstance(value, str) and not meta.secret:
                self.edits[field.name].setText(value)

    def set_recorded(self, record: object) -> None:
        """Show the settings a run recorded (environment.json's: field names, unset fields left out).
        Secrets and fields records redact keep what the form holds."""
        if not isinstance(record, dict):
            return
        for field, meta in self._shown():
            value = record.get(field.name)
            if not meta.secret and value != REDACTED:
                self.edits[field.name].setText("" if value is None else str(value))

    def _shown(self) -> list[tuple[dataclasses.Field, OptionMeta]]:
        return [(field, meta) for field, meta in self.settings_class.options() if field.name in self.edits]

    def _on_change(self) -> None:
        self.hint.setText(self.settings().hint())
        self.changed.emit()
