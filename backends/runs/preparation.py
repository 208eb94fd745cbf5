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
    if config.prompt is None:  # before the ids are built: --prompt-tokens 10**9 would exhaust memory
        check_context(config.prompt_tokens, config.new_tokens, model.context)
    ids = build_prompt_ids(config.prompt, config.prompt_tokens)
    check_context(len(ids), config.new_tokens, model.context)
    return model, ids


def check_context(prompt_tokens: int, new_tokens: int, context: int) -> None:
    """UsageError when the prompt and the tokens to generate do not fit the model's context."""
    if prompt_tokens + new_tokens > context:
        raise UsageError(
            f"prompt ({prompt_tokens} tokens) + new tokens ({new_tokens}) exceed the model's "
            f"context of {context} tokens"
        )
