"""The window's actions, with their shortcuts, in the menu bar and the toolbar.

They need only the slots they trigger (`ActionSlots`), not the window's class: the window
imports this module, never the other way round."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QComboBox, QLabel, QMainWindow, QMenu, QToolBar

from .theme import icon

REPLAY_SPEEDS = {"1×": 1.0, "½×": 0.5, "¼×": 0.25, "⅒×": 0.1}


class ActionSlots(Protocol):
    """What the actions trigger (the main window provides them)."""

    def start_run(self) -> bool: ...
    def cancel(self) -> None: ...
    def replay(self) -> bool: ...
    def export_csv(self) -> bool: ...
    def export_charts(self) -> list: ...
    def save_session(self) -> bool: ...
    def open_session(self) -> bool: ...
    def copy_markdown(self) -> str: ...
    def export_report(self) -> object: ...
    def compare_folders(self) -> object: ...
    def compare_sessions(self) -> object: ...


@dataclass
class Actions:
    run: QAction
    cancel: QAction
    replay: QAction
    export_csv: QAction
    export_charts: QAction
    save_session: QAction
    open_session: QAction
    copy_markdown: QAction
    export_report: QAction
    compare: QAction
    compare_sessions: QAction
    quit: QAction
    replay_speed: QComboBox
    view_menu: QMenu  # the window adds its docks' toggles

    def set_state(
        self,
        running: bool,
        can_run: bool,
        has_results: bool,
        can_replay: bool,
        replaying: bool,
        can_report: bool = False,
    ) -> None:
        """`running`: the bench, a sweep or a quality evaluation (Cancel stops whichever it is)."""
        self.run.setEnabled(can_run and not running and not replaying)
        self.cancel.setEnabled(running or replaying)
        self.replay.setEnabled(can_replay and not running and not replaying)
        for action in (self.export_csv, self.export_charts, self.save_session, self.copy_markdown):
            action.setEnabled(has_results and not running)
        self.open_session.setEnabled(not running and not replaying)
        self.export_report.setEnabled(can_report and not running)
        self.compare.setEnabled(not running)


def _action(
    window: QMainWindow,
    text: str,
    icon_name: str,
    slot: Callable[[], object],
    shortcut: QKeySequence | str | None = None,
    tip: str = "",
) -> QAction:
    action = QAction(icon(icon_name), text, window)
    if shortcut is not None:
        action.setShortcut(QKeySequence(shortcut))
        action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
    action.setToolTip(
        f"{tip or text} ({QKeySequence(shortcut).toString(QKeySequence.SequenceFormat.NativeText)})"
        if shortcut
        else tip or text
    )
    action.setStatusTip(tip or text)
    action.triggered.connect(lambda _checked=False: slot())
    return action


def build_actions(window: QMainWindow, slots: ActionSlots) -> Actions:
    """The actions, in `window`'s menu bar and a toolbar of its own."""
    speed = QComboBox()
    speed.addItems(list(REPLAY_SPEEDS))
    speed.setToolTip("replay speed: slow it down to watch fast engines")
    actions = Actions(
        run=_action(window, "Run", "run", slots.start_run, "Ctrl+Return", "Run the selected engines"),
        cancel=_action(window, "Cancel", "cancel", slots.cancel, "Esc", "Stop after the current token"),
        replay=_action(
            window,
            "Replay",
            "replay",
            slots.replay,
            "Ctrl+R",
            "Replay the measured runs side by side on their recorded time axis",
        ),
        export_csv=_action(
            window,
            "Export CSV…",
            "export",
            slots.export_csv,
            "Ctrl+E",
            "Write tokens.csv, runs.csv and environment.json into a folder",
        ),
        export_charts=_action(
            window, "Export charts as PNG…", "chart", slots.export_charts, None, "Save every chart as a PNG image"
        ),
        save_session=_action(
            window,
            "Save session…",
            "save",
            slots.save_session,
            QKeySequence.StandardKey.Save,
            "Save this session's records into a folder",
        ),
        open_session=_action(
            window,
            "Open session…",
            "open",
            slots.open_session,
            QKeySequence.StandardKey.Open,
            "Open a saved session (or any bench --out folder)",
        ),
        copy_markdown=_action(
            window,
            "Copy summary as Markdown",
            "copy",
            slots.copy_markdown,
            "Ctrl+Shift+C",
            "Copy the summary table as Markdown",
        ),
        export_report=_action(
            window,
            "Export report (HTML)…",
            "chart",
            slots.export_report,
            None,
            "One self-contained HTML page of this session's bench, sweep and quality results",
        ),
        compare=_action(
            window,
            "Open folders to compare…",
            "open",
            slots.compare_folders,
            None,
            "Build a comparison report of two or more results folders and open it",
        ),
        compare_sessions=_action(
            window,
            "Compare sessions…",
            "open",
            slots.compare_sessions,
            None,
            "Did it get faster or slower: NEW results folders against BASE, with intervals",
        ),
        quit=_action(window, "Quit", "", window.close, QKeySequence.StandardKey.Quit),
        replay_speed=speed,
        view_menu=QMenu("&View", window),
    )
    menu = window.menuBar()
    file_menu = menu.addMenu("&File")
    for action in (
        actions.open_session,
        actions.save_session,
        None,
        actions.export_csv,
        actions.export_charts,
        actions.copy_markdown,
        None,
        actions.export_report,
        actions.compare,
        actions.compare_sessions,
        None,
        actions.quit,
    ):
        file_menu.addSeparator() if action is None else file_menu.addAction(action)
    run_menu = menu.addMenu("&Run")
    for action in (actions.run, actions.cancel, actions.replay):
        run_menu.addAction(action)
    menu.addMenu(actions.view_menu)

    toolbar = QToolBar("Actions")
    toolbar.setObjectName("actionsToolbar")
    toolbar.setIconSize(QSize(20, 20))
    toolbar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
    for action in (actions.run, actions.cancel, None, actions.replay):
        toolbar.addSeparator() if action is None else toolbar.addAction(action)
    toolbar.addWidget(QLabel(" speed "))
    toolbar.addWidget(speed)
    toolbar.addSeparator()
    for action in (
        actions.open_session,
        actions.save_session,
        actions.export_csv,
        actions.export_charts,
        actions.copy_markdown,
    ):
        toolbar.addAction(action)
    window.addToolBar(toolbar)
    return actions
