"""The parent side of a worker: spawn one engine in its own process and read its events.

Each engine runs in a spawned child so that cold start is real, peak memory is its own, and a
crash or a hang takes down nothing but that child. The thread that calls `start`/`run` reads
the pipe; `cancel` and `close` may be called from any thread. A worker that is done with (closed,
lost, failed to load) has its pipe and its `Process` released at once: nothing of it stays open
until the session that made it is collected.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING

from ..engine import EngineOptions
from ..errors import describe_exit, one_line
from ..registry import EngineSpec
from ..sources.model_files import ModelFiles
from ..status import RunStatus
from .child import child_main
from .events import (
    Failed,
    LoadDone,
    LoadProgress,
    LoadRequest,
    LogitsRequest,
    ProfileCaptured,
    Progress,
    Ready,
    RunDone,
    RunRequest,
    RunStarted,
    ScoreDone,
    ScoreRequest,
    Shutdown,
    Token,
    TokenBatch,
    TopLogits,
    WorkerLost,
)
from .outcomes import LoadOutcome, RunOutcome, ScoreOutcome, failure_text
from .timeouts import Timeouts

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.context import SpawnProcess

EventSink = Callable[[object], None]

# BLAS/OpenMP libraries read these once, when first imported. A spawned child imports numpy
# while unpickling its arguments, before any of its own code runs, so the variables must be in
# the environment it inherits. The lock keeps concurrent starts (race mode) from mixing them.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")
_SPAWN_LOCK = threading.Lock()

CLOSE_GRACE_S = 5.0  # an idle worker told to shut down: how long it may take to close its engine
TERMINATE_GRACE_S = 1.0  # after SIGTERM, before SIGKILL
KILL_WAIT_S = 5.0  # after SIGKILL (a process in uninterruptible sleep takes its time)
POLL_S = 0.1  # the reading thread looks at cancel, close and the child's life this often


class WorkerState(Enum):
    """Where a worker is in its life; `close` ends it from each of them."""

    NEW = "new"  # not spawned (yet)
    LOADING = "loading"  # spawning or loading: `start` reads the pipe on its caller's thread
    READY = "ready"  # loaded, nothing in flight
    RUNNING = "running"  # a request in flight: its caller's thread reads the pipe
    CLOSING = "closing"  # being shut down: Shutdown, then join, terminate, kill
    CLOSED = "closed"  # ended (closed, lost, failed to load): its pipe and Process are released


_READING = (WorkerState.LOADING, WorkerState.RUNNING)


class WorkerError(RuntimeError):
    def __init__(self, event: Failed | WorkerLost) -> None:
        super().__init__(failure_text(event))
        self.event = event


class Worker:
    """One engine in a spawned process. Only the thread that reads the pipe (the caller of `start`, `run`,
    `score`...) touches the pipe and the Process; `close` from another thread asks that thread to end the
    worker and waits for it, so no pipe is ever closed under a read."""

    def __init__(
        self,
        spec: EngineSpec,
        model: ModelFiles,
        options: EngineOptions,
        on_event: EventSink | None = None,
        timeouts: Timeouts = Timeouts(),
    ) -> None:
        self.spec, self.model, self.options, self.timeouts = spec, model, options, timeouts
        self._on_event = on_event or (lambda event: None)
        self._context = mp.get_context("spawn")
        self._cancel = self._context.Event()
        self._cancel_requested_at: float | None = None
        self._conn: Connection | None = None
        self._process: SpawnProcess | None = None
        self._pid: int | None = None
        self._state = WorkerState.NEW
        self._closing = False  # `close` was called: nothing new starts, a reader ends the worker
        self._close_grace_s = CLOSE_GRACE_S  # the grace `close` gave, for a reader that ends the worker
        self._reader: int | None = None  # the thread reading the pipe while LOADING or RUNNING
        self._changed = threading.Condition()  # guards the fields above; says when the state changes
        self.spawn_ns = 0
        self.ready: Ready | None = None
        self.lost: WorkerLost | None = None
        self.produced_tokens = False  # set by the session after the first run that yields a token

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> Ready:
        """Spawn the child and wait for Ready; raise WorkerError if it fails, hangs, or is closed first.
        A worker whose start raised is closed: its pipe and Process are released."""
        with self._changed:
            if self._closing:
                raise WorkerError(WorkerLost(RunStatus.KILLED, "closed before it started"))
            if self._state is not WorkerState.NEW:
                raise RuntimeError(f"a worker starts once (this one is {self._state.value})")
            self._enter(WorkerState.LOADING)
        try:
            self._spawn()
        except BaseException as exc:
            self._end(0.0)
            if not isinstance(exc, Exception):
                raise
            # the spec or model cannot be sent to a child, or no process can be made: a failed load
            raise WorkerError(Failed(f"could not start the worker: {one_line(exc)}")) from exc
        while True:
            event = self._next_event(self.timeouts.load_s, run_id=None)
            self._on_event(event)
            if isinstance(event, Ready):
                self._leave()
                if self._state is WorkerState.CLOSED:  # closed as it became ready: ended by `_leave`
                    raise WorkerError(WorkerLost(RunStatus.KILLED, "closed while loading"))
                self.ready = event
                return event
            if isinstance(event, (Failed, WorkerLost)):
                self._end(TERMINATE_GRACE_S)  # after Failed the child exits by itself
                raise WorkerError(event)

    def _spawn(self) -> None:
        """Start the child with the thread variables set; the pipe and Process are kept only once it runs."""
        parent_conn, child_conn = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=child_main,
            args=(child_conn, self._cancel, self.spec, self.model, self.options),
            name=f"whistle-stop:{self.spec.name}",
            daemon=True,
        )
        try:
            with _SPAWN_LOCK:
                saved = {name: os.environ.get(name) for name in THREAD_VARIABLES}
                os.environ.update({name: str(self.options.threads) for name in THREAD_VARIABLES})
                try:
                    self.spawn_ns = time.perf_counter_ns()  # the clock of every stamp (events.py)
                    process.start()
                finally:
                    for name, value in saved.items():
                        if value is None:
                            os.environ.pop(name, None)
                        else:
                            os.environ[name] = value
        except BaseException:
            parent_conn.close()
            raise
        finally:
            child_conn.close()  # the child has its own copy
        with self._changed:
            self._conn, self._process, self._pid = parent_conn, process, process.pid

    def run(self, request: RunRequest) -> RunOutcome:
        """Send one run and collect its events until it ends, fails, or the worker is lost."""
        outcome = RunOutcome(request)
        refused = self._send(request)
        if refused is not None:
            outcome.failure = refused
            return outcome
        try:
            while True:
                event = self._next_event(self.timeouts.token_s, run_id=request.run_id)
                if isinstance(event, TokenBatch):  # a run that is not live: its tokens, one by one as if streamed
                    for token in event.tokens:
                        self._on_event(token)
                        outcome.tokens.append(token)
                    continue
                self._on_event(event)
                if isinstance(event, Token):
                    outcome.tokens.append(event)
                elif isinstance(event, RunDone):
                    outcome.done = event
                    return outcome
                elif isinstance(event, (Failed, WorkerLost)):
                    outcome.failure = event
                    return outcome
                elif isinstance(event, RunStarted):
                    outcome.started_ns = event.t_ns
                elif isinstance(event, ProfileCaptured):
                    outcome.profile = event.capture
        finally:
            self._leave()

    def score(self, request: ScoreRequest) -> ScoreOutcome:
        """Perplexity windows through the engine's own forward pass (see scoring.score_window)."""
        outcome = ScoreOutcome(request)
        final = self._exchange(request, self.timeouts.score_s, (ScoreDone,))
        if isinstance(final, ScoreDone):
            outcome.done = final
        else:
            outcome.failure = final
        return outcome

    def run_load(self, request: LoadRequest) -> LoadOutcome:
        """Several streams at once (a server engine). Its LoadProgress events say the worker lives, not
        that the server answers: the token clock runs from the round's last new token, so a round whose
        every stream went silent ends after --timeout, as a single run does."""
        latest = [0, time.monotonic()]  # tokens so far, when that count last grew

        def silent_s(event: object) -> float:
            if isinstance(event, LoadProgress) and event.tokens != latest[0]:
                latest[:] = [event.tokens, time.monotonic()]
            return time.monotonic() - latest[1]

        final = self._exchange(request, self.timeouts.token_s, (LoadDone,), silent_s)
        return LoadOutcome(request, final) if isinstance(final, LoadDone) else LoadOutcome(request, failure=final)

    def top_logits(self, request: LogitsRequest) -> TopLogits | Failed | WorkerLost:
        """The engine's k best next tokens after `request.prefix_ids` (teacher-forced)."""
        return self._exchange(request, self.timeouts.token_s, (TopLogits,))

    def _exchange(
        self, request, timeout_s: float, answers: tuple[type, ...], silent_s: Callable[[object], float] | None = None
    ):
        """Send one request; pass events on until one of `answers`, a failure, or a lost worker (or,
        with `silent_s`, until the events it reads have shown no progress for `timeout_s`)."""
        refused = self._send(request)
        if refused is not None:
            return refused
        try:
            while True:
                event = self._next_event(timeout_s, run_id=request.run_id)
                self._on_event(event)
                if isinstance(event, answers + (Failed, WorkerLost)):
                    return event
                if silent_s is not None and silent_s(event) > timeout_s:
                    return self._lose(
                        RunStatus.TIMEOUT, f"no token from any stream for {timeout_s:g} s", request.run_id
                    )
        finally:
            self._leave()

    def _send(self, request) -> WorkerLost | None:
        """Make this thread the pipe's reader for `request` and send it; why not, when it cannot be."""
        with self._changed:
            if self._state is not WorkerState.READY or self._closing:
                return self.lost or WorkerLost(RunStatus.CRASHED, "the worker is not running", request.run_id)
            self._enter(WorkerState.RUNNING)
        self._cancel.clear()
        self._cancel_requested_at = None
        try:
            self._conn.send(request)
        except (OSError, EOFError) as exc:
            return self._lose(RunStatus.CRASHED, f"could not send the request: {exc}", request.run_id)
        return None

    def cancel(self) -> None:
        """Ask the current run to stop after its current token (safe from any thread)."""
        self._cancel.set()
        self._cancel_requested_at = time.monotonic()

    def close(self, grace_s: float = CLOSE_GRACE_S) -> None:
        """End the worker, whatever its state, and release its pipe and Process (safe from any thread).

        Never spawned: it never will be. Idle: Shutdown, then join for `grace_s`, terminate, kill.
        Loading or running: the reading thread ends it (a lost worker, killed) at its next poll, or as
        its read ends, and this waits until it has. Closed already: nothing."""
        with self._changed:
            self._closing, self._close_grace_s = True, grace_s
            if self._reader == threading.get_ident():
                return  # from an event sink of the read: the read ends the worker once the sink returns
            settled = self._changed.wait_for(
                lambda: self._state not in (*_READING, WorkerState.CLOSING),
                POLL_S + grace_s + TERMINATE_GRACE_S + KILL_WAIT_S + 1.0,
            )
            if not settled:  # the reading thread is held up (in an event sink): end the child under it
                if self._state in _READING and self._process is not None:
                    self._process.kill()  # its pipe then ends; the reader releases it
                return
            if self._state is not WorkerState.READY:  # NEW or CLOSED
                self._state = WorkerState.CLOSED
                return
            self._state = WorkerState.CLOSING  # this thread owns the pipe now
        self._shut_down(grace_s)

    @property
    def state(self) -> WorkerState:
        return self._state

    @property
    def pid(self) -> int | None:
        """The child's pid once spawned (kept after it ended, for messages)."""
        return self._pid

    @property
    def alive(self) -> bool:
        with self._changed:
            return self._process is not None and self._process.is_alive()

    # --- internals -------------------------------------------------------------------------
    def _enter(self, state: WorkerState) -> None:
        """(Holding the lock.) This thread reads the pipe from now on, in `state`."""
        self._state, self._reader = state, threading.get_ident()
        self._changed.notify_all()

    def _leave(self) -> None:
        """The read is over: back to READY, unless it ended the worker (lost), or `close` came during it."""
        with self._changed:
            reading = self._state in _READING
            closing = reading and self._closing
            if reading:
                self._state = WorkerState.CLOSING if closing else WorkerState.READY
            self._reader = None
            self._changed.notify_all()
        if closing:
            self._shut_down(self._close_grace_s)

    def _shut_down(self, grace_s: float) -> None:
        """(The pipe's owner, CLOSING.) Ask the idle child to close its engine and exit, then end it."""
        try:
            self._conn.send(Shutdown())
        except (OSError, EOFError, ValueError):
            pass  # it died while idle: `_end` finds it gone
        self._end(grace_s)

    def _next_event(self, timeout_s: float, run_id: str | None) -> object:
        deadline = time.monotonic() + timeout_s
        while True:
            now = time.monotonic()
            wait = min(deadline - now, POLL_S)
            if self._closing:
                return self._lose(RunStatus.KILLED, f"closed while {self._state.value}", run_id)
            if self._cancel_requested_at is not None and self._state is WorkerState.LOADING:
                # a load keeps nothing worth its grace: most runtimes cannot be told to stop one
                return self._lose(RunStatus.CANCELLED, "cancelled while loading", run_id)
            if self._cancel_requested_at is not None and now - self._cancel_requested_at > self.timeouts.cancel_grace_s:
                return self._lose(RunStatus.KILLED, "did not stop within the cancel grace period", run_id)
            if wait <= 0:
                return self._lose(RunStatus.TIMEOUT, f"no answer for {timeout_s:g} s", run_id)
            try:
                if self._conn.poll(wait):
                    event = self._conn.recv()
                    if isinstance(event, Progress):
                        deadline = time.monotonic() + timeout_s  # progress proves life
                    return event
            except (EOFError, OSError):
                self._process.join(1.0)
                return self._lose(RunStatus.CRASHED, f"worker process {describe_exit(self._process.exitcode)}", run_id)
            if not self._process.is_alive() and not self._conn.poll(0):
                return self._lose(RunStatus.CRASHED, f"worker process {describe_exit(self._process.exitcode)}", run_id)

    def _lose(self, reason: RunStatus, detail: str, run_id: str | None) -> WorkerLost:
        self.lost = WorkerLost(reason, detail, run_id)
        self._end(0.0)
        return self.lost

    def _end(self, grace_s: float) -> None:
        """(The pipe's owner only.) End the child, escalating: join for `grace_s`, SIGTERM, SIGKILL; then
        close the pipe and the Process (its sentinel pipe), and say CLOSED to anyone waiting in `close`."""
        process, conn = self._process, self._conn
        if process is not None:
            process.join(grace_s)
            if process.exitcode is None:
                process.terminate()
                process.join(TERMINATE_GRACE_S)
            if process.exitcode is None:
                process.kill()
                process.join(KILL_WAIT_S)
        with self._changed:
            self._conn = self._process = None
            self._state, self._reader = WorkerState.CLOSED, None
            self._changed.notify_all()
        if conn is not None:
            conn.close()
        if process is not None and process.exitcode is not None:
            process.close()  # (one SIGKILL did not end within KILL_WAIT_S: Process.close refuses a live one)
