"""The fake vLLM server (tests/fake_vllm) started as vLLM is: `python -m vllm.entrypoints.openai.api_server`,
and a fake vLLM environment (a folder whose bin/python finds the fake package)."""

from __future__ import annotations

import json
import os
import stat
import sys
from contextlib import contextmanager
from pathlib import Path

from whistle_stop.backends.engines.server.lifecycle import ManagedServer, ServerCommand, free_port

FAKE_VLLM = Path(__file__).parent / "fake_vllm"


@contextmanager
def fake_vllm_server(**env: str):
    port = free_port()
    command = ServerCommand([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--port", str(port)],
                            port, {"PYTHONPATH": str(FAKE_VLLM), **env}, name="fake vLLM server")
    server = ManagedServer(command)
    server.start(60)
    try:
        yield server
    finally:
        server.stop()


def fake_vllm_environment(folder: Path) -> Path:
    """A folder shaped like vLLM's environment: bin/python runs this Python with the fake vllm package."""
    (folder / "bin").mkdir(parents=True, exist_ok=True)
    python = folder / "bin" / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{FAKE_VLLM}" exec "{sys.executable}" "$@"\n', encoding="utf-8")
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
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
