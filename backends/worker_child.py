"""The child side of a worker: import and load one engine, then serve run requests.

This module is what a spawned process imports first, so it must stay light: no torch here.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback

from .engine import EngineOptions
from .events import Failed, Progress, Ready, RunDone, RunRequest, RunStarted, Shutdown, Started, Token
from .models import ModelFiles
from .registry import EngineSpec
from .sampling import Sampler
from .tokenizer import IncrementalDetokenizer

_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


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
    for variable in _THREAD_VARIABLES:  # before any numeric library is imported
        os.environ[variable] = str(options.threads)
    from . import registry

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


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
