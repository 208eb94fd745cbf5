"""The server process: the app on uvicorn, on a socket bound before anything loads.

Binding first makes a busy port one clear line at once, gives the real port when 0 was asked,
and lets clients connect (and see /health say "loading") while the engine loads. SIGTERM and
Ctrl+C stop it gracefully: nothing new is taken, what runs or waits may finish for up to
`shutdown_timeout_s`, then uvicorn cancels what is left (each cancelled request stops its worker
after the current token), and the app's shutdown closes every worker before the process ends.
A second Ctrl+C forces it.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Callable

import uvicorn

from ..errors import UsageError
from .app import create_app
from .http_limits import HEAD_TIMEOUT_S, MAX_HEAD_BYTES, protocol
from .service import Service

EXIT_OK, EXIT_FAILED = 0, 1


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port; UsageError (one line) when it cannot be had."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except (socket.gaierror, UnicodeError) as exc:
        raise UsageError(f"--host {host!r} cannot be resolved: {exc}") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


class _Uvicorn(uvicorn.Server):
    """uvicorn's server, telling the service when a signal starts the shutdown, and ending without
    raising that signal again afterwards (the service has stopped cleanly by then: exit status 0)."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame) -> None:
        self._on_exit()
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self):
        if threading.current_thread() is not threading.main_thread():
            yield  # a server run in a thread (tests): stopped with `stop()`
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


class ServeServer:
    def __init__(
        self,
        service: Service,
        host: str = "127.0.0.1",
        port: int = 8000,
        shutdown_timeout_s: float = 10.0,
        sock: socket.socket | None = None,
        head_timeout_s: float = HEAD_TIMEOUT_S,
    ) -> None:
        """Listens on `sock` when given (bound by `bind` before the model was resolved). A request head
        larger than MAX_HEAD_BYTES is a 400; one not complete within `head_timeout_s` a 408."""
        self.service = service
        self.host = host
        self.socket = sock or bind(host, port)
        self.port = self.socket.getsockname()[1]
        config = uvicorn.Config(
            create_app(service),
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=shutdown_timeout_s,  # type: ignore[arg-type]  # uvicorn waits on a float
            loop="asyncio",
            ws="none",
            http=protocol(head_timeout_s),
            h11_max_incomplete_event_size=MAX_HEAD_BYTES,
            server_header=False,
        )
        self._server = _Uvicorn(config, service.begin_shutdown)
        service.on_fatal = lambda _message: self._exit()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def run(self) -> int:
        """Serve until stopped; 0 after a clean stop, 1 when the engine never loaded."""
        try:
            self._server.run(sockets=[self.socket])
        finally:
            self.socket.close()
        return EXIT_FAILED if self.service.fatal else EXIT_OK

    def stop(self) -> None:
        """What SIGTERM does, from any thread."""
        self.service.begin_shutdown()
        self._exit()

    def _exit(self) -> None:
        self._server.should_exit = True
