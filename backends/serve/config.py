"""A server's settings, checked before anything loads (one clear line each)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from ..engines.remote_options import ENV_NAME
from ..errors import UsageError

LOOPBACK = ("127.0.0.1", "localhost", "::1")
MAX_WORKERS = 64


@dataclass(frozen=True)
class ServeConfig:
    backend: str
    model: str = "auto"
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    queue: int = 32
    threads: int = 0  # per worker; 0: the usable physical cores divided among the workers
    shutdown_timeout_s: float = 10.0
    token_timeout_s: float | None = None  # --timeout; None: the workers' defaults (Timeouts)
    api_key_env: str = ""
    served_model_name: str = ""
    head_timeout_s: float = 10.0  # a request head not complete by then: 408, connection closed

    def validate(self) -> ServeConfig:
        if not 0 <= self.port <= 65535:
            raise UsageError(f"--port must be from 0 to 65535, got {self.port}")
        if not 1 <= self.workers <= MAX_WORKERS:
            raise UsageError(f"--workers must be from 1 to {MAX_WORKERS}, got {self.workers}")
        if self.queue < 0:
            raise UsageError(f"--queue must be >= 0, got {self.queue}")
        if self.threads < 0:
            raise UsageError(f"--threads must be >= 0, got {self.threads}")
        for flag, value in (
            ("--shutdown-timeout", self.shutdown_timeout_s),
            ("--timeout", self.token_timeout_s),
            ("--head-timeout", self.head_timeout_s),
        ):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise UsageError(f"{flag} must be a number of seconds > 0, got {value}")
        if not self.host.strip():
            raise UsageError("--host is empty")
        if self.api_key_env and not ENV_NAME.fullmatch(self.api_key_env):
            raise UsageError(f"--api-key-env: {self.api_key_env!r} is not an environment variable name")
        return self

    def api_key(self) -> str:
        """The key from --api-key-env's variable ("" when none is asked for); UsageError if it is unset."""
        if not self.api_key_env:
            return ""
        key = os.environ.get(self.api_key_env, "")
        if not key:
            raise UsageError(f"--api-key-env {self.api_key_env}: that environment variable is not set or empty")
        return key

    @property
    def exposed(self) -> bool:
        """Listening beyond this machine."""
        return self.host not in LOOPBACK
