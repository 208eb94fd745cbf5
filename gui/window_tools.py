"""The Sweep and Quality tabs in the window, and who may run when.

One job at a time: the bench, a sweep, a quality evaluation and a replay exclude each other
(each spawns engines that would contend for the cores, and Cancel/Esc must mean one thing).
While one runs, the others' Run buttons are disabled with the reason shown.
"""

from __future__ import annotations

from .quality_tab import QualityTab
from .sweep_tab import SweepTab


class ToolsMixin:
    """Mixed into MainWindow (uses its setup panel, tabs, controller, replayer and messages)."""

    def _build_tools(self) -> None:
        self.sweep_tab = SweepTab(self.setup, self.extra_specs)
        self.quality_tab = QualityTab(self.setup, self.extra_specs)
        self.tabs.addTab(self.sweep_tab, "Sweep")
        self.tabs.addTab(self.quality_tab, "Quality")
        for tab in (self.sweep_tab, self.quality_tab):
            tab.running_changed.connect(self._on_tool_running)
            tab.finished.connect(lambda _result: self._update_actions())  # results to report now
            tab.message.connect(self._say)
            tab.error.connect(self._report)

    def tools_busy(self) -> bool:
        return self.sweep_tab.running or self.quality_tab.running

    def busy(self) -> bool:
        return self.controller.running or self.tools_busy()

    def _on_tool_running(self, _running: bool) -> None:
        self.setup.set_running(self.busy())
        self._update_actions()

    def _update_blocks(self) -> None:
        """Tell each tab why it may not start now ("" when it may)."""
        if not hasattr(self, "quality_tab"):
            return
        reasons = [(self.controller.running, "a benchmark run is in progress"),
                   (self.replayer.running, "a replay is running"),
                   (self.sweep_tab.running, "a sweep is running"),
                   (self.quality_tab.running, "a quality evaluation is running")]
        for tab in (self.sweep_tab, self.quality_tab):
            blocked = next((why for active, why in reasons if active and not tab.running), "")
            if blocked != tab.blocked:
                tab.blocked = blocked
                tab.refresh()

    def _cancel_tools(self) -> bool:
        for tab in (self.sweep_tab, self.quality_tab):
            if tab.running:
                tab.cancel()
                return True
        return False

    def _shutdown_tools(self) -> None:
        for tab in (self.sweep_tab, self.quality_tab):
            tab.shutdown()

    def _tool_prefs(self) -> dict:
        return {"sweep": self.sweep_tab.prefs(), "quality": self.quality_tab.prefs()}

    def _restore_tools(self, prefs: dict) -> None:
        self.sweep_tab.set_prefs(prefs.get("sweep"))
        self.quality_tab.set_prefs(prefs.get("quality"))
