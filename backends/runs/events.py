"""What a session reports while it runs (besides each worker's own `BackendEvent`s).

The CLI prints these and the GUI draws them; both get them through the session's `on_event`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..results.load import LoadRequestRecord
from ..results.records import RunRecord, TokenRecord
from ..sources.model_files import ModelFiles
from .config import BenchConfig

EventSink = Callable[[object], None]


@dataclass(frozen=True)
class SessionStarted:
    model: ModelFiles
    prompt_ids: list[int]
    config: BenchConfig


@dataclass(frozen=True)
class RunRecorded:
    record: RunRecord
    tokens: list[TokenRecord]


@dataclass(frozen=True)
class LoadRecorded:
    """One load round's requests (a server engine at a concurrency above 1)."""

    records: list[LoadRequestRecord]


# A sweep's progress, cell by cell.
@dataclass(frozen=True)
class CellStarted:
    prompt_tokens: int
    new_tokens: int
    index: int  # 1-based among the cells of this session
    total: int


@dataclass(frozen=True)
class CellDone:
    prompt_tokens: int
    new_tokens: int
    index: int
    total: int


@dataclass(frozen=True)
class SweepNote:
    message: str


# The harness calibration after a bench (runs/calibration.py): a timing like any other, so a
# window keeps still from the first event to the second.
@dataclass(frozen=True)
class HarnessCalibrating:
    tokens: int


@dataclass(frozen=True)
class HarnessCalibrated:
    harness: dict  # environment.json's "harness"
