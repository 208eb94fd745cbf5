"""One completion request to an OpenAI-compatible server, its server-sent events read on a thread
of their own (`Reader`): the blocking network I/O is bounded by the engine's connect and read
timeouts, each event is stamped as it arrives, and the consumer waits on a queue so it can honour a
cancel. Errors are `RemoteError`s, scrubbed of the API key."""

from __future__ import annotations

import http.client
import json
import queue
import socket
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .remote_engine import RemoteEngine

POLL_S = 0.05  # how often the cancel event is checked while waiting for the server
MAX_ERROR_BODY = 64 * 1024


class RemoteError(RuntimeError):
    """A remote run failed: refused, timed out, HTTP error, or a malformed stream."""


class Rejected(RemoteError):
    """HTTP 400/422 (or a validation 500) before any token: the request's form may be at fault."""


class Reader:
    """One HTTP request on a thread; events arrive on a queue so the caller can honour cancel."""

    def __init__(self, engine: RemoteEngine, body: bytes) -> None:
        self.engine = engine
        self.events: queue.Queue = queue.Queue()
        self.received_ns = 0  # when the last event next_event returned arrived (perf_counter_ns)
        self.done = False  # [DONE] arrived: the server ended the stream, it was not cut
        self.conn: http.client.HTTPConnection | None = None
        self.closed = threading.Event()
        threading.Thread(target=self._run, args=(body,), name="remote-reader", daemon=True).start()

    def next_event(self, cancel: threading.Event | None) -> dict | None:
        """The next parsed event, or None at the end of the stream; raise RemoteError on failure."""
        e = self.engine
        # The reader's socket timeouts bound every wait; this is a backstop (e.g. a slow DNS lookup).
        deadline = time.monotonic() + e.connect_timeout + e.read_timeout + 5
        while True:
            if cancel is not None and cancel.is_set():
                return None
            try:
                kind, value = self.events.get(timeout=POLL_S)
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise RemoteError(f"no answer from {e.label} within {e.read_timeout:g} s (timeout)") from None
                continue
            if kind == "event":
                event, self.received_ns = value
                return event
            if kind == "end":
                return None
            raise value

    def drain(self, seconds: float) -> None:
        """Read the rest of the stream (what follows the last token wanted: a usage chunk, [DONE])
        without using it, for at most `seconds`."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                kind, _ = self.events.get(timeout=left)
            except queue.Empty:
                return
            if kind != "event":
                return

    def close(self) -> None:
        self.closed.set()
        conn = self.conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked recv at once
            except OSError:
                pass
        if conn is not None:
            conn.close()

    def _run(self, body: bytes) -> None:
        try:
            self._request(body)
            self.events.put(("end", None))
        except RemoteError as exc:
            exc.args = (self.engine.scrub(str(exc)),)  # a server may echo the key back
            self.events.put(("error", exc))
        except Exception as exc:  # noqa: BLE001 - every failure becomes one clear message
            if not self.closed.is_set():
                self.events.put(("error", RemoteError(self.engine.scrub(self._describe(exc)))))

    def _describe(self, exc: Exception) -> str:
        e = self.engine
        if isinstance(exc, ConnectionRefusedError):
            return f"connection refused by {e.label} (is the server running?)"
        if isinstance(exc, (socket.timeout, TimeoutError)):
            phase = "connect" if self.conn is None or self.conn.sock is None else "read"
            limit = e.connect_timeout if phase == "connect" else e.read_timeout
            return f"{phase} timeout: no answer from {e.label} within {limit:g} s"
        if isinstance(exc, (http.client.BadStatusLine, http.client.HTTPException)):
            return f"malformed HTTP response from {e.label}: {type(exc).__name__}: {exc}"
        if isinstance(exc, OSError):
            return f"network error talking to {e.label}: {exc.strerror or exc}"
        return f"{type(exc).__name__} talking to {e.label}: {exc}"

    def _request(self, body: bytes) -> None:
        e = self.engine
        cls = http.client.HTTPSConnection if e.scheme == "https" else http.client.HTTPConnection
        conn = cls(e.host, e.port, timeout=e.connect_timeout)
        conn.connect()
        self.conn = conn
        if self.closed.is_set():  # cancelled while connecting
            conn.close()
            return
        conn.sock.settimeout(e.read_timeout)  # from here on: the longest silence we accept
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream", "User-Agent": "whistle-stop"}
        if e.resolved_key:
            headers["Authorization"] = f"Bearer {e.resolved_key}"
        conn.request("POST", e.path, body=body, headers=headers)
        response = conn.getresponse()
        if response.status >= 400:
            message = error_message(response.read(MAX_ERROR_BODY))
            # llama-cpp-python's server answers a request it cannot validate with a 500
            rejected = response.status in (400, 422) or (response.status == 500 and "validation" in message.lower())
            error_cls = Rejected if rejected else RemoteError
            raise error_cls(e.scrub(f"HTTP {response.status} {response.reason} from {e.label}: {message}"))
        kind = response.getheader("Content-Type", "")
        if "text/event-stream" not in kind:
            sample = response.read(2000).decode("utf-8", "replace")
            raise RemoteError(e.scrub(f"{e.label} did not stream (Content-Type {kind or 'none'}): {sample[:200]}"))
        self._read_events(response)

    def _read_events(self, response: http.client.HTTPResponse) -> None:
        """Server-sent events: `data:` lines up to a blank line make one event; [DONE] ends."""
        data: list[str] = []
        while not self.closed.is_set():
            raw = response.readline()
            if not raw:
                break  # end of stream
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            if line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
            elif line == "" and data:
                if not self._dispatch("\n".join(data)):
                    return
                data = []
            elif line and not line.startswith((":", "event:", "id:", "retry:")):
                raise RemoteError(f"malformed server-sent event from {self.engine.label}: {line[:200]!r}")
        if data:
            self._dispatch("\n".join(data))

    def _dispatch(self, payload: str) -> bool:
        received = time.perf_counter_ns()
        if payload.strip() == "[DONE]":
            self.done = True
            return False
        try:
            event = json.loads(payload)
        except ValueError:
            raise RemoteError(f"malformed server-sent event from {self.engine.label}: {payload[:200]!r}") from None
        if not isinstance(event, dict):
            raise RemoteError(f"malformed server-sent event from {self.engine.label}: {payload[:200]!r}")
        self.events.put(("event", (event, received)))
        return True


def error_message(body: bytes) -> str:
    """The message of an error response's body (JSON's error.message, detail or message, else its text)."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:500] or "(no message)"
    if isinstance(data, dict):
        error = data.get("error", data.get("detail", data.get("message", data)))
        if isinstance(error, dict):
            error = error.get("message", error)
        return str(error)[:500]
    return str(data)[:500]
