"""A request's runs on the pool, one after the other: each prompt's `best_of` runs (batch 1), read
token by token into its choice (`ChoiceText`: stop strings, logprobs), echo first when asked."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from ..sources.tokenizer import IncrementalDetokenizer, decode
from .answers import Choice
from .choice_text import ChoiceText, Delta, Logprobs
from .jobs import Job, JobEnd, JobToken
from .protocol import Completion, CompletionRequest
from .service import Service


@dataclass
class Step:
    """What one turn of the event loop adds to a choice: its deltas, and its end once it has ended."""

    deltas: list[tuple[Delta, int | None]] = field(default_factory=list)  # (delta, its token id or None)
    end: JobEnd | None = None


class Runs:
    """Every job of one request, started one at a time; `cancel` stops the current one and the rest."""

    def __init__(self, service: Service, completion: Completion) -> None:
        self.service, self.completion = service, completion
        self.id = f"cmpl-{secrets.token_hex(12)}"
        self.jobs: list[Job] = []
        self.cancelled = False

    def start(self, request: CompletionRequest) -> Job:
        """Queue one run (Busy when the pool cannot take it)."""
        job_id = self.id if not self.jobs else f"{self.id}-{len(self.jobs)}"
        job = Job(request, asyncio.get_running_loop(), job_id)
        self.service.pool.submit(job)
        self.jobs.append(job)
        return job

    def cancel(self) -> None:
        self.cancelled = True
        if self.jobs:
            self.jobs[-1].cancel()

    @property
    def tokens(self) -> int:
        return sum(len(job.token_ids) for job in self.jobs)


def new_choice(completion: Completion, prompt_index: int, job: Job, index: int) -> tuple[Choice, ChoiceText]:
    """A choice and its text, whose offsets start after the echoed prompt (when echoed)."""
    request = job.request
    echoed = len(echo_text(completion, prompt_index)) if completion.echo else 0
    text = ChoiceText(request.prompt_ids, completion.stop, completion.logprobs is not None, echoed)
    choice = Choice(index, token_ids=[] if request.token_ids else None)
    if completion.logprobs is not None:
        choice.logprobs = Logprobs()
    return choice, text


def echo_text(completion: Completion, prompt_index: int) -> str:
    given = completion.prompt_texts[prompt_index]
    return given if given is not None else decode(completion.prompts[prompt_index])


def echo_of(completion: Completion, prompt_index: int, job: Job) -> Delta:
    """What a choice starts with: nothing, or with echo its prompt (and its logprobs when asked: the
    worker scores the prompt before the first token, so they are there once anything of the run is)."""
    if not completion.echo:
        return Delta()
    return echo_delta(echo_text(completion, prompt_index), job.request.prompt_ids, job, completion.logprobs)


def echo_delta(text: str, prompt: tuple[int, ...], job: Job, logprobs: int | None) -> Delta:
    """The prompt's text, with each prompt token's logprob when asked."""
    if logprobs is None:
        return Delta(text)
    scored = job.prompt_logprobs
    out = Logprobs()
    detokenizer, offset = IncrementalDetokenizer(), 0
    for i, token in enumerate(prompt):
        logprob = scored.logprobs[i] if scored is not None else None
        top = scored.top_logprobs[i] if scored is not None and i > 0 else None
        out.add(token, logprob, top, offset)
        offset += len(detokenizer.push(token))
    return Delta(text, out)


def add(choice: Choice, delta: Delta, token_id: int | None = None) -> None:
    """A delta into a whole (not streamed) choice."""
    choice.text += delta.text
    if delta.logprobs is not None and choice.logprobs is not None:
        choice.logprobs.extend(delta.logprobs)
    if token_id is not None and choice.token_ids is not None:
        choice.token_ids.append(token_id)


async def steps(job: Job, text: ChoiceText, first: JobToken | JobEnd | None = None) -> AsyncIterator[Step]:
    """The job's tokens as they come, a turn's worth at a time; a stop string stops its worker."""
    item: JobToken | JobEnd | None = first if first is not None else await job.next()
    while True:
        step = Step()
        while isinstance(item, JobToken):
            delta = text.push(item.token_id, item.logprob, item.top_logprobs)
            if delta is not None:
                step.deltas.append((delta, item.token_id))
                if text.stopped:
                    job.stop_here()
            item = job.next_ready()
        if item is None:
            yield step
            item = await job.next()
            continue
        step.deltas.append((text.finish(), None))
        step.end = item
        yield step
        return


def finish_reason(text: ChoiceText, end: JobEnd) -> str:
    return "stop" if text.stopped else end.finish_reason


def best(candidates: list[Choice], n: int, first_index: int) -> list[Choice]:
    """best_of's pick: the `n` runs with the highest summed logprob (all of them when best_of is n),
    numbered from `first_index` in that order."""
    if len(candidates) > n:
        candidates = sorted(candidates, key=lambda c: -c.logprob_sum)[:n]
    for offset, choice in enumerate(candidates):
        choice.index = first_index + offset
    return candidates
