"""A server process whistle-stop starts, waits for, and always stops (no orphans).

The server runs under `guard.py` in its own process group. The guard's stdin is a pipe this
process holds: closing it (`stop()`), or this process dying in any way, makes the guard stop the
whole group. Readiness is an HTTP GET that answers 200; while waiting, the server's own last log
line is passed on as progress, so a long start (vLLM: a minute or more on a CPU) is visibly alive.
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from ...progress import ProgressFn, silent
from .guard import stop_group

GUARD = Path(__file__).with_name("guard.py")
_POLL_S = 0.25
_PROGRESS_EVERY_S = 5.0
_LOG_TAIL = 12


class ServerError(RuntimeError):
    """The server could not be started, died, or did not become ready in time."""


class ServerUnavailable(RuntimeError):
    """An engine's own server program cannot be started here (not installed, nothing built yet): why."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@dataclass
class ServerCommand:
    """What to start: argv, extra environment, where it listens, and how to ask if it is ready."""

    argv: list[str]
    port: int
    env: dict[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    ready_path: str = "/health"
    name: str = "server"
    log_path: Path | None = None  # the server's stdout/stderr (kept for the user); None: a pipe tail only
    served_model: str = ""  # the `model` its requests name ("": any, or none needed)


class ManagedServer:
    """One running server. `start()` returns once it answers (or raises ServerError)."""

    def __init__(self, command: ServerCommand) -> None:
        self.command = command
        self.guard: subprocess.Popen | None = None
        self.pid: int | None = None  # the server's pid = its process group id
        self.start_s = 0.0
        self._tail: deque[str] = deque(maxlen=_LOG_TAIL)
        self._log_handle = None

    @property
    def base_url(self) -> str:
        return f"http://{self.command.host}:{self.command.port}"

    def start(self, timeout_s: float, progress: ProgressFn = silent, cancel: threading.Event | None = None) -> float:
        """Start and wait until ready; return the seconds it took. Stops the server on any failure."""
        began = time.monotonic()
        env = {**os.environ, **self.command.env}
        if self.command.log_path is not None:
            self.command.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_handle = open(self.command.log_path, "ab", buffering=0)  # noqa: SIM115 - closed in stop()
        self.guard = subprocess.Popen(
            [sys.executable, str(GUARD), "--", *self.command.argv],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            first = self.guard.stdout.readline().decode("utf-8", "replace").strip()
            self.pid = int(first)
        except ValueError:
            self.stop()
            raise ServerError(f"could not start the {self.command.name}: {first or 'no output'}") from None
        threading.Thread(target=self._pump, name=f"{self.command.name}-log", daemon=True).start()
        try:
            self._wait_ready(began, timeout_s, progress, cancel)
        except BaseException:
            self.stop()
            raise
        self.start_s = time.monotonic() - began
        return self.start_s

    def _wait_ready(self, began: float, timeout_s: float, progress: ProgressFn, cancel) -> None:
        last_report = 0.0
        while True:
            if cancel is not None and cancel.is_set():
                raise ServerError(f"cancelled while the {self.command.name} was starting")
            if self.guard.poll() is not None:
                raise ServerError(
                    f"the {self.command.name} exited while starting (exit code "
                    f"{self.guard.returncode}){self._tail_text()}"
                )
            if self.answers(self.command.ready_path):
                return
            elapsed = time.monotonic() - began
            if elapsed > timeout_s:
                raise ServerError(
                    f"the {self.command.name} did not answer on {self.command.host}:{self.command.port} "
                    f"within {timeout_s:g} s{self._tail_text()}"
                )
            if elapsed - last_report >= _PROGRESS_EVERY_S:
                last_report = elapsed
                line = self._tail[-1] if self._tail else ""
                progress(
                    f"starting the {self.command.name}: {elapsed:.0f} s" + (f" ({line[:120]})" if line else ""), None
                )
            time.sleep(_POLL_S)

    def answers(self, path: str, timeout_s: float = 2.0) -> bool:
        return self.get(path, timeout_s) is not None

    def get(self, path: str, timeout_s: float = 5.0) -> str | None:
        """The body of a GET (text), or None when it fails."""
        try:
            conn = http.client.HTTPConnection(self.command.host, self.command.port, timeout=timeout_s)
            try:
                conn.request("GET", path)
                response = conn.getresponse()
                body = response.read()
                return body.decode("utf-8", "replace") if response.status == 200 else None
            finally:
                conn.close()
        except (OSError, http.client.HTTPException):
            return None

    @property
    def running(self) -> bool:
        return self.guard is not None and self.guard.poll() is None

    def stop(self, grace_s: float = 8.0) -> None:
        """Close the guard's pipe (it stops the group); make sure of it if the guard does not exit."""
        guard, self.guard = self.guard, None
        if guard is not None:
            try:
                guard.stdin.close()
            except OSError:
                pass
            try:
                guard.wait(grace_s)
            except subprocess.TimeoutExpired:
                guard.kill()
                guard.wait(2)
        if self.pid is not None:
            stop_group(self.pid, grace_s=1.0)  # normally empty already; a no-op then
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None

    def _pump(self) -> None:
        """Copy the server's output to its log file, keeping the last lines for messages."""
        guard = self.guard
        if guard is None or guard.stdout is None:
            return
        for raw in iter(guard.stdout.readline, b""):
            handle = self._log_handle
            if handle is not None:
                try:
                    handle.write(raw)
                except (OSError, ValueError):
                    pass
            line = raw.decode("utf-8", "replace").strip()
            if line:
                self._tail.append(line)

    def _tail_text(self) -> str:
        where = f" (log: {self.command.log_path})" if self.command.log_path else ""
        lines = [line for line in self._tail if line]
        return f"{where}; last output: {lines[-1][:300]}" if lines else where
