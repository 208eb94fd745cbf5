"""Preferences and the last run's parameters, kept with QSettings.

Parameters are stored as one JSON document so their types survive every QSettings backend
(INI files return strings). Tests pass their own QSettings pointing into a temporary folder.
"""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings

ORGANISATION = APPLICATION = "whistle-stop"
_PARAMS, _PREFS = "run/params", "ui/prefs"
_GEOMETRY, _STATE, _FOLDER = "window/geometry", "window/state", "files/last_folder"


def default_settings() -> QSettings:
    return QSettings(ORGANISATION, APPLICATION)


def settings_in(folder: Path) -> QSettings:
    """Settings in an INI file inside `folder` (for tests and portable installs)."""
    return QSettings(str(Path(folder) / "whistle-stop.ini"), QSettings.Format.IniFormat)


class Store:
    def __init__(self, settings: QSettings) -> None:
        self.settings = settings

    def params(self) -> dict:
        return self._json(_PARAMS)

    def save_params(self, params: dict) -> None:
        self.settings.setValue(_PARAMS, json.dumps(params))

    def prefs(self) -> dict:
        """Interface preferences: replay speed, the open chart tab."""
        return self._json(_PREFS)

    def save_prefs(self, prefs: dict) -> None:
        self.settings.setValue(_PREFS, json.dumps(prefs))

    def _json(self, key: str) -> dict:
        raw = self.settings.value(key, "")
        try:
            data = json.loads(raw) if raw else {}
        except (TypeError, json.JSONDecodeError):
            return {}  # a damaged file must not stop the app from starting
        return data if isinstance(data, dict) else {}

    def geometry(self) -> tuple[QByteArray | None, QByteArray | None]:
        geometry, state = self.settings.value(_GEOMETRY), self.settings.value(_STATE)
        return (
            geometry if isinstance(geometry, QByteArray) else None,
            state if isinstance(state, QByteArray) else None,
        )

    def save_geometry(self, geometry: QByteArray, state: QByteArray) -> None:
        self.settings.setValue(_GEOMETRY, geometry)
        self.settings.setValue(_STATE, state)

    def last_folder(self) -> str:
        value = self.settings.value(_FOLDER, "")
        return value if isinstance(value, str) else ""

    def set_last_folder(self, folder: Path) -> None:
        self.settings.setValue(_FOLDER, str(folder))

    def sync(self) -> None:
        self.settings.sync()
