"""Cold start as a server user meets it, "load to finish": from starting the server's process to the
first completed response (a one-token greedy completion of the bench's prompt), for `whistle-stop
serve` with each engine and for each engine's own server program where it has one and it can run
here (llama.cpp's, vLLM's: `EngineSpec.own_server`). `bench --serve-cold-start` puts these beside the
engines' own cold starts (worker spawned to first token) and writes serve_cold_start.csv.

The client asks every `POLL_S` from the moment the process starts, through the `remote` engine's
client (which speaks each server's dialect): a refused connection or a 503 means "not yet". The
server runs in its own process group and is stopped, group and all, as soon as it has answered.
"""

from __future__ import annotations

import csv
import importlib
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..engine import EngineOptions
from ..engine_settings import EngineSettings, flags_of
from ..engines.remote_engine import RemoteEngine
from ..engines.remote_options import RemoteOptions
from ..engines.remote_stream import RemoteError
from ..engines.server.guard import stop_group
from ..engines.server.lifecycle import ServerCommand, ServerUnavailable, free_port
from ..errors import one_line
from ..registry import EngineSpec
from ..sampling import Sampler, SamplingParams
from ..sources.model_files import ModelFiles
from ..storage.atomic import atomic_write

FILE = "serve_cold_start.csv"
HEADERS = ("backend", "server", "status", "serve_cold_start_s", "engine_cold_start_s", "note")
TABLE_HEADERS = ("backend", "server", "load to finish s", "engine cold start s", "status / note")
TABLE_NOTE = (
    "engine cold start: the bench's, its worker spawned to its first token (no HTTP, no server process); "
    "load to finish adds the server process's start and one request over HTTP"
)
OURS = "whistle-stop serve"
POLL_S = 0.01
STOP_GRACE_S = 15.0
TIMEOUT_S = 900.0  # vLLM compiles its decode graph at start: minutes on a CPU
_TAIL = 20


@dataclass(frozen=True)
class ServeColdStart:
    engine: str
    server: str
    status: str  # "ok", "failed" or "skipped"
    serve_cold_start_s: float | None  # process start to the first completed response
    engine_cold_start_s: float | None  # the bench's: the engine's worker spawned to its first token
    note: str = ""

    def shown(self) -> list[str]:
        """The printed table's cells (TABLE_HEADERS): the CLI's, and the Markdown page's."""

        def seconds(value: float | None) -> str:
            return "-" if value is None else f"{value:.2f}"

        status = self.status if not self.note else f"{self.status}: {self.note}"
        return [self.engine, self.server, seconds(self.serve_cold_start_s), seconds(self.engine_cold_start_s), status]

    def row(self) -> list[str]:
        def seconds(value: float | None) -> str:
            return "" if value is None else f"{value:.3f}"

        return [
            self.engine,
            self.server,
            self.status,
            seconds(self.serve_cold_start_s),
            seconds(self.engine_cold_start_s),
            self.note,
        ]


def our_server(
    name: str, model: ModelFiles, port: int, threads: int, settings: EngineSettings | None = None
) -> ServerCommand:
    """`whistle-stop serve --backend NAME` as a user starts it (the same interpreter and package)."""
    argv = [
        sys.executable,
        "-m",
        "whistle_stop.backends.cli.launcher",
        "serve",
        "--backend",
        name,
        "--model",
        model.model_id,
        "--port",
        str(port),
        "--threads",
        str(threads),
        *flags_of(settings),
    ]
    return ServerCommand(argv, port, name=OURS)


def own_server(spec: EngineSpec, model: ModelFiles, port: int, threads: int) -> ServerCommand | None:
    """The engine's own server program (None if it has none); ServerUnavailable if it cannot run here."""
    if not spec.own_server:
        return None
    module_name, function_name = spec.own_server.split(":")
    make = getattr(importlib.import_module(module_name), function_name)
    return make(model, port, threads, **spec.engine_args)


