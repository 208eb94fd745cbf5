"""Everything a server's routes share: the model it serves, the worker pool, the metrics, the
request log and the API key (kept here only: never logged, never recorded)."""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable

from ..engine import EngineOptions
from ..registry import EngineSpec
from ..sources.model_files import ModelFiles
from ..worker.timeouts import Timeouts
from .metrics import ServeMetrics
from .pool import Pool, SlotState
from .protocol import ModelInfo, RequestError
from .request_log import RequestLogEntry

LineSink = Callable[[str], None]


class Service:
    def __init__(
        self,
        spec: EngineSpec,
        model: ModelFiles,
        options: EngineOptions,
        *,
        workers: int = 1,
        queue: int = 32,
        served_name: str = "",
        api_key: str = "",
        timeouts: Timeouts = Timeouts(),
        log: LineSink = lambda line: None,
        say: LineSink = lambda line: None,
    ) -> None:
        self.spec, self.model = spec, model
        self.info = ModelInfo(served_name or model.model_id, model.context, int(model.config.get("vocab_size", 50257)))
        self.metrics = ServeMetrics(self.info.name)
        self.created = int(time.time())
        self._api_key = api_key.encode()
        self._log, self.say = log, say
        self.on_fatal: Callable[[str], None] = lambda message: None
        self.pool = Pool(spec, model, options, workers, queue, self.metrics, timeouts, self._fatal, say)

    # --- life ------------------------------------------------------------------------------------
    def start(self) -> None:
        self.pool.start()

    def begin_shutdown(self) -> None:
        self.pool.begin_shutdown()

    def close(self) -> None:
        self.pool.close()

    @property
    def fatal(self) -> str:
        return self.pool.fatal

    def _fatal(self, message: str) -> None:
        self.say(f"error: {message}")
        self.on_fatal(message)

    # --- requests --------------------------------------------------------------------------------
    def check_key(self, authorization: str | None) -> None:
        """RequestError 401 unless the request carries the key (when one is set)."""
        if not self._api_key:
            return
        given = (authorization or "").encode()
        if not hmac.compare_digest(given, b"Bearer " + self._api_key):
            raise RequestError(
                "a valid API key is required (Authorization: Bearer <key>)", 401, kind="authentication_error"
            )

    def record(self, entry: RequestLogEntry) -> None:
        """One request's line in the log, and its status in the metrics."""
        self.metrics.answered(entry.status)
        self._log(entry.line())

    def health(self) -> tuple[int, dict]:
        """200 while a worker serves; 503 with the state and why while none does."""
        slots = self.pool.statuses()
        workers = [
            {"state": s.state.value, "busy": s.busy, **({"reason": s.reason} if s.reason else {})} for s in slots
        ]
        if self.pool.fatal:
            return 503, {"status": "failed", "reason": self.pool.fatal, "workers": workers}
        if self.pool.stopping:
            return 503, {"status": "stopping", "reason": "the server is shutting down", "workers": workers}
        if any(s.state is SlotState.SERVING for s in slots):
            return 200, {"status": "ok", "workers": workers}
        restarting = next((s for s in slots if s.state is SlotState.RESTARTING), None)
        if restarting is not None:
            return 503, {"status": "restarting", "reason": restarting.reason, "workers": workers}
        return 503, {"status": "loading", "reason": f"the engine {self.spec.name} is loading", "workers": workers}

    def metrics_text(self) -> str:
        pool = self.pool
        return self.metrics.render(pool.running, pool.scheduler.waiting, pool.serving)
