"""What each engine last measured on this machine, per model: its one-time build, cold start,
TTFT and ms/token. A small JSON in the user cache, written when a bench finishes; the window's
estimate before Run reads it ("builds onnx-int8: last took 18.6 s; about 40 s")."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

from .atomic import atomic_write
from .paths import cache_dir

HISTORY_JSON = "engine-history.json"


@dataclass(frozen=True)
class EngineHistory:
    build_s: float | None = None  # the last build this engine had to make for this model (None: never seen one)
    cold_start_s: float | None = None
    ttft_ms: float | None = None
    ms_per_token: float | None = None
    measured_at: str = ""


def _key(engine: str, model_hash: str) -> str:
    return f"{engine}|{model_hash}"


def _read() -> dict:
    try:
        data = json.loads((cache_dir() / HISTORY_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def lookup(engine: str, model_hash: str) -> EngineHistory | None:
    entry = _read().get(_key(engine, model_hash))
    if not isinstance(entry, dict):
        return None
    known = EngineHistory.__dataclass_fields__
    return EngineHistory(**{k: v for k, v in entry.items() if k in known})


def remember(runs: Sequence, model_hash: str) -> None:
    """Keep each engine's figures from a finished session's records (RunRecords): the build only
    when one was made (a cached start leaves the last build's duration), the rest when measured."""
    from ..results.summary import summarize_backends

    if not model_hash:
        return
    data = _read()
    now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    for s in summarize_backends(list(runs)):
        old = data.get(_key(s.backend, model_hash)) or {}
        entry = dict(old) if isinstance(old, dict) else {}
        if s.build_s:
            entry["build_s"] = round(s.build_s, 3)
        if s.cold_start_s is not None:
            entry["cold_start_s"] = round(s.cold_start_s, 3)
        if s.runs and s.ms_per_token.n:
            entry.update(
                ttft_ms=round(s.ttft_ms.median, 3), ms_per_token=round(s.ms_per_token.median, 4), measured_at=now
            )
        if entry:
            data[_key(s.backend, model_hash)] = entry
    with atomic_write(cache_dir() / HISTORY_JSON, encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