def time_to_first_response(
    command: ServerCommand, prompt_ids: list[int], model: ModelFiles, timeout_s: float = TIMEOUT_S
) -> tuple[float | None, str]:
    """(seconds from the process's start to its first completed response, "") or (None, why not)."""
    tail: deque[str] = deque(maxlen=_TAIL)
    began = time.perf_counter()
    process = subprocess.Popen(
        command.argv,
        env={**os.environ, **command.env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    _pump(process, tail)
    try:
        last = ""
        while True:
            if process.poll() is not None:
                return None, f"exited (code {process.returncode}) before answering{_last_line(tail)}"
            try:
                if _one_completion(command, prompt_ids, model):
                    return time.perf_counter() - began, ""
            except RemoteError as exc:
                last = str(exc)
            if time.perf_counter() - began > timeout_s:
                return None, f"no completed response within {timeout_s:g} s ({last or 'no answer'})"
            time.sleep(POLL_S)
    finally:
        _stop(process)


def _stop(process: subprocess.Popen) -> None:
    """The server's whole group: SIGTERM, then SIGKILL for what is left after the grace."""
    stop_group(process.pid, grace_s=STOP_GRACE_S, reap=process.poll)
    if process.poll() is None:
        process.kill()
    process.wait(10)


def _one_completion(command: ServerCommand, prompt_ids: list[int], model: ModelFiles) -> bool:
    """One greedy one-token completion through the remote engine's client: True when it came back."""
    client = RemoteEngine(
        "cold-start client",
        EngineOptions(
            1,
            settings=RemoteOptions(
                url=f"http://{command.host}:{command.port}/v1",
                model=command.served_model,
                connect_timeout_s=2.0,
                timeout_s=TIMEOUT_S,
            ),
        ),
    )
    client.load(model, lambda *args: None)
    return len(list(client.stream(prompt_ids, 1, Sampler(SamplingParams())))) == 1


def _pump(process: subprocess.Popen, tail: deque[str]) -> None:
    """Keep the server's last lines (its pipe must be read or it blocks once full)."""

    def run() -> None:
        for raw in iter(process.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").strip()
            if line:
                tail.append(line)

    threading.Thread(target=run, name="cold-start-log", daemon=True).start()


def _last_line(tail: deque[str]) -> str:
    return f"; last output: {tail[-1][:200]}" if tail else ""


def measure(
    specs: dict[str, EngineSpec],
    model: ModelFiles,
    prompt_ids: list[int],
    threads: int,
    settings: dict[str, EngineSettings],
    engine_cold_starts: dict[str, float],
    say: Callable[[str], None] = lambda line: None,
    cancelled: Callable[[], bool] = lambda: False,
    timeout_s: float = TIMEOUT_S,
) -> list[ServeColdStart]:
    """Every engine's `serve`, then its own server where it has one: one after another, never two at once."""
    rows: list[ServeColdStart] = []
    for name, spec in specs.items():
        engine_cold = engine_cold_starts.get(name)
        candidates: list[tuple[str, Callable[[int], ServerCommand | None]]] = [
            (OURS, lambda port, n=name: our_server(n, model, port, threads, settings.get(n))),  # type: ignore[misc]
            ("", lambda port, s=spec: own_server(s, model, port, threads)),  # type: ignore[misc]
        ]
        for label, make in candidates:
            if cancelled():
                return rows
            try:
                command = make(free_port())
            except ServerUnavailable as exc:
                rows.append(ServeColdStart(name, label or "own server", "skipped", None, engine_cold, str(exc)))
                continue
            except Exception as exc:  # noqa: BLE001 - one server that cannot be set up does not stop the others
                rows.append(ServeColdStart(name, label or "own server", "failed", None, engine_cold, one_line(exc)))
                continue
            if command is None:
                continue
            say(f"{name}: starting the {command.name} and timing it to its first completed response…")
            seconds, problem = time_to_first_response(command, prompt_ids, model, timeout_s)
            rows.append(
                ServeColdStart(
                    name, command.name, "ok" if seconds is not None else "failed", seconds, engine_cold, problem
                )
            )
    return rows


def read_csv(folder: Path) -> list[ServeColdStart]:
    """serve_cold_start.csv of a results folder ([] where the bench did not time it); a file written
    before its `engine` column was named `backend`, as in every other file, reads the same."""
    path = folder / FILE
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as handle:
        return [
            ServeColdStart(
                row["backend"] if "backend" in row else row["engine"],
                row["server"],
                row["status"],
                float(row["serve_cold_start_s"]) if row["serve_cold_start_s"] else None,
                float(row["engine_cold_start_s"]) if row["engine_cold_start_s"] else None,
                row.get("note") or "",
            )
            for row in csv.DictReader(handle)
        ]


def write_csv(out: Path, rows: list[ServeColdStart]) -> Path:
    path = out / FILE
    with atomic_write(path, newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADERS)
        writer.writerows(row.row() for row in rows)
    return path
