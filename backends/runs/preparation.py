"""Before any worker starts: which engines, are they installed, which model and prompt."""

from __future__ import annotations

from .. import registry
from ..errors import UsageError
from ..registry import EngineSpec
from ..sources.model_files import ModelFiles, resolve_model
from ..sources.prompts import prompt_ids as build_prompt_ids
from .config import BenchConfig


def engine_specs(config: BenchConfig) -> dict[str, EngineSpec]:
    """The registry's spec of every selected backend (a test installs its own with `registry.use`)."""
    return {name: registry.get(name) for name in config.backends}


def check_available(specs: dict[str, EngineSpec]) -> None:
    """Refuse a built-in engine whose packages are missing, before anything is downloaded."""
    for name, spec in specs.items():
        if spec.target.startswith("whistle_stop.backends."):
            ok, why = registry.available(name)
            if not ok:
                raise UsageError(f"backend {name!r} is unavailable: {why}")


def prepare_bench(
    config: BenchConfig, specs: dict[str, EngineSpec], progress=None, cancel=None
) -> tuple[ModelFiles, list[int]]:
    """Resolve the model and the prompt; raise UsageError for anything that cannot run."""
    check_available(specs)
    model = resolve_model(config.model, progress, cancel)
    ids = build_prompt_ids(config.prompt, config.prompt_tokens)
    if len(ids) + config.new_tokens > model.context:
        raise UsageError(
            f"prompt ({len(ids)} tokens) + new tokens ({config.new_tokens}) exceed the model's "
            f"context of {model.context} tokens"
        )
    return model, ids
