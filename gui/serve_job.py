"""The Serve tab's job: `whistle-stop serve` as a subprocess, followed from the job's thread. No Qt here.

The server runs under the server guard (backends/engines/server/guard.py), whose stdin this job
holds: Stop (the job's cancel) or the window closing closes that pipe and the guard stops the
server's whole process group, its engine workers included; if the app itself dies, the pipe closes
just the same. The server's stdout is its request log (one line per request), its stderr its status
lines. A few times a second the thread reads /health and /metrics (over loopback, with a short
timeout) and posts what the tab shows: the GUI thread never waits on the server.

The TTFT and ITL p50 come from the server's own Prometheus histograms, so they are estimates inside
a bucket (the server's buckets step by at most 20%: backends/serve/metrics.py), and they cover every
request since the server started, not a recent window. `ServerSample.ttft_text` and `itl_text` say both.
"""

from __future__ import annotations

import http.client
import json
import math
import subprocess
import sys
import threading
from dataclasses import dataclass

from whistle_stop.backends import server_metrics
from whistle_stop.backends.engine_settings import EngineSettings, flags_of
from whistle_stop.backends.engines.server.lifecycle import GUARD
from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.serve.metrics import REQUESTS_METRIC
from whistle_stop.backends.serve.request_log import RequestLogEntry, parse

from .job_context import JobCancelled, JobContext
from .job_controller import JobController

SAMPLE_EVERY_S = 0.25
SHUTDOWN_TIMEOUT_S = 3  # below the guard's grace (5 s) before it kills the server's group
STOP_WAIT_S = 15.0
HOST = "127.0.0.1"
P50_NOTE = "p50 bucket, since the server started"  # what a p50 figure is: a histogram's bucket, cumulative


@dataclass(frozen=True)
class ServeSettings:
    engine: str
    model: str
    port: int = 8000
    workers: int = 1
    queue: int = 32
    threads: int = 0
    settings: EngineSettings | None = None  # the engine's own (a remote URL...), from the setup panel


@dataclass(frozen=True)
class ServerLine:
    """A line the server printed: a request (`entry`) or a status line."""

    text: str
    entry: RequestLogEntry | None = None


@dataclass(frozen=True)
class ServerSample:
    """The server's state and its own figures, read from /health and /metrics."""

    health: str  # "starting", "ok", "loading", "restarting", "stopping", "failed" or "unreachable"
    reason: str = ""
    requests: int = 0
    running: int = 0
    waiting: int = 0
    tokens: int = 0
    ttft_p50_ms: float | None = None  # estimated inside its bucket (Prometheus's histogram_quantile)
    itl_p50_ms: float | None = None
    ttft_p50_bucket_ms: tuple[float, float] | None = None  # (lower, upper] holding the median: what is known
    itl_p50_bucket_ms: tuple[float, float] | None = None

    @property
    def ttft_text(self) -> str:
        return bucket_text(self.ttft_p50_bucket_ms)

    @property
    def itl_text(self) -> str:
        return bucket_text(self.itl_p50_bucket_ms)


def bucket_text(bounds: tuple[float, float] | None) -> str:
    """A p50's bucket as the tab shows it: "100-110 ms" (the median is in there), "over 150 ms" past the last."""
    if bounds is None:
        return "-"
    lower, upper = bounds
    return f"over {_ms(lower)} ms" if math.isinf(upper) else f"{_ms(lower)}-{_ms(upper)} ms"


