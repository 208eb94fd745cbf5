"""What a view does with its job, declared once: the job controller dispatches to it. No Qt here.

A view (a tab, the bench controller) fills one `JobHandlers`: what it does when its job starts,
reports progress, is ready, yields its result, fails, is being cancelled or was cancelled, and
an `EventRoutes` table from event type to handler for the session events in between.
`JobController.attach` connects it; nothing else in the window wires a job's signals or sorts
its events by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from whistle_stop.backends.worker.events import BackendEvent

Handler = Callable[[Any], None]


def event_type(event: object) -> type:
    """What an event is routed by: an engine's event (a BackendEvent) by the event it carries,
    so that a table lists worker events (Ready, Failed...) beside session events (RunRecorded...)."""
    return type(event.event) if isinstance(event, BackendEvent) else type(event)


class EventRoutes:
    """Hands each event of a batch, in order, to the handler of its type (a tuple of types shares
    one handler; a subclass takes its nearest base's), then calls `after` once per batch: a view
    that redraws or counts once per tick does it there. An event without a route is passed over.
    Each handler gets the event as it came (an engine's event still wrapped in its BackendEvent)."""

    def __init__(
        self, routes: Mapping[type | tuple[type, ...], Handler], after: Callable[[], None] | None = None
    ) -> None:
        self._routes: dict[type, Handler] = {}
        for kinds, handler in routes.items():
            for kind in kinds if isinstance(kinds, tuple) else (kinds,):
                self._routes[kind] = handler
        self._after = after
        self._resolved: dict[type, Handler | None] = {}  # per concrete type, found once

    def handler(self, kind: type) -> Handler | None:
        if kind not in self._resolved:
            self._resolved[kind] = next((self._routes[k] for k in kind.__mro__ if k in self._routes), None)
        return self._resolved[kind]

    def __call__(self, batch: list) -> None:
        for event in batch:
            handler = self.handler(event_type(event))
            if handler is not None:
                handler(event)
        if self._after is not None:
            self._after()


@dataclass(frozen=True)
class JobHandlers:
    """A view's part in each step of its job's life; None: nothing to do at that step. Exactly
    one of `result`, `failed` and `cancelled` ends each job."""

    events: Callable[[list], None] | None = None  # a batch of session events (an EventRoutes)
    started: Callable[[], None] | None = None
    progress: Callable[[str, float | None], None] | None = None  # while the model is prepared
    ready: Callable[[Any], None] | None = None  # what the job passed to JobContext.ready
    result: Callable[[Any], None] | None = None  # what the job returned (a run cancelled mid-way too)
    failed: Callable[[str], None] | None = None  # the error, for the user
    cancelling: Callable[[], None] | None = None  # Cancel was pressed: the job is stopping
    cancelled: Callable[[], None] | None = None  # stopped before there was a result
    running: Callable[[bool], None] | None = None  # the job started or ended, however
