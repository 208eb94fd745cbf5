"""whistle-stop's engine room: engines, worker, statistics and export. No Qt here."""

__version__ = "0.1.0"