def _ms(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"  # bounds are round: 110, 2.5, 0.05


@dataclass(frozen=True)
class ServerListening:
    url: str  # the API's base, http://127.0.0.1:PORT/v1


def serve_argv(settings: ServeSettings) -> list[str]:
    return [
        sys.executable,
        "-m",
        "whistle_stop.backends.cli.launcher",
        "serve",
        "--backend",
        settings.engine,
        "--model",
        settings.model,
        "--host",
        HOST,
        "--port",
        str(settings.port),
        "--workers",
        str(settings.workers),
        "--queue",
        str(settings.queue),
        "--threads",
        str(settings.threads),
        "--shutdown-timeout",
        str(SHUTDOWN_TIMEOUT_S),
        *flags_of(settings.settings),
    ]


def start_serve(controller: JobController, settings: ServeSettings) -> None:
    """Start the server on `controller` (UsageError if it cannot start now). The controller's
    `result` is the server's exit status; `failed` says why it ended by itself."""
    controller.start(lambda context: _serve(context, settings), lambda: None)


def _serve(context: JobContext, settings: ServeSettings) -> int:
    guard = subprocess.Popen(
        [sys.executable, str(GUARD), "--", *serve_argv(settings)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    errors: list[str] = []
    readers = [
        threading.Thread(target=_read, args=(guard.stdout, context, None), daemon=True),
        threading.Thread(target=_read, args=(guard.stderr, context, errors), daemon=True),
    ]
    try:
        guard.stdout.readline()  # the server's pid, said first by the guard
        for reader in readers:
            reader.start()
        listening = False
        while guard.poll() is None:
            if context.cancelled.is_set():
                raise JobCancelled()
            sample = _sample(settings.port)
            # "unknown": something answers on the port, but not with our /health (another program
            # holds it, and our server is about to say so): not our URL.
            if not listening and sample.health not in ("unreachable", "unknown"):
                listening = True
                context.post(ServerListening(f"http://{HOST}:{settings.port}/v1"))
                context.ready(settings)  # from here a Stop waits for the server to stop
            if not listening:  # not up yet: nothing to reach is the start's, not a fault's
                sample = ServerSample("starting")
            context.post(sample)
            context.cancelled.wait(SAMPLE_EVERY_S)
    finally:
        _stop(guard)
        for reader in readers:
            if reader.is_alive():
                reader.join(2.0)  # the last lines go out before the job's end
    code = guard.returncode
    if code != 0 and not context.cancelled.is_set():  # the server's own last line says why: no traceback
        raise UsageError(f"the server exited ({code}): {errors[-1] if errors else 'no output'}")
    return code


def _stop(guard: subprocess.Popen) -> None:
    """Close the guard's stdin: it stops the server's group (SIGTERM, SIGKILL after its grace)."""
    try:
        guard.stdin.close()
    except OSError:
        pass
    try:
        guard.wait(STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        guard.kill()
        guard.wait(5)


def _read(stream, context: JobContext, errors: list[str] | None) -> None:
    for raw in iter(stream.readline, b""):
        text = raw.decode("utf-8", "replace").rstrip()
        if not text:
            continue
        if errors is not None:
            errors.append(text)
            del errors[:-20]
        context.post(ServerLine(text, parse(text) if errors is None else None))


def _sample(port: int) -> ServerSample:
    health = _get(port, "/health")
    if health is None:
        return ServerSample("unreachable")
    return server_sample(health, _get(port, "/metrics") or "")


def server_sample(health: str, metrics_text: str) -> ServerSample:
    """What the tab shows, from the bodies of /health and /metrics."""
    try:
        state = json.loads(health)
    except ValueError:
        state = {}
    found = server_metrics.samples(metrics_text)
    ttft = server_metrics.histogram(found, server_metrics.TTFT_METRICS[0])
    itl = server_metrics.histogram(found, server_metrics.ITL_METRICS[0])

    def count(name: str) -> int:
        return int(server_metrics.value(found, name) or 0)

    def p50_ms(histogram) -> float | None:
        return histogram.quantile(0.5) * 1e3 if histogram is not None and histogram.count else None

    def p50_bucket_ms(histogram) -> tuple[float, float] | None:
        bounds = histogram.bucket(0.5) if histogram is not None else None
        return None if bounds is None else (bounds[0] * 1e3, bounds[1] * 1e3)

    return ServerSample(
        state.get("status", "unknown"),
        state.get("reason", ""),
        count(REQUESTS_METRIC),
        count(server_metrics.RUNNING_METRIC),
        count(server_metrics.WAITING_METRIC),
        count(server_metrics.GENERATION_TOKENS_METRIC),
        p50_ms(ttft),
        p50_ms(itl),
        p50_bucket_ms(ttft),
        p50_bucket_ms(itl),
    )


def _get(port: int, path: str) -> str | None:
    """A GET's body whatever its status (/health says 503 while loading), or None when unreachable."""
    try:
        conn = http.client.HTTPConnection(HOST, port, timeout=1.0)
        try:
            conn.request("GET", path)
            return conn.getresponse().read().decode("utf-8", "replace")
        finally:
            conn.close()
    except (OSError, http.client.HTTPException):
        return None
