"""What a run will do, said before it starts: how many runs, which one-time builds are still to
make (an engine's cached artefacts are missing or not whole; no engine is imported to know), and
roughly how long, from what each engine last measured here (storage/engine_history.py)."""

from __future__ import annotations

from dataclasses import dataclass

from .. import registry
from ..sources.model_files import ModelFiles
from ..storage import artifact_cache, engine_history
from .config import BenchConfig


@dataclass(frozen=True)
class PendingBuild:
    engine: str
    last_build_s: float | None  # the last one measured here for this model, if any


@dataclass(frozen=True)
class Estimate:
    engines: int
    warmup: int
    repeats: int
    builds: tuple[PendingBuild, ...] = ()
    seconds: float | None = None  # about, for the engines with a history (None: none has one)
    untimed: tuple[str, ...] = ()  # engines never measured here with this model
    model_known: bool = True  # False: the model's files are not here yet, so builds cannot be checked

    @property
    def runs(self) -> int:
        return self.engines * (self.warmup + self.repeats)

    def lines(self) -> list[str]:
        out = [
            f"{self.runs} runs: {self.engines} engine{'s' if self.engines != 1 else ''} x "
            f"({self.warmup} warm-up + {self.repeats} repeat{'s' if self.repeats != 1 else ''})"
        ]
        if not self.model_known:
            out.append("one-time builds: not known until the model is here")
        elif self.builds:
            timed = [f"{b.engine} (last {b.last_build_s:.1f} s)" for b in self.builds if b.last_build_s]
            untimed = [b.engine for b in self.builds if not b.last_build_s]
            parts = timed + ([f"never timed here: {', '.join(untimed)}"] if untimed else [])
            out.append("one-time builds first: " + "; ".join(parts))
        if self.seconds is None:
            out.append("time: unknown (no engine has run here with this model yet)")
        else:
            line = f"time: about {_duration(self.seconds)}"
            if self.untimed:
                names = ", ".join(self.untimed) if len(self.untimed) <= 3 else f"{len(self.untimed)} engines"
                line += f", not counting {names} (never run here)"
            out.append(line)
        return out


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def pending_builds(names: list[str], model: ModelFiles) -> list[str]:
    """The engines whose cached artefacts for `model` are missing or not whole (storage check only)."""
    out = []
    for name in names:
        spec = registry.ENGINES.get(name)
        if spec is None:
            continue
        try:
            folders = artifact_cache.engine_folders(spec, model)
        except Exception:  # noqa: BLE001 - an estimate never stops a run: an unreadable folder counts as missing
            out.append(name)
            continue
        if any(artifact_cache.check(folder) for folder in folders):
            out.append(name)
    return out


def estimate(config: BenchConfig, model: ModelFiles | None) -> Estimate:
    names = list(config.backends)
    builds = pending_builds(names, model) if model is not None else []
    total, untimed = 0.0, []
    for name in names:
        seen = engine_history.lookup(name, model.weights_hash) if model is not None else None
        if seen is None or seen.ms_per_token is None:
            untimed.append(name)
            continue
        per_run = (seen.ttft_ms or 0.0) / 1e3 + max(0, config.new_tokens - 1) * seen.ms_per_token / 1e3
        total += (seen.cold_start_s or 0.0) + (config.warmup + config.repeats) * per_run
        if name in builds:
            total += seen.build_s or 0.0
    pending = (
        tuple(
            PendingBuild(n, (engine_history.lookup(n, model.weights_hash) or engine_history.EngineHistory()).build_s)
            for n in builds
        )
        if model is not None
        else ()
    )
    timed = len(untimed) < len(names)
    return Estimate(
        len(names), config.warmup, config.repeats, pending, total if timed else None, tuple(untimed), model is not None
    )
