"""What each engine measured on this machine in its last few sessions, per model: its one-time
build, cold start, TTFT and ms/token. A small JSON in the user cache, written when a bench
finishes; the window's estimate before Run reads the median of each ("one-time builds first:
onnx-int8 (about 18.6 s here)"), so one slow session (a cold page cache, a busy moment) does not move it.

The file holds at most KEEP figures of each kind per engine and model, for the MAX_ENTRIES pairs
measured last. A file it cannot read (corrupt, or a later format) counts as empty; the first
format (each pair's last figures only) is read as one session each.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..storage.atomic import atomic_write
from ..storage.paths import cache_dir
from .summary import summarize_backends

HISTORY_JSON = "engine-history.json"
FORMAT = 2
KEEP = 5  # sessions per engine and model: from three on, one slow session does not move the median
MAX_ENTRIES = 200  # engine x model pairs kept, the ones measured last (the file stays under 100 kB)
FIGURES = ("build_s", "cold_start_s", "ttft_ms", "ms_per_token")


@dataclass(frozen=True)
class EngineHistory:
    build_s: float | None = None  # the median of the builds this engine had to make for this model (None: none seen)
    cold_start_s: float | None = None
    ttft_ms: float | None = None
    ms_per_token: float | None = None
    measured_at: str = ""
    sessions: int = 0  # how many sessions' speeds the medians are of


@dataclass
class _Kept:
    """One engine and model's last KEEP values of each figure, oldest first (the file's entry)."""

    figures: dict[str, list[float]] = field(default_factory=dict)
    measured_at: str = ""

    def add(self, name: str, value: float | None, digits: int) -> None:
        if value is not None and math.isfinite(value):
            self.figures[name] = [*self.figures.get(name, []), round(value, digits)][-KEEP:]

    def median(self, name: str) -> float | None:
        values = self.figures.get(name)
        return statistics.median(values) if values else None

    def as_json(self) -> dict[str, object]:
        return {**self.figures, "measured_at": self.measured_at}


def _key(engine: str, model_hash: str) -> str:
    return f"{engine}|{model_hash}"


def _values(value: object) -> list[float]:
    """A figure's kept values: a list (this format) or one number (the first format's last value)."""
    values = value if isinstance(value, list) else [value]
    numbers = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return [v for v in numbers if math.isfinite(v) and v >= 0][-KEEP:]


def _kept(raw: object) -> _Kept | None:
    """One entry of the file, checked field by field; None for anything that is not one."""
    if not isinstance(raw, dict):
        return None
    figures = {name: values for name in FIGURES if (values := _values(raw.get(name)))}
    measured_at = raw.get("measured_at")
    return _Kept(figures, measured_at if isinstance(measured_at, str) else "") if figures else None


def _read() -> dict[str, _Kept]:
    try:
        data = json.loads((cache_dir() / HISTORY_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    if "format" not in data:  # the first format: {key: that pair's last figures}
        entries = data
    elif data["format"] == FORMAT and isinstance(data.get("entries"), dict):
        entries = data["entries"]
    else:  # a later format this version cannot read
        return {}
    return {key: kept for key, raw in entries.items() if isinstance(key, str) and (kept := _kept(raw))}


def lookup(engine: str, model_hash: str) -> EngineHistory | None:
    kept = _read().get(_key(engine, model_hash))
    if kept is None:
        return None
    return EngineHistory(
        build_s=kept.median("build_s"),
        cold_start_s=kept.median("cold_start_s"),
        ttft_ms=kept.median("ttft_ms"),
        ms_per_token=kept.median("ms_per_token"),
        measured_at=kept.measured_at,
        sessions=len(kept.figures.get("ms_per_token", [])),
    )


def remember(runs: Sequence, model_hash: str) -> None:
    """Add each engine's figures from a finished session's records (RunRecords): a build only when
    one was made (a cached start has none), the others when measured."""
    if not model_hash:
        return
    data = _read()
    now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    for s in summarize_backends(list(runs)):
        key = _key(s.backend, model_hash)
        kept = data.pop(key, None) or _Kept()  # popped: put back last, as the newest
        if s.build_s:
            kept.add("build_s", s.build_s, 3)
        kept.add("cold_start_s", s.cold_start_s, 3)
        if s.runs and s.ms_per_token.n:
            kept.add("ttft_ms", s.ttft_ms.median, 3)
            kept.add("ms_per_token", s.ms_per_token.median, 4)
            kept.measured_at = now
        if kept.figures:
            data[key] = kept
    newest = list(data.items())[-MAX_ENTRIES:]  # in the order last measured
    with atomic_write(cache_dir() / HISTORY_JSON, encoding="utf-8") as f:
        json.dump({"format": FORMAT, "entries": {key: kept.as_json() for key, kept in newest}}, f, indent=1)
