"""The child side of a load run: several streams at once against a server engine.

Each stream runs `Engine.stream` on its own thread (the engine's client is thread-safe; the
server does the batching) and stamps each token with `perf_counter_ns` as it arrives, as a
single run does. Every stream gets a fresh random prefix of the same length, so no request is a
prefix-cache hit. An open-loop level (`request.arrivals_ms`) sends stream i at its arrival time
after the first, whether or not the earlier ones have finished (no cap on how many are in flight,
as vLLM's `bench serve` without --max-concurrency); its TTFT counts from that send. A failing
stream records its error and the others go on. The server's own
/metrics are read before the first request and after the last token, outside every timed span
(the engine is told the streams share the server, so it reads no per-run counters meanwhile).
"""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np

from ..engine import Engine, ServerEngine, token_time
from ..errors import one_line
from ..sampling import Sampler
from ..server_metrics import ServerMetrics, chunk_gaps_ms, cross_check_note, settled
from ..sources.prompts import unique_prefix
from .events import Failed, LoadDone, LoadProgress, LoadRequest, StreamResult

PROGRESS_EVERY_S = 0.5
METRICS_SETTLE_S = 1.0  # a server may record its histograms just after it sent the last token


class _Stream:
    def __init__(self, index: int) -> None:
        self.index = index
        self.started_ns = 0
        self.stamps: list[int] = []
        self.steps: list[int | None] = []
        self.error = ""
        self.ended_ns = 0

    def result(self) -> StreamResult:
        return StreamResult(
            self.index, self.started_ns, tuple(self.stamps), self.error, self.ended_ns, tuple(self.steps)
        )


def serve_load(conn, cancel: threading.Event, engine: Engine, request: LoadRequest, vocab_size: int) -> None:
    if not engine.capabilities.serves_concurrently:
        conn.send(Failed(f"{engine.name} serves one sequence at a time: it has no load runs", "", request.run_id))
        return
    arrivals_ns = [round(ms * 1e6) for ms in request.arrivals_ms] or [0] * request.concurrency
    streams = [_Stream(i) for i in range(len(arrivals_ns))]
    before = engine.server_metrics() if isinstance(engine, ServerEngine) else None
    go = threading.Event()
    origin = [0]  # the level's first send, set before `go`

    def run(stream: _Stream) -> None:
        ids = unique_prefix(list(request.prompt_ids), vocab_size)
        # each stream its own seed: sampled streams must not be copies of each other
        sampler = Sampler(dataclasses.replace(request.sampling, seed=request.sampling.seed + stream.index))
        go.wait()
        due_ns = origin[0] + arrivals_ns[stream.index]
        # sleep most of the wait, then the last ms on the clock: a send on time within ~0.1 ms
        while (left := due_ns - time.perf_counter_ns()) > 0 and not cancel.is_set():
            time.sleep(max(left - 1_000_000, 0) / 1e9 if left > 1_000_000 else 0)
        stream.started_ns = time.perf_counter_ns()
        try:
            for token in engine.stream(ids, request.new_tokens, sampler, cancel):
                previous = stream.stamps[-1] if stream.stamps else stream.started_ns
                stamp, step = token_time(token, previous, time.perf_counter_ns())  # a server event's arrival
                stream.stamps.append(stamp)
                stream.steps.append(step)
        except Exception as exc:  # noqa: BLE001 - one failing request must not lose the others
            stream.error = one_line(exc)
        finally:
            stream.ended_ns = time.perf_counter_ns()

    threads = [threading.Thread(target=run, args=(s,), name=f"load-{s.index}", daemon=True) for s in streams]
    if isinstance(engine, ServerEngine):
        engine.share_streams(True)
    try:
        for thread in threads:
            thread.start()
        started = origin[0] = time.perf_counter_ns()
        go.set()
        while True:
            alive = [t for t in threads if t.is_alive()]
            if not alive:
                break
            alive[0].join(PROGRESS_EVERY_S)
            conn.send(
                LoadProgress(
                    request.run_id, sum(len(s.stamps) for s in streams), sum(not t.is_alive() for t in threads)
                )
            )
    finally:
        if isinstance(engine, ServerEngine):
            engine.share_streams(False)
    notes = server_cross_check(engine, before, [(s.started_ns, s.stamps, s.steps) for s in streams])
    cancelled = cancel.is_set() and any(len(s.stamps) < request.new_tokens for s in streams)
    conn.send(LoadDone(request.run_id, started, tuple(s.result() for s in streams), notes, cancelled))


def server_cross_check(
    engine: Engine, before: ServerMetrics | None, requests: list[tuple[int, list[int], list[int | None]]]
) -> str:
    """The server's own mean TTFT and ITL over these requests (start, token stamps, steps) beside the
    client's, once the server has recorded them (at most METRICS_SETTLE_S after the last token).
    The client's ITL is one gap per server event, as the server records one per step (vLLM: per
    engine step, a speculative step's tokens included): per token, a step of 4 reads 4x faster."""
    if before is None or not isinstance(engine, ServerEngine):
        return ""
    served = sum(1 for _, stamps, _ in requests if stamps)
    deadline = time.monotonic() + METRICS_SETTLE_S
    after = engine.server_metrics()
    while after is not None and not settled(before, after, served) and time.monotonic() < deadline:
        time.sleep(0.05)
        after = engine.server_metrics()
    ttft = [(stamps[0] - start) / 1e6 for start, stamps, _ in requests if stamps]
    pooled = [gap for _, stamps, steps in requests for gap in chunk_gaps_ms(stamps, steps)]
    return cross_check_note(
        before,
        after,
        float(np.mean(ttft)) if ttft else float("nan"),
        float(np.mean(pooled)) if pooled else float("nan"),
    )
