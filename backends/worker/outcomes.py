"""How a request to a worker ended: its tokens or scores, or the failure, and the status and one-line
error that a record takes from them."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..profilers.capture import ProfileCapture
from ..status import RunStatus
from .events import Failed, LoadDone, LoadRequest, RunDone, RunRequest, ScoreDone, ScoreRequest, Token, WorkerLost


def outcome_status(done: RunDone | ScoreDone | None, failure: Failed | WorkerLost | None) -> RunStatus:
    """How a request ended: a lost worker says why, an engine exception is an error, a cancel is not one."""
    if isinstance(failure, WorkerLost):
        return failure.reason
    if failure is not None or done is None:
        return RunStatus.ERROR
    return RunStatus.CANCELLED if done.cancelled else RunStatus.OK


def failure_text(failure: Failed | WorkerLost | None) -> str:
    """The one line a record's `error` column shows ("" when nothing failed)."""
    if isinstance(failure, Failed):
        return failure.message
    if isinstance(failure, WorkerLost):
        return f"worker {failure.reason}: {failure.detail}"
    return ""


class _Ended:
    """`status` and `error` of a request, from how it ended (what both outcomes share)."""

    done: RunDone | ScoreDone | None
    failure: Failed | WorkerLost | None

    @property
    def status(self) -> RunStatus:
        return outcome_status(self.done, self.failure)

    @property
    def error(self) -> str:
        return failure_text(self.failure)


@dataclass
class RunOutcome(_Ended):
    request: RunRequest
    started_ns: int = 0
    tokens: list[Token] = field(default_factory=list)
    done: RunDone | None = None
    failure: Failed | WorkerLost | None = None
    profile: ProfileCapture | None = None  # a profiled run's capture (RunRequest.profile_trace)

    @property
    def short(self) -> bool:
        """Ended without a failure or a cancel, but with fewer tokens than asked (a server that stopped
        at end-of-text): less work than every other engine's run, so no figure may count it."""
        done = self.done
        if self.failure is not None or done is None or done.cancelled:
            return False
        return done.tokens < self.request.new_tokens

    @property
    def status(self) -> RunStatus:
        return RunStatus.ERROR if self.short else super().status

    @property
    def error(self) -> str:
        if self.short:
            made, asked = self.done.tokens, self.request.new_tokens
            return f"stopped early: {made} of {asked} tokens (every engine makes all of them)"
        return super().error


@dataclass
class LoadOutcome:
    request: LoadRequest
    done: LoadDone | None = None
    failure: Failed | WorkerLost | None = None

    @property
    def error(self) -> str:
        return failure_text(self.failure)

    @property
    def failure_status(self) -> RunStatus:
        """How a round that failed as a whole ended: a lost worker says why (timeout, killed, crashed)."""
        return outcome_status(None, self.failure)


@dataclass
class ScoreOutcome(_Ended):
    request: ScoreRequest
    done: ScoreDone | None = None
    failure: Failed | WorkerLost | None = None
