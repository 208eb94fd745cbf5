"""One admitted request's life between the HTTP side (the event loop) and a worker slot (a thread).

The slot pushes the worker's tokens and, once, the end; the handler awaits them in order. Cancel
(a client gone, a shutdown) may come from either side at any time: while the job waits it leaves
the queue, while it runs its worker stops after the current token (`Worker.cancel`).
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..sources.tokenizer import EOS_ID
from ..worker.events import PromptLogprobs, Token
from .protocol import CompletionRequest


@dataclass(frozen=True)
class JobToken:
    token_id: int
    t_ns: int  # the worker's stamp (perf_counter_ns: one clock across processes)
    logprob: float | None = None  # asked for (CompletionRequest.logprobs): log-softmax of the raw logits
    top_logprobs: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class JobEnd:
    finish_reason: str  # "length", "stop" (end-of-text, a stop string), "abort" (cancelled), "error"
    status: int = 200  # 500: the engine failed or its worker was lost; 503: shut down before it ran
    error: str = ""


class Job:
    def __init__(self, request: CompletionRequest, loop: asyncio.AbstractEventLoop, job_id: str = "") -> None:
        self.id = job_id or f"cmpl-{secrets.token_hex(12)}"
        self.request = request
        self.prompt_logprobs: PromptLogprobs | None = None  # echo's scores, before the first token
        self.arrived_ns = time.perf_counter_ns()
        self.started_ns = 0
        self.token_ids: list[int] = []
        self.token_ns: list[int] = []
        self.end: JobEnd | None = None
        self._loop = loop
        self._items: asyncio.Queue = asyncio.Queue()
        self._lock = threading.Lock()
        self._cancelled = False
        self._stopped = ""  # "stop": end-of-text reached, later tokens are dropped
        self._on_cancel: Callable[[], None] | None = None  # leave the queue, or stop the worker

    # --- any thread ----------------------------------------------------------------------------
    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        """Stop this job (no-op once it has ended)."""
        with self._lock:
            if self._cancelled or self.end is not None:
                return
            self._cancelled = True
            on_cancel = self._on_cancel
        if on_cancel is not None:
            on_cancel()

    def stop_here(self) -> None:
        """A stop string ended the text: the worker stops after its current token, the job ends "stop"."""
        with self._lock:
            if self._cancelled or self.end is not None:
                return
            self._stopped = "stop"
            on_cancel = self._on_cancel
        if on_cancel is not None:
            on_cancel()

    def on_cancel(self, action: Callable[[], None] | None) -> bool:
        """What `cancel` does from now on; False (and nothing set) when the job is already cancelled."""
        with self._lock:
            if self._cancelled:
                return False
            self._on_cancel = action
            return True

    # --- the worker slot -----------------------------------------------------------------------
    def push(self, token: Token) -> bool:
        """One generated token; True when it ends the job at end-of-text (the slot stops the worker)."""
        if self._stopped or self.end is not None:
            return False  # generated after end-of-text, before the worker stopped: dropped
        request = self.request
        if request.stop_at_eos and token.token_id == EOS_ID and len(self.token_ids) >= request.min_tokens:
            self._stopped = "stop"
            return True
        self.token_ids.append(token.token_id)
        self.token_ns.append(token.t_ns)
        self._deliver(JobToken(token.token_id, token.t_ns, token.logprob, token.top_logprobs))
        return False

    def outcome(self) -> JobEnd:
        """How the run went, once the worker is done with it: length, stop (end-of-text) or abort."""
        if self._stopped:
            return JobEnd(self._stopped)
        return JobEnd("length" if len(self.token_ids) >= self.request.max_tokens else "abort")

    def finish(self, end: JobEnd | None = None) -> JobEnd:
        """The job's end, once: `end`, else its `outcome`; the handler gets it after every token."""
        with self._lock:
            if self.end is not None:
                return self.end
            end = end or self.outcome()
            self.end = end
            self._on_cancel = None
        self._deliver(end)
        return end

    def _deliver(self, item: JobToken | JobEnd) -> None:
        try:
            self._loop.call_soon_threadsafe(self._items.put_nowait, item)
        except RuntimeError:
            pass  # the event loop has closed: nobody is waiting any more

    # --- the event loop ------------------------------------------------------------------------
    async def next(self) -> JobToken | JobEnd:
        return await self._items.get()

    def next_ready(self) -> JobToken | JobEnd | None:
        """The next item if it has been delivered already, else None (without waiting)."""
        try:
            return self._items.get_nowait()
        except asyncio.QueueEmpty:
            return None
