"""What a session hands back: the records of every run, and the environment they ran in."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..results.load import LoadRequestRecord
from ..results.records import RunRecord, TokenRecord
from ..sources.model_files import ModelFiles
from .config import BenchConfig


@dataclass
class BenchResult:
    config: BenchConfig
    model: ModelFiles
    prompt_ids: list[int]
    runs: list[RunRecord] = field(default_factory=list)
    tokens: list[TokenRecord] = field(default_factory=list)
    environment: dict = field(default_factory=dict)
    load: list[LoadRequestRecord] = field(default_factory=list)  # load rounds (concurrency > 1)
    cancelled: bool = False

    @property
    def failed(self) -> bool:
        """A run failed (a cancelled one did not): the CLI's exit status 1."""
        return any(r.status.is_failure for r in self.runs) or any(r.status.is_failure for r in self.load)
