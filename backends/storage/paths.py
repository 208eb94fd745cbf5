"""Where the app finds its shipped resources and keeps its caches."""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_cache_dir

APP_NAME = "whistle-stop"
RESOURCES = Path(__file__).resolve().parents[2] / "resources"
TOKENIZER_DIR = RESOURCES / "tokenizer"
CONFIGS_DIR = RESOURCES / "configs"
PROMPTS_DIR = RESOURCES / "prompts"


def cache_dir(*parts: str) -> Path:
    """The user cache folder (WHISTLE_STOP_CACHE overrides it, e.g. for tests)."""
    root = Path(os.environ.get("WHISTLE_STOP_CACHE") or user_cache_dir(APP_NAME))
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
