"""The engine workers behind the server: one `Worker` (one engine in a spawned process) per slot.

Each slot is a thread that owns its worker and serves one request at a time from the shared
queue, so N slots give N concurrent streams at N times the memory. Workers load one at a time
(a load never competes with another). A worker that crashes or hangs (`WorkerLost`) fails the
request it was serving with a 500 and is started again after a backoff (0.5 s, doubling to
30 s while it keeps failing); meanwhile the slot says why, and `/health` answers 503 while no
slot serves. If the very first load fails, nothing can be served: the server stops (`on_fatal`).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from ..engine import EngineOptions
from ..errors import one_line
from ..registry import EngineSpec
from ..sources.model_files import ModelFiles
from ..worker.events import Failed, PromptLogprobs, RunRequest, RunStarted, Token, WorkerLost
from ..worker.process import Worker, WorkerError
from ..worker.timeouts import Timeouts
from .jobs import Job, JobEnd
from .metrics import ServeMetrics
from .scheduler import QueueClosed, QueueFull, Scheduler

OWN_LOOP_REFUSAL = "generates in its own loop: its logits, and so logprobs and best_of > n, are not available"
BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
_TAKE_S = 0.25  # how often an idle slot looks at the stop flag
CLOSE_GRACE_S = 5.0


class SlotState(Enum):
    LOADING = "loading"
    SERVING = "serving"
    RESTARTING = "restarting"
    STOPPED = "stopped"


@dataclass(frozen=True)
class SlotStatus:
    index: int
    state: SlotState
    reason: str = ""
    pid: int | None = None
    busy: bool = False


class Busy(Exception):
    """A request the pool cannot take now (503): `reason` for the client, `retry_after_s` for it."""

    def __init__(self, reason: str, retry_after_s: int, kind: str) -> None:
        super().__init__(reason)
        self.reason, self.retry_after_s, self.kind = reason, retry_after_s, kind


class Pool:
    def __init__(
        self,
        spec: EngineSpec,
        model: ModelFiles,
        options: EngineOptions,
        workers: int,
        queue: int,
        metrics: ServeMetrics,
        timeouts: Timeouts = Timeouts(),
        on_fatal: Callable[[str], None] = lambda message: None,
        say: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.spec, self.model, self.options, self.timeouts = spec, model, options, timeouts
        self.metrics = metrics
        self.scheduler = Scheduler(queue)
        self.on_fatal, self.say = on_fatal, say
        self.fatal = ""  # why the server could not serve at all
        self.stopping = False  # shutting down: nothing new is taken
        self._stop = threading.Event()  # the slots end
        self._load_lock = threading.Lock()
        self._served_once = False
        self._service_s = 0.0  # a running mean of a request's time on a worker (Retry-After)
        self.slots = [_Slot(i, self) for i in range(workers)]

    def start(self) -> None:
        for slot in self.slots:
            slot.thread.start()

    # --- the HTTP side ---------------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        """Queue `job`, or raise Busy (queue full, shutting down, nothing can load)."""
        if self.stopping or self.fatal:
            self.metrics.rejected("stopping")
            raise Busy("the server is shutting down", 5, "stopping")
        try:
            job.on_cancel(lambda: self._leave(job))
            self.scheduler.submit(job)
        except QueueClosed:
            self.metrics.rejected("stopping")
            raise Busy("the server is shutting down", 5, "stopping") from None
        except QueueFull:
            self.metrics.rejected("queue_full")
            raise Busy(
                f"the queue is full ({self.scheduler.limit} waiting)", self.retry_after_s(), "queue_full"
            ) from None

    def _leave(self, job: Job) -> None:
        if self.scheduler.remove(job):
            job.finish(JobEnd("abort"))

    def retry_after_s(self) -> int:
        """Seconds until a place in the queue is likely free: the waiting work over the workers."""
        per_request = self._service_s or 1.0
        return max(1, math.ceil(per_request * (self.scheduler.waiting + 1) / len(self.slots)))

    @property
    def running(self) -> int:
        return sum(1 for slot in self.slots if slot.job is not None)

    @property
    def own_loop(self) -> bool:
        """A loaded worker's engine generates in its own loop: its tokens come without logits."""
        return any(
            slot.worker is not None and slot.worker.ready is not None and slot.worker.ready.own_loop
            for slot in self.slots
        )

    @property
    def serving(self) -> int:
        return sum(1 for slot in self.slots if slot.state is SlotState.SERVING)

    def statuses(self) -> list[SlotStatus]:
        return [slot.status() for slot in self.slots]

    # --- shutting down ---------------------------------------------------------------------------
    def begin_shutdown(self) -> None:
        """SIGTERM or Ctrl+C: take nothing new; what runs or waits goes on until `close`."""
        self.stopping = True

    def close(self, grace_s: float = CLOSE_GRACE_S) -> None:
        """Refuse what still waits, end a load under way at once, stop what runs (after its current
        token), close every worker."""
        self.stopping = True
        for job in self.scheduler.close():
            job.finish(JobEnd("abort", 503, "the server shut down before this request ran"))
        self._stop.set()
        for slot in self.slots:
            slot.end_load()
            running = slot.job
            if running is not None:
                running.cancel()
        deadline = time.monotonic() + grace_s + self.timeouts.cancel_grace_s
        for slot in self.slots:
            slot.thread.join(max(0.0, deadline - time.monotonic()))
        for slot in self.slots:
            slot.close_worker(0.0)  # a slot that did not end in time: its worker is killed

    # --- the slots' side -------------------------------------------------------------------------
    def _served(self, seconds: float) -> None:
        self._served_once = True
        self._service_s = seconds if not self._service_s else 0.8 * self._service_s + 0.2 * seconds


