"""The bounded queue between the HTTP side and the engine workers: first come, first served.

Batch 1: each worker takes one request at a time. At most `limit` requests wait; the next one is
refused at once (503 with Retry-After) rather than left to time out, and a waiting request whose
client goes away leaves the queue.
"""

from __future__ import annotations

import threading
from collections import deque

from .jobs import Job


class QueueFull(Exception):
    """No room: the request is refused (503)."""


class QueueClosed(Exception):
    """The server is shutting down: no request is taken any more (503)."""


class Scheduler:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._waiting: deque[Job] = deque()
        self._ready = threading.Condition()
        self._closed = False

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def submit(self, job: Job) -> None:
        with self._ready:
            if self._closed:
                raise QueueClosed()
            if len(self._waiting) >= self.limit:
                raise QueueFull()
            self._waiting.append(job)
            self._ready.notify()

    def take(self, timeout_s: float) -> Job | None:
        """The oldest waiting job, or None after `timeout_s` (or once closed)."""
        with self._ready:
            if not self._waiting and not self._closed:
                self._ready.wait(timeout_s)
            return self._waiting.popleft() if self._waiting and not self._closed else None

    def remove(self, job: Job) -> bool:
        """Take `job` out if it still waits (its client went away); False if a worker has it."""
        with self._ready:
            try:
                self._waiting.remove(job)
            except ValueError:
                return False
            return True

    def close(self) -> list[Job]:
        """Take nothing more; the jobs that were still waiting."""
        with self._ready:
            self._closed = True
            left = list(self._waiting)
            self._waiting.clear()
            self._ready.notify_all()
            return left
