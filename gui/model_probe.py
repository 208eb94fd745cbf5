"""What the setup panel can know about a model source before Run: its context and whether its
weights are random. Bundled configs answer at once; a local folder is validated in a thread.
Hub ids and `auto` are resolved (downloaded if needed) only when the user presses Run, by the
job itself (`JobContext.prepare`), which a Cancel stops cleanly (see `resolve_model`'s `cancel`)."""

from __future__ import annotations

import json
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace

from PySide6.QtCore import QObject, QTimer, Signal

from whistle_stop.backends.errors import UsageError
from whistle_stop.backends.sources.model_files import (
    DEFAULT_HUB_MODEL,
    RANDOM_PREFIX,
    ModelFiles,
    cached_model,
    resolve_model,
)
from whistle_stop.backends.storage.paths import CONFIGS_DIR

from .job_context import RESOLVE_LOCK

HUB_MODELS = ["gpt2", "distilgpt2", "gpt2-medium"]


@dataclass(frozen=True)
class ModelInfo:
    spec: str
    context: int | None  # None: unknown until the folder is checked
    is_random: bool | None  # None: decided at Run (auto falls back to random:gpt2 offline)
    detail: str = ""
    notice: str = ""  # ModelFiles.notice once resolved
    error: str = ""  # the source cannot be used: Run is disabled with this reason
    pending: bool = False  # a check is running
    files: ModelFiles | None = None  # the model's files when they are here already (what builds are missing)


def _bundled_config(name: str) -> dict | None:
    path = CONFIGS_DIR / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _shape(config: dict) -> str:
    return f"{config.get('n_layer')} layers · {config.get('n_embd')} wide · {config.get('n_head')} heads"


def predict(spec: str) -> ModelInfo:
    """The answer that needs no model files."""
    spec = spec.strip() or "auto"
    if spec.startswith(RANDOM_PREFIX):
        config = _bundled_config(spec[len(RANDOM_PREFIX) :])
        if config is None:
            return ModelInfo(spec, None, True, error=f"unknown random config {spec!r}")
        return ModelInfo(spec, int(config.get("n_positions", 1024)), True, _shape(config) + " · made locally")
    if spec == "auto" or spec in HUB_MODELS:
        name = DEFAULT_HUB_MODEL if spec == "auto" else spec
        config = _bundled_config(name) or {}
        detail = (
            f"{name} from the cache or the hub; random:gpt2 if neither can be had"
            if spec == "auto"
            else f"{_shape(config)} · downloaded once if not cached"
        )
        return ModelInfo(spec, int(config.get("n_positions", 1024)), None if spec == "auto" else False, detail)
    return ModelInfo(spec, None, None, "checking the folder…", pending=True)


def from_files(model: ModelFiles) -> ModelInfo:
    return ModelInfo(
        model.spec, model.context, model.is_random, f"{model.label} · {_shape(model.config)}", model.notice, files=model
    )


class ModelProbe(QObject):
    """Emits `info` at once with the prediction, and again when a folder has been checked."""

    info = Signal(object)  # ModelInfo

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model-probe")
        self._future: Future | None = None
        self._spec = ""
        self._poll = QTimer(self)
        self._poll.setInterval(50)
        self._poll.timeout.connect(self._check)

    def probe(self, spec: str) -> None:
        self._spec = spec
        guess = predict(spec)
        self.info.emit(guess)
        if guess.pending:
            self._future = self._pool.submit(self._resolve, spec)
        elif not guess.error:  # a model known without files: find them if they are here (never fetched)
            self._future = self._pool.submit(self._locate, guess)
        else:
            return
        self._poll.start()

    @staticmethod
    def _locate(guess: ModelInfo) -> ModelInfo:
        with RESOLVE_LOCK:
            files = cached_model(guess.spec)
        return replace(guess, files=files) if files is not None else guess

    @staticmethod
    def _resolve(spec: str) -> ModelInfo:
        try:
            with RESOLVE_LOCK:
                return from_files(resolve_model(spec))
        except UsageError as exc:
            return ModelInfo(spec, None, None, error=str(exc))
        except Exception as exc:  # an unreadable folder must not take the panel down
            return ModelInfo(spec, None, None, error=f"{type(exc).__name__}: {exc}")

    def _check(self) -> None:
        if self._future is None or not self._future.done():
            return
        self._poll.stop()
        result: ModelInfo = self._future.result()
        self._future = None
        if result.spec == self._spec:  # ignore answers about a source no longer selected
            self.info.emit(result)

    def close(self) -> None:
        self._poll.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)
