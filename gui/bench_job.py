"""The Run button's job: a BenchSession on the job runner (the window draws its events)."""

from __future__ import annotations

from dataclasses import dataclass

from whistle_stop.backends.registry import EngineSpec
from whistle_stop.backends.runs.bench import BenchConfig, BenchResult, BenchSession
from whistle_stop.backends.sources.model_files import ModelFiles

from .job_runner import JobContext, JobRunner


@dataclass(frozen=True)
class BenchPrepared:
    """What the runner's `ready` carries: the resolved model and the prompt's token ids."""

    model: ModelFiles
    prompt_ids: list[int]


def start_bench(runner: JobRunner, config: BenchConfig, specs: dict[str, EngineSpec] | None = None) -> None:
    """Validate and start; UsageError (bad config, another job running) is raised here, before
    any thread. The runner's `finished` then carries the BenchResult (cancelled ones too)."""
    session = BenchSession(config, on_event=runner.sink(), specs=specs)

    def work(context: JobContext) -> BenchResult:
        model, ids = context.prepare(config.model, session.prepare)
        context.ready(BenchPrepared(model, ids))
        return session.run(model, ids)

    runner.start(work, session.cancel)
