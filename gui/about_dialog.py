"""Help > About whistle-stop: version, git commit when known, licence, and the notices of the
shipped data (the GPT-2 tokenizer and the evaluation text, see resources/)."""

from __future__ import annotations

import html
import importlib.metadata
import platform

from PySide6.QtCore import Qt, qVersion
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from whistle_stop.backends import __version__
from whistle_stop.backends.storage.paths import RESOURCES

from .theme import icon

DISTRIBUTION = "whistle-stop"
NOTICES = (
    ("GPT-2 tokenizer (resources/tokenizer)", "tokenizer/NOTICE.md"),
    ("Evaluation text (resources/eval)", "eval/NOTICE.md"),
)


def licence() -> str:
    """The licence the package metadata declares (an SPDX expression), else the project's own."""
    try:
        meta = importlib.metadata.metadata(DISTRIBUTION)
        return meta.get("License-Expression") or meta.get("License") or "MIT"
    except importlib.metadata.PackageNotFoundError:
        return "MIT"


def git_commit() -> str:
    """The source checkout's commit ('' for an installed copy, which is not a git checkout)."""
    from whistle_stop.backends.results.environment import git_commit as commit

    return commit()


def notices_markdown() -> str:
    parts = []
    for title, name in NOTICES:
        path = RESOURCES / name
        text = path.read_text(encoding="utf-8") if path.exists() else "(missing)"
        # the files' own `# heading` would outrank ours: demote every heading one level
        text = "\n".join("#" + line if line.startswith("#") else line for line in text.splitlines())
        parts.append(f"## {title}\n\n{text}")
    return "\n\n".join(parts)


def summary_html(commit: str | None = None) -> str:
    commit = git_commit() if commit is None else commit
    rows = [("Version", __version__)]
    if commit:
        rows.append(("Git commit", commit))
    rows += [("Licence", licence()), ("Python", platform.python_version()), ("Qt", qVersion())]
    table = "".join(f"<tr><td><b>{html.escape(k)}</b>&nbsp;&nbsp;</td><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return (
        "<h2>whistle-stop</h2><p>Which way of running GPT-2 is fastest on your machine, and what does the "
        f"speed cost in quality?</p><table>{table}</table>"
    )


class AboutDialog(QDialog):
    def __init__(self, parent: QWidget | None = None, commit: str | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("About whistle-stop")
        self.setWindowIcon(icon("app"))
        self.resize(620, 520)
        logo = QLabel()
        logo.setPixmap(icon("app").pixmap(64, 64))
        logo.setAlignment(Qt.AlignmentFlag.AlignTop)
        self.summary = QLabel(summary_html(commit))
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        top = QHBoxLayout()
        top.addWidget(logo)
        top.addWidget(self.summary, 1)
        self.notices = QTextBrowser()
        self.notices.setOpenExternalLinks(True)
        self.notices.setMarkdown(notices_markdown())
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(QLabel("Notices of the data shipped with the app:"))
        layout.addWidget(self.notices, 1)
        layout.addWidget(buttons)


def add_about_action(window: QMainWindow) -> QAction:
    """A Help menu with "About whistle-stop" (the About role: the app menu on macOS)."""
    action = QAction(icon("app"), "&About whistle-stop", window)
    action.setMenuRole(QAction.MenuRole.AboutRole)
    action.setStatusTip("Version, licence and the notices of the shipped tokenizer and evaluation text")
    action.triggered.connect(lambda: AboutDialog(window).exec())
    window.menuBar().addMenu("&Help").addAction(action)
    window.about_action = action
    return action
