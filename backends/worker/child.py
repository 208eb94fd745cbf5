"""The child side of a worker: import and load one engine, then serve run requests.

This module is what a spawned process imports first, so it must stay light: no torch here.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ..engine import Engine, EngineOptions, ServerEngine, token_time
from ..errors import one_line
from ..registry import EngineSpec
from ..sampling import Sampler
from ..sources.model_files import ModelFiles
from ..sources.tokenizer import IncrementalDetokenizer
from .events import (
    BATCH_S,
    Failed,
    LoadRequest,
    LogitsRequest,
    ProfileCaptured,
    Progress,
    Ready,
    RunDone,
    RunRequest,
    RunStarted,
    ScoreDone,
    ScoreProgress,
    ScoreRequest,
    Shutdown,
    Started,
    Token,
    TokenBatch,
)
from .usage import cpu_seconds, peak_rss_mb, reset_peak_rss

if TYPE_CHECKING:
    from ..profilers.capture import EngineProfiler, ProfileCapture

# What only some requests need (load levels, scoring, profiling) is imported when one comes: every
# import here is paid before Ready, in each engine's cold start.


def child_main(conn, cancel: threading.Event, spec: EngineSpec, model: ModelFiles, options: EngineOptions) -> None:
    conn.send(Started(time.perf_counter_ns()))
    _exit_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C reaches the parent, which cancels cleanly
    from .. import registry  # (thread variables were set by the parent before spawning)

    try:
        started = time.perf_counter()
        engine = registry.create_from_spec(spec, replace(options, owns_process=True))
        imported = time.perf_counter()

        def progress(message: str, fraction: float | None = None) -> None:
            conn.send(Progress(message, fraction))

        info = engine.load(model, progress)
        loaded = time.perf_counter()
    except BaseException as exc:  # report anything, even SystemExit from a broken engine
        conn.send(Failed(one_line(exc), traceback.format_exc()))
        return
    load_peak = peak_rss_mb()  # before anything else: the peak of import + load, transients included
    # Load the detokenizer's tables now, outside any timed span: it serves the text view only.
    IncrementalDetokenizer().push(0)
    notes = info.notes
    if not reset_peak_rss():
        notes = "; ".join(n for n in (notes, "peak_rss_mb includes load (this OS cannot reset the peak)") if n)
    build_s = max(0.0, float(info.build_s or 0.0))
    conn.send(
        Ready(
            imported - started,
            max(0.0, loaded - imported - build_s),
            time.perf_counter_ns(),
            info.device,
            info.dtype,
            options.threads,
            info.weight_bytes_per_token,
            notes,
            kv_bytes_per_position=info.kv_bytes_per_position,
            build_s=build_s,
            artifact_cache=info.artifact_cache,
            samples_natively=info.samples_natively,
            serves_concurrently=engine.capabilities.serves_concurrently,
            multi_token_steps=info.multi_token_steps,
            load_peak_rss_mb=load_peak,
            prefill_arithmetic=info.prefill_arithmetic,
            isa=info.isa,
            own_loop=engine.capabilities.own_loop,
        )
    )
    while True:
        message = conn.recv()
        if isinstance(message, Shutdown):
            engine.close()
            return
        if isinstance(message, RunRequest):
            _serve_run(conn, cancel, engine, message)
        elif isinstance(message, ScoreRequest):
            _serve_score(conn, cancel, engine, message)
        elif isinstance(message, LogitsRequest):
            _serve_logits(conn, engine, message)
        elif isinstance(message, LoadRequest):
            from .load_runner import serve_load

            serve_load(conn, cancel, engine, message, int(model.config.get("vocab_size", 50257)))


def _exit_with_parent() -> None:
    """End this worker when its parent is gone without saying Shutdown (killed): an engine hung in its
    native code would otherwise hold its cores and memory for good. The parent's sentinel says so on
    every platform (a blocked thread: no cost to what is measured)."""
    import multiprocessing.connection  # here: loaded already with this worker's pipe, not by an import of this module

    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _serve_run(conn, cancel: threading.Event, engine: Engine, request: RunRequest) -> None:
    sampler = Sampler(request.sampling)
    engine.run_notes, engine.speculation = "", None  # this run's own notes and counts only
    detokenizer = IncrementalDetokenizer(request.prompt_ids)
    drives = not engine.capabilities.own_loop
    profiler, problem = _profiler(engine, drives) if request.profile_trace else (None, "")
    # a server's own histograms, read before the clock starts
    server_before = engine.server_metrics() if isinstance(engine, ServerEngine) else None
    reset_peak_rss()  # each record's peak is its own run's: an earlier, longer run's is not carried on
    if request.prompt_logprobs:  # echo's scores: before the clock, and before the run's own prefill
        from .scoring import prompt_logprobs

        try:
            conn.send(prompt_logprobs(engine, request.run_id, request.prompt_ids, request.logprobs or 0))
        except Exception as exc:
            conn.send(Failed(one_line(exc), traceback.format_exc(), request.run_id))
            return
    cpu_start = cpu_seconds()
    outbox = _Outbox(conn, request)
    # After the profiler and the sender thread started: their set-up is in no timed span, and
    # RunStarted goes from the sender thread, so its send is not either (TTFT counts from `start`).
    start = time.perf_counter_ns()
    outbox.announce(RunStarted(request.run_id, start))
    stamps: list[int] = []
    steps: list[int | None] = []  # the engine's step of each token (a server's event): the cross-check's gaps
    try:
        tokens = (
            _drive(engine, request, sampler, detokenizer, cancel, start, profiler)
            if drives
            else _relay(engine, request, sampler, detokenizer, cancel, start)
        )
        for token in tokens:
            outbox.send(token)
            stamps.append(token.t_ns)
            steps.append(token.step)
    except Exception as exc:
        outbox.close()
        conn.send(Failed(one_line(exc), traceback.format_exc(), request.run_id))
        return
    outbox.close()
    end = time.perf_counter_ns()
    cpu_s = cpu_seconds() - cpu_start
    if request.profile_trace:
        conn.send(ProfileCaptured(request.run_id, _capture(profiler, problem, request.profile_trace)))
    count = len(stamps)
    cancelled = cancel.is_set() and count < request.new_tokens
    from .load_runner import server_cross_check

    notes = "; ".join(
        n for n in (engine.run_notes, server_cross_check(engine, server_before, [(start, stamps, steps)])) if n
    )
    conn.send(RunDone(request.run_id, end, count, peak_rss_mb(), cancelled, notes, cpu_s, engine.speculation))


class _Outbox:
    """Sends a run's events from the child. Its thread starts before the run's clock, and it, not the
    engine's thread, sends the run's RunStarted (`announce`): the send is outside the timed span
    the RunStarted's stamp starts. A live run's RunStarted goes at once (beside the first step; the
    window draws the run as it goes) and its tokens each at once from the engine's thread; otherwise
    the thread sends RunStarted and what has piled up every BATCH_S, so nothing wakes the parent or
    competes with the engine between ticks (and a run that hangs or fails still delivers the tokens
    made before). RunStarted always goes before the first token. `close` sends the rest; call it
    before RunDone."""

    def __init__(self, conn, request: RunRequest) -> None:
        self.conn, self.run_id, self.live = conn, request.run_id, request.live
        self.first: RunStarted | None = None  # announced, not sent yet
        self.pending: list[Token] = []
        self.lock = threading.Lock()  # `first` and `pending`
        self.sending = threading.Lock()  # one send at a time, in order
        self.wake = threading.Event()
        self.closed = False
        self.sender = threading.Thread(target=self._serve, name="run-events", daemon=True)
        self.sender.start()

    def announce(self, started: RunStarted) -> None:
        with self.lock:
            self.first = started
        if self.live:  # the window draws a live run as it goes: "prefill…" now
            self.wake.set()

    def send(self, token: Token) -> None:
        if self.live:
            with self.sending:
                self._send_first()
                self.conn.send(token)
            return
        with self.lock:
            self.pending.append(token)

    def _serve(self) -> None:
        while True:
            self.wake.wait(None if self.live else BATCH_S)  # a live run's tokens go from the engine's thread
            self.wake.clear()
            if self.closed:
                return
            with self.sending:
                self._send_first()
                self._flush()

    def _send_first(self) -> None:
        with self.lock:
            first, self.first = self.first, None
        if first is not None:
            self.conn.send(first)

    def _flush(self) -> None:
        with self.lock:
            batch, self.pending = self.pending, []
        if batch:
            self.conn.send(TokenBatch(self.run_id, tuple(batch)))

    def close(self) -> None:
        self.closed = True
        self.wake.set()
        self.sender.join()
        with self.sending:
            self._send_first()
            self._flush()


# Both loops below yield each Token for `_serve_run` to send, and are resumed only after the send,
# so the send of token i-1 falls in the gap before token i's stamp (see events.Token). Each stamp
# is taken once the token id is a Python int, i.e. on the CPU.


def _profiler(engine: Engine, drives: bool) -> tuple[EngineProfiler | None, str]:
    """The engine's profiler for a profiled run, or None and why not."""
    if not drives:
        return None, "the engine generates in its own loop: no per-step profile (total and harness only)"
    try:
        profiler = engine.profiler()
        if profiler is not None:
            profiler.start()
    except Exception as exc:  # a profiler that cannot start leaves the run itself intact
        return None, f"its profiler could not start: {one_line(exc)}"
    return profiler, "" if profiler is not None else "no profiler for this engine (total and harness only)"


