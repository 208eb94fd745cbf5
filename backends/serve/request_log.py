"""One line per request on the server's stdout: what the terminal shows and the Serve tab parses.

    2026-11-25T10:15:02.114 200 cmpl-3f2a91c0 tokens=20 ttft_ms=12.4 total_ms=81.3 stream finish=length

Neither the prompt, the text nor any header (the API key) is ever written.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

_LINE = re.compile(
    r"^(?P<time>\S+) (?P<status>\d{3}) (?P<id>\S+) tokens=(?P<tokens>\d+) ttft_ms=(?P<ttft>\S+) "
    r"total_ms=(?P<total>\S+)(?P<stream> stream)?(?: finish=(?P<finish>\S+))?"
    r'(?: error="(?P<error>.*)")?$'
)


@dataclass(frozen=True)
class RequestLogEntry:
    time: str  # local time, ISO 8601 with milliseconds
    status: int
    request_id: str  # "-" for a request refused before it had one
    tokens: int
    ttft_ms: float | None
    total_ms: float
    stream: bool = False
    finish: str = ""  # "length", "stop", "abort" or "" (refused, failed)
    error: str = ""

    def line(self) -> str:
        ttft = "-" if self.ttft_ms is None else f"{self.ttft_ms:.1f}"
        text = (
            f"{self.time} {self.status} {self.request_id} tokens={self.tokens} ttft_ms={ttft} "
            f"total_ms={self.total_ms:.1f}"
        )
        if self.stream:
            text += " stream"
        if self.finish:
            text += f" finish={self.finish}"
        if self.error:
            text += ' error="' + self.error.replace("\n", " ").replace('"', "'")[:300] + '"'
        return text


def stamp() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"


def parse(line: str) -> RequestLogEntry | None:
    """A request line back into its fields; None for any other line."""
    match = _LINE.match(line.strip())
    if match is None:
        return None
    ttft = match.group("ttft")
    return RequestLogEntry(
        match.group("time"),
        int(match.group("status")),
        match.group("id"),
        int(match.group("tokens")),
        None if ttft == "-" else float(ttft),
        float(match.group("total")),
        bool(match.group("stream")),
        match.group("finish") or "",
        match.group("error") or "",
    )
