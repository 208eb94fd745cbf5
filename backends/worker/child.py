"""The child side of a worker: import and load one engine, then serve run requests.

This module is what a spawned process imports first, so it must stay light: no torch here.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
import traceback

import numpy as np

from ..engine import EngineOptions
from .events import (Failed, LogitsRequest, Progress, Ready, RunDone, RunRequest, RunStarted, ScoreDone,
                     ScoreProgress, ScoreRequest, Shutdown, Started, Token)
from ..sources.model_files import ModelFiles
from ..registry import EngineSpec
from ..sampling import Sampler
from ..sources.tokenizer import IncrementalDetokenizer
from .scoring import score_window, top_logits


def peak_rss_mb() -> float:
    """The process's peak resident set size so far (what the OS accounted, not a sample)."""
    try:
        import resource

        peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak_kb / 1024 if sys.platform != "darwin" else peak_kb / 2**20
    except ImportError:  # Windows
        import psutil

        info = psutil.Process().memory_info()
        return getattr(info, "peak_wset", info.rss) / 2**20


def child_main(conn, cancel: threading.Event, spec: EngineSpec, model: ModelFiles, options: EngineOptions) -> None:
    conn.send(Started(time.monotonic_ns()))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C reaches the parent, which cancels cleanly
    from .. import registry  # (thread variables were set by the parent before spawning)

    try:
        started = time.perf_counter()
        engine = registry.create_from_spec(spec, options)
        imported = time.perf_counter()
        info = engine.load(model, lambda message, fraction=None: conn.send(Progress(message, fraction)))
        loaded = time.perf_counter()
    except BaseException as exc:  # report anything, even SystemExit from a broken engine
        conn.send(Failed(_one_line(exc), traceback.format_exc()))
        return
    conn.send(Ready(imported - started, loaded - imported, time.monotonic_ns(), info.device, info.dtype,
                    options.threads, info.weight_bytes_per_token, info.notes))
    # Load the detokenizer's tables now, outside any timed span: it serves the text view only.
    IncrementalDetokenizer().push(0)
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


def _serve_run(conn, cancel: threading.Event, engine, request: RunRequest) -> None:
    sampler = Sampler(request.sampling)
    engine.run_notes = ""
    detokenizer = IncrementalDetokenizer(request.prompt_ids)
    count = 0
    start = time.monotonic_ns()
    conn.send(RunStarted(request.run_id, start))
    try:
        for index, token in enumerate(engine.stream(request.prompt_ids, request.new_tokens, sampler, cancel)):
            stamp = time.monotonic_ns()  # the id is a Python int here: it is on the CPU
            conn.send(Token(request.run_id, index, int(token), detokenizer.push(token), stamp))
            count += 1
    except Exception as exc:
        conn.send(Failed(_one_line(exc), traceback.format_exc(), request.run_id))
        return
    end = time.monotonic_ns()
    cancelled = cancel.is_set() and count < request.new_tokens
    conn.send(RunDone(request.run_id, end, count, peak_rss_mb(), cancelled, engine.run_notes))


def _serve_score(conn, cancel: threading.Event, engine, request: ScoreRequest) -> None:
    """Summed NLL of the target tokens of every window, through this engine's own forward pass."""
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
    except Exception as exc:
        conn.send(Failed(_one_line(exc), traceback.format_exc(), request.run_id))
        return
    conn.send(ScoreDone(request.run_id, nll, count, time.perf_counter() - started, method))


def _serve_logits(conn, engine, request: LogitsRequest) -> None:
    try:
        conn.send(top_logits(request.run_id, np.asarray(engine.prefill(request.prefix_ids)), request.k))
    except Exception as exc:
        conn.send(Failed(_one_line(exc), traceback.format_exc(), request.run_id))


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
