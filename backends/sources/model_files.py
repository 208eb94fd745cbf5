"""Model sources: `auto`, hub ids, local folders of HF files, and `random:<config>`."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ModelError
from ..gpt2_config import GPT2Config
from ..progress import ProgressFn  # noqa: F401  (re-exported: the GUI imports it from here)
from ..storage.paths import CONFIGS_DIR, cache_dir
from .hub import DownloadCancelled, HubUnreachable  # noqa: F401  (re-exported: callers catch them from here)
from .weights import CorruptWeights, check_against_config

RANDOM_PREFIX = "random:"
RANDOM_LABEL = "random weights - timing only"
DEFAULT_HUB_MODEL = "gpt2"
WEIGHT_FILE = "model.safetensors"
PICKLED_FILES = ("pytorch_model.bin", "model.bin", "pytorch_model.pt", "model.pt", "model.ckpt")


@dataclass(frozen=True)
class ModelFiles:
    """A resolved model: a folder with config.json and model.safetensors, and what it is."""

    spec: str  # what the user asked for
    model_id: str  # e.g. "gpt2", "random:tiny", or a folder path
    folder: Path
    weights: str  # "real" or "random"
    weights_hash: str
    config: dict = field(repr=False, compare=False)
    notice: str = ""  # a one-line warning to show the user (e.g. fell back to random weights)

    @property
    def safetensors(self) -> Path:
        return self.folder / WEIGHT_FILE

    @property
    def gpt2_config(self) -> GPT2Config:
        """The architecture as the engines read it (config.json with transformers' defaults)."""
        return GPT2Config.from_dict(self.config)

    @property
    def context(self) -> int:
        return int(self.config.get("n_positions", 1024))

    @property
    def is_random(self) -> bool:
        return self.weights == "random"

    @property
    def label(self) -> str:
        return f"{self.model_id} ({RANDOM_LABEL})" if self.is_random else self.model_id


def random_config_names() -> list[str]:
    return sorted(p.stem for p in CONFIGS_DIR.glob("*.json"))


def resolve_model(
    spec: str = "auto", progress: ProgressFn | None = None, cancel: threading.Event | None = None
) -> ModelFiles:
    """Turn a `--model` value into files on disk, downloading once if it is a hub id.

    Setting `cancel` stops a download with DownloadCancelled (never a fallback to random weights)."""
    spec = (spec or "auto").strip()
    if spec == "auto":
        try:
            return _from_hub(DEFAULT_HUB_MODEL, spec, progress, cancel)
        except DownloadCancelled:
            raise  # the user said stop: not "the hub is unreachable"
        except ModelError as exc:
            model = _random(RANDOM_PREFIX + "gpt2", spec)
            if isinstance(exc, HubUnreachable):
                why = f"gpt2 is not cached and the hub cannot be reached ({exc.reason})"
            else:
                why = f"gpt2 could not be had ({str(exc).split(':', 1)[-1].strip()})"
            return _replace_notice(model, f"{why}: using random:gpt2 ({RANDOM_LABEL})")
    if spec.startswith(RANDOM_PREFIX):
        return _random(spec, spec)
    path = Path(spec).expanduser()
    if path.exists() or spec.startswith((".", "/", "~")) or os.sep in spec and not _looks_like_hub_id(spec):
        return _from_folder(path, spec, model_id=str(path))
    return _from_hub(spec, spec, progress, cancel)


def validate_folder(folder: Path) -> dict:
    """Check a folder of HF files; return its config. Raise ModelError saying what is wrong."""
    if not folder.is_dir():
        raise ModelError(f"model folder {folder} does not exist")
    config_path = folder / "config.json"
    weights = folder / WEIGHT_FILE
    if not weights.exists():
        pickled = [name for name in PICKLED_FILES if (folder / name).exists()]
        if pickled:
            raise ModelError(
                f"{folder} holds only a pickled checkpoint ({pickled[0]}); whistle-stop never unpickles "
                "weights. Convert it to model.safetensors (e.g. save_pretrained(..., safe_serialization=True))."
            )
        raise ModelError(f"model folder {folder} has no {WEIGHT_FILE}")
    if not config_path.exists():
        raise ModelError(f"model folder {folder} has no config.json")
    config = _read_config(config_path)
    try:
        check_against_config(weights, config)
    except (CorruptWeights, KeyError, TypeError) as exc:
        raise ModelError(f"model folder {folder} is corrupt or incomplete: {exc}") from exc
    return config


def _read_config(config_path: Path) -> dict:
    """config.json as a GPT-2 config whose sizes make sense, else ModelError saying what is wrong.

    The sizes are checked before the weights are: a weights check shaped by n_layer=10**9 would
    exhaust memory."""
    try:
        config = json.loads(config_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelError(f"{config_path} is not valid JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise ModelError(f"{config_path} is not a JSON object of settings")
    if config.get("model_type") != "gpt2":
        raise ModelError(f"{config_path} describes a {config.get('model_type')!r} model, not GPT-2")
    try:
        GPT2Config.from_dict(config)
    except ValueError as exc:
        raise ModelError(f"{config_path} is not a usable GPT-2 config: {exc}") from exc
    return config


def weights_hash(path: Path) -> str:
    """sha256 of the weights file (first 16 hex digits), cached by path, size and mtime."""
    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    index_path = cache_dir() / "weight-hashes.json"
    try:
        index = json.loads(index_path.read_text())
    except (OSError, ValueError):  # ValueError: not JSON, or not UTF-8
        index = {}
    if not isinstance(index, dict):  # a garbled cache file is rebuilt, never fatal
        index = {}
    if key not in index:
        # here, not at the top: OpenSSL's load (hashlib) would be part of every worker's start, which never hashes
        from ..storage.atomic import atomic_write  # likewise: its tempfile and shutil
        from ..storage.digest import sha256_of

        with path.open("rb") as f:
            index[key] = sha256_of(f)[:16]
        with atomic_write(index_path) as f:
            json.dump(index, f, indent=1)
    return index[key]


def _looks_like_hub_id(spec: str) -> bool:
    return spec.count("/") == 1 and not spec.startswith((".", "/", "~"))


def _replace_notice(model: ModelFiles, notice: str) -> ModelFiles:
    from dataclasses import replace

    return replace(model, notice=notice)


def _from_folder(folder: Path, spec: str, model_id: str, weights: str = "real") -> ModelFiles:
    config = validate_folder(folder)
    return ModelFiles(spec, model_id, folder.resolve(), weights, weights_hash(folder / WEIGHT_FILE), config)


def _random_folder(spec: str) -> tuple[dict, Path]:
    """(config, the cache folder its random weights live in, made or not yet)."""
    name = spec[len(RANDOM_PREFIX) :]
    config_path = CONFIGS_DIR / f"{name}.json"
    if not name or not config_path.exists():
        known = ", ".join(RANDOM_PREFIX + n for n in random_config_names())
        raise ModelError(f"unknown model {spec!r}; bundled random configs: {known}")
    import hashlib

    from .random_weights import FILE_FORMAT, SEED  # only needed here: keeps worker start-up light

    digest = hashlib.sha256(config_path.read_bytes()).hexdigest()[:8]
    folder = f"random-{name}-seed{SEED}-v{FILE_FORMAT}-{digest}"
    return json.loads(config_path.read_text()), cache_dir("models", folder)


def _random(spec: str, asked: str) -> ModelFiles:
    from .random_weights import write_random_model

    config, folder = _random_folder(spec)
    try:
        validate_folder(folder)
    except ModelError:
        write_random_model(config, folder)
        _remove_older_layouts(folder)
    return _from_folder(folder, asked, model_id=spec, weights="random")


def _remove_older_layouts(folder: Path) -> None:
    """The same seeded weights written in an older file layout (`random-<name>-seed<N>-<digest>`, no
    `-v<layout>`): never read again, and gpt2's is ~500 MB of the user's cache."""
    import shutil  # here, not at the top: a worker's start imports this module and never needs it

    from .random_weights import FILE_FORMAT

    digest = folder.name.rsplit("-", 1)[1]
    old = folder.with_name(folder.name.removesuffix(f"-v{FILE_FORMAT}-{digest}") + f"-{digest}")
    if old != folder and old.is_dir():
        shutil.rmtree(old, ignore_errors=True)  # a cache: if a file is held open, it stays until next time


def cached_model(spec: str = "auto") -> ModelFiles | None:
    """The model `spec` names if its files are already here, else None: never downloads, never
    writes random weights (the window's estimate of what a run will build asks this)."""
    spec = (spec or "auto").strip()
    try:
        if spec.startswith(RANDOM_PREFIX):
            _, folder = _random_folder(spec)
            validate_folder(folder)
            return _from_folder(folder, spec, model_id=spec, weights="random")
        path = Path(spec).expanduser()
        if path.exists() or spec.startswith((".", "/", "~")):
            return _from_folder(path, spec, model_id=str(path))
        from .hub import cached_folder

        hub_folder = cached_folder(DEFAULT_HUB_MODEL if spec == "auto" else spec)
        if hub_folder is not None:
            return _from_folder(hub_folder, spec, model_id=DEFAULT_HUB_MODEL if spec == "auto" else spec)
        return cached_model(RANDOM_PREFIX + "gpt2") if spec == "auto" else None
    except (ModelError, OSError):
        return None


def _from_hub(
    repo_id: str, asked: str, progress: ProgressFn | None, cancel: threading.Event | None = None
) -> ModelFiles:
    from .hub import fetch_safetensors_model

    folder = fetch_safetensors_model(repo_id, progress, cancel)
    return _from_folder(folder, asked, model_id=repo_id)