def _capture(profiler: EngineProfiler | None, problem: str, trace_path: str) -> ProfileCapture:
    from ..profilers.capture import ProfileCapture

    if profiler is None:
        return ProfileCapture("none", note=problem)
    try:
        return profiler.finish(trace_path)
    except Exception as exc:
        return ProfileCapture(profiler.name, note=f"the profiler failed: {one_line(exc)}")


def _drive(
    engine: Engine,
    request: RunRequest,
    sampler: Sampler,
    detokenizer: IncrementalDetokenizer,
    cancel: threading.Event,
    start: int,
    profiler: EngineProfiler | None = None,
) -> Iterator[Token]:
    """What `Engine.stream` does (same calls, same sampler: the same tokens), with the engine's
    prefill/decode calls timed apart from the harness's work around them (and, in a profiled
    run, each call inside the profiler's step)."""
    previous = start  # the stamp the next gap starts from
    token = 0  # (decode is called from the second token on, with the token sampled before)
    for index in range(request.new_tokens):
        called = time.perf_counter_ns()
        if profiler is None:
            logits = engine.prefill(request.prompt_ids) if index == 0 else engine.decode(token)
        else:
            with profiler.step("prefill" if index == 0 else "decode"):
                logits = engine.prefill(request.prompt_ids) if index == 0 else engine.decode(token)
        returned = time.perf_counter_ns()
        token = sampler(logits)
        stamp = time.perf_counter_ns()
        # harness = the gap minus the engine call: (previous stamp -> call) + (return -> stamp)
        harness = (called - previous) + (stamp - returned)
        logprob: float | None = None
        top: tuple[tuple[int, float], ...] = ()
        if request.logprobs is not None:  # serve's logprobs: after the stamp, counted in the next gap
            from .scoring import token_logprobs

            logprob, top = token_logprobs(logits, int(token), request.logprobs)
        yield Token(
            request.run_id,
            index,
            int(token),
            detokenizer.push(token),
            stamp,
            returned - called,
            harness,
            logprob=logprob,
            top_logprobs=top,
        )
        previous = stamp
        if cancel.is_set():
            return


