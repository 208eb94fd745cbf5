"""The fake vLLM server (tests/fake_vllm) started as vLLM is: `python -m vllm.entrypoints.openai.api_server`,
and a fake vLLM environment (a venv whose python finds the fake package)."""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

from tests.pythons import make_venv, python_of
from whistle_stop.backends.engines.server.lifecycle import ManagedServer, ServerCommand, free_port

FAKE_VLLM = Path(__file__).parent / "fake_vllm"


_SERVER_ENV = tempfile.TemporaryDirectory(prefix="fake-vllm-")  # one fake environment per test session


@contextmanager
def fake_vllm_server(**env: str):
    port = free_port()
    python = python_of(Path(_SERVER_ENV.name) / "env")
    if not python.exists():
        fake_vllm_environment(Path(_SERVER_ENV.name) / "env")
    command = ServerCommand(
        [str(python), "-m", "vllm.entrypoints.openai.api_server", "--port", str(port)],
        port,
        env,
        name="fake vLLM server",
    )
    server = ManagedServer(command)
    server.start(60)
    try:
        yield server
    finally:
        server.stop()


def fake_vllm_environment(folder: Path) -> Path:
    """A folder shaped like vLLM's environment: a venv whose python finds the fake vllm package (and, as
    vLLM's has, transformers: this environment's packages)."""
    make_venv(folder, (FAKE_VLLM,), with_this_environment=True)  # vLLM's own transformers writes the tokenizer
    (folder / "installed.json").write_text(json.dumps({"flavour": "cpu", "version": "0.0-fake"}), encoding="utf-8")
    return folder


def pids_in(path: Path) -> list[int]:
    if not path.exists():
        return []
    return [int(p) for line in path.read_text().splitlines() for p in line.split()]


def alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def environ(**values: str):
    """Set environment variables for the duration of a with-block (spawned workers inherit them)."""

    @contextmanager
    def scope():
        saved = {k: os.environ.get(k) for k in values}
        os.environ.update(values)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    return scope()
