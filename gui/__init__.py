"""The desktop app (PySide6 + pyqtgraph): it collects the engine room's events and draws them."""
