"""CLI flags built from the engines' typed settings (see backends/engine_settings.py).

Every run command gets every engine's flags (parsing happens before we know the selected
engines); a settings class shared by several engines gets its flags once.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing

from .. import registry
from ..engine_settings import EngineSettings, options_class
from ..errors import UsageError
from ..worker.timeouts import Timeouts


def settings_classes() -> list[type[EngineSettings]]:
    """Each engine's settings class once, in registry order (imports only light modules)."""
    classes = [options_class(spec.options) for spec in registry.ENGINES.values()]
    return list(dict.fromkeys(cls for cls in classes if cls is not None))


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _value_type(cls: type[EngineSettings], field: dataclasses.Field) -> type:
    """The flag's type from the field's annotation (`float | None` -> float)."""
    hint = typing.get_type_hints(cls)[field.name]
    for kind in (float, int):
        if hint is kind or kind in typing.get_args(hint):
            return kind
    return str


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    for cls in settings_classes():
        group = parser.add_argument_group(cls.CLI_TITLE or cls.__name__)
        for field, meta in cls.options():
            if meta.flag:
                group.add_argument(
                    meta.flag, type=_value_type(cls, field), default=meta.cli_default, help=meta.help or None
                )


def settings_from_args(args: argparse.Namespace, backends: tuple[str, ...]) -> dict[str, EngineSettings]:
    """The typed settings of each selected engine that has some; a missing required flag, or one given
    for no selected engine, is a UsageError."""
    _refuse_unused_flags(args, backends)
    token_s = Timeouts.from_flag(args.timeout).token_s
    settings: dict[str, EngineSettings] = {}
    for name in backends:
        cls = options_class(registry.get(name).options)
        if cls is None:
            continue
        values = {}
        for field, meta in cls.options():
            if not meta.flag:
                continue
            value = getattr(args, _dest(meta.flag), None)
            if meta.required and not value:
                example = f" (e.g. {meta.placeholder})" if meta.placeholder else ""
                raise UsageError(f"the {name} backend needs {meta.flag}{example}")
            if value is not None:
                values[field.name] = value
        settings[name] = cls(**values).with_token_timeout(token_s)
        problem = settings[name].problem()
        if problem:
            raise UsageError(f"{name}: {problem}")
    return settings


def _refuse_unused_flags(args: argparse.Namespace, backends: tuple[str, ...]) -> None:
    """A flag given for engines none of which runs would be dropped without a word (e.g. --native-kv
    with native-spec, whose target and draft keep their own defaults): say so instead."""
    selected = {options_class(registry.get(name).options) for name in backends}
    for cls in settings_classes():
        if cls in selected:
            continue
        for _field, meta in cls.options():
            if meta.flag and getattr(args, _dest(meta.flag), meta.cli_default) != meta.cli_default:
                owners = [spec.name for spec in registry.ENGINES.values() if options_class(spec.options) is cls]
                raise UsageError(f"{meta.flag} is for {', '.join(owners)}; none of them is among the engines to run")
