"""The Run button's job: a BenchSession on a job controller (the bench controller draws its events; the
Load tab starts it too, with levels set)."""

from __future__ import annotations

from dataclasses import dataclass

from whistle_stop.backends.runs.bench import BenchConfig, BenchResult, BenchSession
from whistle_stop.backends.sources.model_files import ModelFiles

from .job_context import JobContext
from .job_controller import JobController


@dataclass(frozen=True)
class BenchPrepared:
    """What the controller's `ready` carries: the resolved model and the prompt's token ids."""

    model: ModelFiles
    prompt_ids: list[int]


def start_bench(controller: JobController, config: BenchConfig) -> None:
    """Validate and start; UsageError (bad config, another job running) is raised here, before
    any thread. The controller's `result` then carries the BenchResult (cancelled ones too)."""
    session = BenchSession(config, on_event=controller.sink())

    def work(context: JobContext) -> BenchResult:
        model, ids = context.prepare(config.model, session.prepare)
        context.ready(BenchPrepared(model, ids))
        return session.run(model, ids)

    controller.start(work, session.cancel)