def _relay(
    engine: Engine,
    request: RunRequest,
    sampler: Sampler,
    detokenizer: IncrementalDetokenizer,
    cancel: threading.Event,
    start: int,
) -> Iterator[Token]:
    """An engine with its own `stream` (a server, a native generator): only the time spent outside
    its generator is the harness's; its engine time is not separable (engine_ns None). A token the
    engine stamped where its runtime's thread made it (StampedToken) takes that time, not the time
    this thread got it: the wait for a core is the harness's, never the engine's."""
    outside = start  # when the child last got control back from the generator
    previous = start  # the previous token's time
    tokens = engine.stream(request.prompt_ids, request.new_tokens, sampler, cancel)
    index = 0
    while True:
        resumed = time.perf_counter_ns()  # control goes back to the engine's generator
        try:
            item = next(tokens)
        except StopIteration:
            return
        received = time.perf_counter_ns()
        token, (stamp, step) = int(item), token_time(item, previous, received)
        harness = resumed - outside
        yield Token(request.run_id, index, token, detokenizer.push(token), stamp, None, harness, step)
        outside, previous = received, stamp
        index += 1


def _serve_score(conn, cancel: threading.Event, engine, request: ScoreRequest) -> None:
    """Summed NLL of the target tokens of every window, through this engine's own forward pass."""
    from .scoring import score_window

    started = time.perf_counter()
    nll, count, method = 0.0, 0, "forward_logits"
    total = len(request.windows)
    try:
        for done, (window, target) in enumerate(zip(request.windows, request.targets)):
            if cancel.is_set():
                conn.send(ScoreDone(request.run_id, nll, count, time.perf_counter() - started, method, True))
                return
            window_nll, window_count, method = score_window(engine, window, target)
            nll += window_nll
            count += window_count
            conn.send(ScoreProgress(request.run_id, done + 1, total))
    except NotImplementedError:  # neither a forward pass nor a prefill: its logits stay inside its loop
        conn.send(Failed(f"not available: {engine.name} gives no logits outside its own loop", "", request.run_id))
        return
    except Exception as exc:
        conn.send(Failed(one_line(exc), traceback.format_exc(), request.run_id))
        return
    conn.send(ScoreDone(request.run_id, nll, count, time.perf_counter() - started, method))


def _serve_logits(conn, engine, request: LogitsRequest) -> None:
    from .scoring import top_logits

    try:
        conn.send(top_logits(request.run_id, _logits_after(engine, list(request.prefix_ids)), request.k))
    except NotImplementedError:  # neither a prefill nor a scoring pass: its logits stay inside its loop
        conn.send(Failed(f"not available: {engine.name} gives no logits outside its own loop", "", request.run_id))
    except Exception as exc:
        conn.send(Failed(one_line(exc), traceback.format_exc(), request.run_id))


def _logits_after(engine, prefix_ids: list[int]) -> np.ndarray:
    """The logits for the token after `prefix_ids`: its prefill's, or, for an engine that keeps its
    cache inside its own loop (CTranslate2, the GenAI runtimes), the last row of its scoring pass."""
    try:
        return np.asarray(engine.prefill(prefix_ids))
    except NotImplementedError:
        return np.asarray(engine.forward_logits(prefix_ids))[-1]