def restart_delay(failures: int) -> float:
    """The wait before a worker starts again after `failures` losses in a row: 0.5 s, doubling up to 30 s,
    so a worker that dies at once does not take the cores from the one request that could be served."""
    return min(MAX_BACKOFF_S, BACKOFF_S * 2 ** (failures - 1)) if failures > 0 else 0.0


class _Slot:
    def __init__(self, index: int, pool: Pool) -> None:
        self.index, self.pool = index, pool
        self.worker: Worker | None = None
        self.job: Job | None = None
        self.state = SlotState.LOADING
        self.reason = ""
        self.failures = 0  # consecutive losses: the backoff grows with them
        self.loaded_once = False
        self._starting: Worker | None = None  # a worker still loading (a shutdown kills it too)
        self._worker_lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name=f"serve-worker-{index}", daemon=True)

    def status(self) -> SlotStatus:
        worker = self.worker
        return SlotStatus(self.index, self.state, self.reason, worker.pid if worker else None, self.job is not None)

    def _run(self) -> None:
        pool = self.pool
        try:
            while not pool._stop.is_set():
                try:
                    if self.worker is None and not self._start():
                        continue
                    job = pool.scheduler.take(_TAKE_S)
                    if job is not None:
                        self._serve(job)
                except Exception as exc:  # noqa: BLE001 - a bug here must not leave the server unable to serve
                    self._broken(exc)
        finally:
            self.state = SlotState.STOPPED
            self.close_worker(CLOSE_GRACE_S)

    def _start(self) -> bool:
        """Start (or restart) this slot's worker; False if it is not serving yet."""
        pool = self.pool
        if self.failures:
            delay = restart_delay(self.failures)
            self.reason = f"{self.reason.split('; restarting')[0]}; restarting in {delay:g} s"
            if pool._stop.wait(delay):
                return False
        with pool._load_lock:  # one load at a time
            if pool._stop.is_set():
                return False
            worker = Worker(pool.spec, pool.model, pool.options, on_event=self._on_event, timeouts=pool.timeouts)
            with self._worker_lock:
                self._starting = worker
            try:
                worker.start()
            except WorkerError as exc:  # it failed to load, or a shutdown closed it: closed either way
                with self._worker_lock:
                    self._starting = None
                if pool._stop.is_set():
                    return False  # closed by a shutdown while loading
                message = str(exc)
                if not self.loaded_once and not pool._served_once and not any(s.loaded_once for s in pool.slots):
                    pool.fatal = f"{pool.spec.name} could not load: {message}"
                    self.state, self.reason = SlotState.STOPPED, pool.fatal
                    pool._stop.set()
                    pool.on_fatal(pool.fatal)
                    return False
                self.failures += 1
                self.state, self.reason = SlotState.RESTARTING, f"the engine could not load again: {message}"
                pool.say(f"worker {self.index + 1}: {self.reason}")
                return False
            with self._worker_lock:
                self.worker, self._starting = worker, None
        if self.loaded_once:
            pool.metrics.restarted()
        ready = worker.ready
        pool.say(
            f"worker {self.index + 1} {'restarted' if self.loaded_once else 'ready'}: {pool.spec.name} "
            f"(pid {worker.pid}, {ready.device}, {ready.threads} thread(s), cold start "
            f"{(ready.t_ns - worker.spawn_ns) / 1e9:.2f} s)"
        )
        self.loaded_once = True
        self.state, self.reason = SlotState.SERVING, ""
        return True

    def _serve(self, job: Job) -> None:
        worker = self.worker
        if not job.on_cancel(worker.cancel):
            job.finish()  # its client left between the queue and here
            return
        if job.request.logprobs is not None and worker.ready is not None and worker.ready.own_loop:
            # asked before any worker had loaded (the app refuses it at once after): its tokens come without logits
            job.finish(JobEnd("error", 400, f"{self.pool.spec.name} {OWN_LOOP_REFUSAL}"))
            return
        self.job = job
        job.started_ns = time.perf_counter_ns()
        request = job.request
        outcome = worker.run(
            RunRequest(
                job.id,
                request.prompt_ids,
                request.max_tokens,
                request.sampling,
                live=True,
                logprobs=request.logprobs,
                prompt_logprobs=request.prompt_logprobs,
            )
        )
        failure = outcome.failure
        if isinstance(failure, WorkerLost):
            self.failures += 1
            self.state = SlotState.RESTARTING
            self.reason = f"worker {failure.reason.value}: {failure.detail}"
            self.pool.say(f"worker {self.index + 1} lost ({self.reason}): its request failed; restarting")
            self.close_worker(0.0)
            end = JobEnd(
                "error",
                500,
                f"the engine's worker was lost ({failure.reason.value}: {failure.detail}); it is being restarted",
            )
        elif isinstance(failure, Failed):
            end = JobEnd("error", 500, f"the engine failed: {failure.message}")
        else:
            self.failures = 0
            end = job.outcome()
        ended = time.perf_counter_ns()
        # counted before the client hears of it: /metrics read after a response includes that response
        self.pool.metrics.finished(
            end.finish_reason,
            (job.started_ns - job.arrived_ns) / 1e9,
            (ended - job.arrived_ns) / 1e9,
            len(request.prompt_ids),
            len(job.token_ids),
        )
        self.pool._served((ended - job.started_ns) / 1e9)
        self.job = None
        job.finish(end)

    def _broken(self, exc: Exception) -> None:
        """An unexpected error in this slot: its request (if any) fails, its worker starts afresh."""
        job, self.job = self.job, None
        if job is not None:
            job.finish(JobEnd("error", 500, f"internal error: {one_line(exc)}"))
        self.close_worker(0.0)
        self.failures += 1
        self.state, self.reason = SlotState.RESTARTING, f"internal error: {one_line(exc)}"
        self.pool.say(f"worker {self.index + 1}: {self.reason}; restarting")

    def _on_event(self, event: object) -> None:
        """The worker's events while it serves `self.job` (on this slot's thread)."""
        job = self.job
        if job is None:
            return
        if isinstance(event, Token):
            count = len(job.token_ns)
            if job.push(event):
                self.worker.cancel()  # end-of-text: the rest of this run is not wanted
            elif len(job.token_ns) > count:  # kept (not one after end-of-text)
                if count == 0:
                    self.pool.metrics.first_token((event.t_ns - job.arrived_ns) / 1e9)
                else:
                    self.pool.metrics.gap((event.t_ns - job.token_ns[-2]) / 1e9)
        elif isinstance(event, PromptLogprobs):
            job.prompt_logprobs = event
        elif isinstance(event, RunStarted) and job.cancelled:
            self.worker.cancel()  # cancelled while the run was being sent: `run` had cleared the flag

    def end_load(self) -> None:
        """A shutdown: a load under way is not wanted. Its worker is closed now (killed mid-load; the
        slot's thread sees its start fail), not after the grace that requests in flight get."""
        with self._worker_lock:
            loading = self._starting
        if loading is not None:
            loading.close(0.0)

    def close_worker(self, grace_s: float) -> None:
        with self._worker_lock:
            workers = [w for w in (self.worker, self._starting) if w is not None]
            self.worker = None
        for worker in workers:
            worker.close(grace_s)
