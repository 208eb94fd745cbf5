"""The window's messages: a status-bar line, and a non-blocking box for errors the user must see.

Handed to the helpers that act for the window (session files, reports) so that they report
the same way without knowing the window."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QMessageBox, QWidget


class Messages:
    def __init__(self, state: QLabel, parent: QWidget) -> None:
        self.state = state
        self.parent = parent
        self.last_error = ""

    def say(self, message: str) -> None:
        self.state.setText(message)

    def report(self, title: str, message: str) -> None:
        """An error the user must see: the status bar and a non-blocking message box."""
        self.last_error = message
        self.say(f"{title}: {message.splitlines()[0]}")
        box = QMessageBox(QMessageBox.Icon.Warning, title, message, QMessageBox.StandardButton.Ok, self.parent)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
