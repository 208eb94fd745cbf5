"""What one HTTP connection may hold: its request head's size and the time it takes to send it.

uvicorn's h11 protocol limits a head's size (`h11_max_incomplete_event_size`: past it, a 400 and
the connection closed) but not the time a client takes to send it: a client that sends its head a
byte at a time would hold its connection, and its file descriptor, for good. Here a head that is not
complete `head_timeout_s` after the connection opened (or after the previous response) gets a 408
and the connection is closed. The body has its own limit in the app (`BODY_TIMEOUT_S`).
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_HEAD_BYTES = 32 * 1024  # a request line and headers: an OpenAI client's are well under 2 KiB
HEAD_TIMEOUT_S = 10.0


class _HeadLimitedH11(H11Protocol):
    head_timeout_s = HEAD_TIMEOUT_S
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:  # the head is in: its body has a limit of its own
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm()  # the next request's head, on a kept-alive connection

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        busy = self.cycle is not None and not self.cycle.response_complete
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE or busy:
            return
        if self.conn.our_state is h11.IDLE:
            message = f"the request head did not arrive within {self.head_timeout_s:g} s\n".encode()
            headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close")]
            try:
                self.transport.write(self.conn.send(h11.Response(status_code=408, headers=headers)))
                self.transport.write(self.conn.send(h11.Data(data=message)))
                self.transport.write(self.conn.send(h11.EndOfMessage()))
            except h11.LocalProtocolError:
                pass  # no response can go now: the connection is closed without one
        self.transport.close()


def protocol(head_timeout_s: float = HEAD_TIMEOUT_S) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a deadline on each request head."""
    return type("HeadLimitedH11", (_HeadLimitedH11,), {"head_timeout_s": head_timeout_s})
