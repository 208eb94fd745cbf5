"""`whistle-stop serve` for tests: in this process (uvicorn on a thread, engines in spawned workers, any
EngineSpec, scripted ones included) or as the real command in a subprocess; and a small stdlib client.
Every server binds to 127.0.0.1 and every request goes there."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from whistle_stop.backends import registry
from whistle_stop.backends.engine import EngineOptions
from whistle_stop.backends.registry import EngineSpec
from whistle_stop.backends.serve.server import ServeServer
from whistle_stop.backends.serve.service import Service
from whistle_stop.backends.worker.timeouts import Timeouts

HOST = "127.0.0.1"
# A scripted engine's logits are flat but for one 1.0, so a request at the API's default temperature (1)
# draws nearly uniformly and ends at a drawn end-of-text 1 time in 50,000 tokens. Requests that must
# reach a scripted position (a crash, a failure) or run their whole length are greedy.
GREEDY = {"temperature": 0}
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Served:
    server: ServeServer
    service: Service
    lines: list[str] = field(default_factory=list)  # the request log and status lines

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        return self.server.url


@contextmanager
def served(
    engine: str | EngineSpec,
    model,
    workers: int = 1,
    queue: int = 32,
    api_key: str = "",
    shutdown_timeout_s: float = 5.0,
    timeouts: Timeouts = Timeouts(),
    wait: bool = True,
    head_timeout_s: float = 10.0,
):
    """A server in this process on a free port; stopped (workers closed) at the end."""
    spec = registry.get(engine) if isinstance(engine, str) else engine
    lines: list[str] = []
    service = Service(
        spec,
        model,
        EngineOptions(threads=1),
        workers=workers,
        queue=queue,
        api_key=api_key,
        timeouts=timeouts,
        log=lines.append,
        say=lines.append,
    )
    server = ServeServer(service, HOST, 0, shutdown_timeout_s, head_timeout_s=head_timeout_s)
    thread = threading.Thread(target=server.run, name="test-serve", daemon=True)
    thread.start()
    try:
        if wait:
            wait_healthy(server.port)
        yield Served(server, service, lines)
    finally:
        server.stop()
        thread.join(60)
        assert not thread.is_alive(), "the server did not stop"


def wait_healthy(port: int, timeout_s: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout_s
    body: dict = {}
    while time.monotonic() < deadline:
        try:
            status, _, body = request(port, "GET", "/health")
            if status == 200:
                return body
        except OSError:
            pass
        threading.Event().wait(0.05)
    raise AssertionError(f"the server on port {port} did not become healthy: {body}")


def request(
    port: int,
    method: str,
    path: str,
    body: object = None,
    headers: dict | None = None,
    raw: bytes | None = None,
    timeout_s: float = 60.0,
) -> tuple[int, dict, object]:
    """(status, headers, JSON body or text) of one request."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout_s)
    try:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        text = response.read().decode("utf-8", "replace")
        try:
            parsed: object = json.loads(text)
        except ValueError:
            parsed = text
        return response.status, {k.lower(): v for k, v in response.getheaders()}, parsed
    finally:
        conn.close()


def complete(port: int, body: dict, headers: dict | None = None) -> tuple[int, dict, object]:
    return request(port, "POST", "/v1/completions", body, headers)


def stream_events(port: int, body: dict, headers: dict | None = None) -> tuple[int, list]:
    """(status, events): each `data:` payload parsed ("[DONE]" kept as a string)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=60)
    try:
        conn.request(
            "POST",
            "/v1/completions",
            body=json.dumps({**body, "stream": True}).encode(),
            headers={"Content-Type": "application/json", **(headers or {})},
        )
        response = conn.getresponse()
        if response.status != 200:
            return response.status, [json.loads(response.read())]
        events: list = []
        for raw in response:
            line = raw.decode().strip()
            if line.startswith("data: "):
                payload = line[6:]
                events.append(payload if payload == "[DONE]" else json.loads(payload))
        return response.status, events
    finally:
        conn.close()


# --- the real command, in a subprocess -----------------------------------------------------------

# Scripted engines reach a `serve` subprocess through this bootstrap: it adds them to the registry
# the way tests/test_cli.py does in-process, then runs the command line as `main.py` would.
_BOOTSTRAP = """
import json, sys
from whistle_stop.backends import registry
from tests import fake_engines
for name, kwargs in json.loads(sys.argv[1]).items():
    registry.ENGINES[name] = fake_engines.spec(name, **kwargs)
from whistle_stop.backends.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


@dataclass
class ServeProcess:
    process: subprocess.Popen
    port: int
    err_path: Path
    out_path: Path

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")


def start_serve(tmp_path: Path, *args: str, scripted: dict | None = None, timeout_s: float = 60.0) -> ServeProcess:
    """`serve` as its own process on a free port (`--port 0`), waited for until healthy."""
    err_path, out_path = tmp_path / "serve.err", tmp_path / "serve.out"
    argv = [sys.executable, "-c", _BOOTSTRAP, json.dumps(scripted or {}), "serve", "--port", "0", *args]
    with err_path.open("wb") as err, out_path.open("wb") as out:
        process = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=err)
    deadline = time.monotonic() + timeout_s
    port = 0
    while not port and time.monotonic() < deadline:
        text = err_path.read_text(errors="replace")
        marker = f"http://{HOST}:"
        if marker in text:
            port = int(text.split(marker, 1)[1].split("/", 1)[0])
        elif process.poll() is not None:
            raise AssertionError(f"serve exited ({process.returncode}): {text}")
        else:
            threading.Event().wait(0.05)
    if not port:
        process.kill()
        raise AssertionError(f"serve did not start: {err_path.read_text()}")
    wait_healthy(port, timeout_s)
    return ServeProcess(process, port, err_path, out_path)


def stop_serve(served: ServeProcess, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int:
    if served.process.poll() is None:
        os.kill(served.process.pid, sig)
    return served.process.wait(timeout_s)
