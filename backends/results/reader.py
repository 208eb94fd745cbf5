"""Read a results folder (tokens.csv, runs.csv, environment.json) back into typed records.

The inverse of `export.write_results`, with no Qt: the GUI's Open session uses it, and so can
any script. Each cell is converted by the record's field type: "" is None for optional fields,
"true"/"false" are booleans, numbers are numbers; text stays text (token text may be "").
"""

from __future__ import annotations

import csv
import json
import math
import types
import typing
from collections.abc import Callable
from dataclasses import MISSING, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import UsageError
from ..status import RunStatus
from .export import ENVIRONMENT_JSON, LOAD_REQUESTS_CSV, RUNS_CSV, TOKENS_CSV
from .load import LoadRequestRecord
from .records import RunRecord, TokenRecord

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")


class ResultsError(UsageError):
    """A results folder that is missing files or holds cells that do not parse."""


def load_results(folder: Path) -> tuple[list[RunRecord], list[TokenRecord], dict]:
    """(runs, tokens, environment) from a folder written by `write_results`.

    runs.csv is required; tokens.csv and environment.json may be missing (empty results).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ResultsError(f"{folder} is not a folder")
    runs_path = folder / RUNS_CSV
    if not runs_path.exists():
        raise ResultsError(f"{folder} has no {RUNS_CSV}: not a whistle-stop results folder")
    runs = _read_records(runs_path, RunRecord)
    tokens_path = folder / TOKENS_CSV
    tokens = _read_records(tokens_path, TokenRecord) if tokens_path.exists() else []
    environment: dict = {}
    env_path = folder / ENVIRONMENT_JSON
    if env_path.exists():
        try:
            environment = json.loads(env_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ResultsError(f"{env_path} is not valid JSON: {exc}") from exc
        if not isinstance(environment, dict):
            raise ResultsError(f"{env_path} does not hold a JSON object")
        check_sections(environment, env_path)
    return runs, tokens, environment


# environment.json's sections that its readers (reports, the window's Open, a sweep's resume) take
# for objects or lists; dotted: a section inside another.
_OBJECTS = (
    "app",
    "machine",
    "libraries",
    "model",
    "settings",
    "harness",
    "bandwidth",
    "compute_peaks",
    "gpu_compute_peaks",
    "gpu_bandwidth",
    "threads_resolution",
    "sweep",
    "sweep.fingerprint",
    "quality",
    "settings.sampling",
    "settings.timeouts",
    "settings.engine_options",
)
_SECTIONS: dict[str, type] = {
    **dict.fromkeys(_OBJECTS, dict),
    "engines": dict,
    "prefill_roofline": list,
    "settings.backends": list,
    "settings.concurrency": list,
    "settings.rate": dict,
}
# sections whose every member is an object: an engine's facts, a roofline curve (the figures read their keys)
_OBJECT_MEMBERS = ("engines", "prefill_roofline")
_JSON_TYPES: dict[type, str] = {dict: "an object", list: "a list"}


def check_sections(environment: dict, path: Path) -> None:
    """ResultsError when a section has another type (a damaged or hand-edited file): one line here,
    not an AttributeError in whichever view reads it first. Absent or null sections are fine."""
    for dotted, kind in _SECTIONS.items():
        value: Any = environment
        for key in dotted.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None and not isinstance(value, kind):
            raise ResultsError(f"{path} is damaged: {dotted} should be {_JSON_TYPES[kind]}, not {type(value).__name__}")
    for section in _OBJECT_MEMBERS:
        members = environment.get(section) or ()
        for where, member in members.items() if isinstance(members, dict) else enumerate(members):
            if not isinstance(member, dict):
                raise ResultsError(
                    f"{path} is damaged: {section}[{where!r}] should be an object, not {type(member).__name__}"
                )


def load_requests(folder: Path) -> list[LoadRequestRecord]:
    """The load runs' requests of a results folder ([] when it has none)."""
    path = Path(folder) / LOAD_REQUESTS_CSV
    return _read_records(path, LoadRequestRecord) if path.exists() else []


def _read_records(path: Path, cls: type[T]) -> list[T]:
    hints = typing.get_type_hints(cls)
    parsers = {f.name: _parser(hints[f.name]) for f in fields(cls)}
    required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = [name for name in required if name not in (reader.fieldnames or [])]
            if missing:
                raise ResultsError(f"{path.name} lacks the column(s) {', '.join(missing)}")
            out = []
            for line, row in enumerate(reader, start=2):
                values: dict[str, Any] = {}
                for name, parse in parsers.items():
                    if name not in row or row[name] is None:
                        continue  # a column added after the file was written: keep the default
                    try:
                        values[name] = parse(row[name])
                    except ValueError as exc:
                        raise ResultsError(f"{path.name} line {line}, column {name}: {exc}") from exc
                short = [name for name in required if name not in values]
                if short:  # the file ends mid-row: a copy or a write that was cut off
                    raise ResultsError(f"{path.name} line {line} is cut short (no {short[0]}): a truncated file?")
                out.append(cls(**values))
            return out
    except UnicodeDecodeError as exc:
        raise ResultsError(f"{path} is not UTF-8 text: {exc}") from exc
    except csv.Error as exc:
        raise ResultsError(f"{path} is not valid CSV: {exc}") from exc


def _parser(hint: Any) -> Callable[[str], Any]:
    """A str -> value converter for a field annotated `hint` (int, float, bool, str, X | None)."""
    optional = False
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        optional = True
        hint = next(a for a in args if a is not type(None))
    if hint is RunStatus:
        return RunStatus.parse  # a word from a newer version reads as an error, never as a crash
    parsers: dict[Any, Callable[[str], Any]] = {int: _int, float: _float, bool: _bool, str: str}
    base = parsers.get(hint)
    if base is None:
        raise TypeError(f"no CSV parser for {hint!r}")
    if base is str:
        return str  # "" is a valid text (e.g. a token whose bytes are not a whole character yet)

    def parse(cell: str) -> Any:
        if cell.strip() == "":
            if optional:
                return None
            if base is _float:
                return math.nan  # written as "" when it was nan
            raise ValueError("empty cell in a required column")
        return base(cell)

    return parse


def _int(cell: str) -> int:
    try:
        return int(cell)
    except ValueError:
        value = float(cell)  # tolerate "3.0"
        if not value.is_integer():
            raise ValueError(f"{cell!r} is not an integer") from None
        return int(value)


def _float(cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        raise ValueError(f"{cell!r} is not a number") from None


def _bool(cell: str) -> bool:
    lowered = cell.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"{cell!r} is not true/false")
