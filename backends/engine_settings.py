"""Typed settings for the engines that need some (a server's URL, an API key...).

An engine with settings names a frozen dataclass deriving from `EngineSettings` in its
registry entry (`options="package.module:Class"`). Each field carries an `OptionMeta`, from
which the CLI builds its flags and the GUI its form, so neither knows any engine by name.
The module holding such a class must import nothing heavy: the CLI's parser imports it.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

REDACTED = "<redacted>"
_META = "whistle_stop_option"
S = TypeVar("S", bound="EngineSettings")


@dataclass(frozen=True)
class OptionMeta:
    """How one setting is shown, asked for and recorded."""

    label: str = ""  # the GUI form's row label; "" keeps the field out of the form
    tooltip: str = ""  # the GUI field's tooltip
    placeholder: str = ""  # the GUI field's placeholder; also the example in the CLI's "needs" message
    flag: str = ""  # the CLI flag, e.g. "--remote-url"; "" means no flag
    help: str = ""  # the CLI flag's help
    cli_default: Any = None  # the flag's default, when the CLI offers one the form does not
    required: bool = False  # the CLI refuses to run the engine without the flag
    secret: bool = False  # a password field, never saved or printed, redacted from every record
    recorded: bool = True  # False: written to records as <redacted> although not secret
    saved_as: str = ""  # the GUI's key for it in the saved parameters (default: the field name)


def option(default: Any = None, **meta: Any) -> Any:
    """A dataclass field with its `OptionMeta`; secrets stay out of repr() (and so out of logs)."""
    info = OptionMeta(**meta)
    return dataclasses.field(default=default, repr=not info.secret, metadata={_META: info})


def meta_of(field: dataclasses.Field) -> OptionMeta:
    return field.metadata.get(_META) or OptionMeta()


@dataclass(frozen=True)
class EngineSettings:
    """Base of every engine's settings. Fields left None are not set (and are not recorded)."""

    TITLE: ClassVar[str] = ""  # the GUI group's title
    CLI_TITLE: ClassVar[str] = ""  # the CLI's argument group title

    @classmethod
    def options(cls) -> Iterator[tuple[dataclasses.Field, OptionMeta]]:
        for field in dataclasses.fields(cls):
            yield field, meta_of(field)

    def problem(self) -> str:
        """Why the engine cannot run with these settings, or "" (the GUI checks it before Run)."""
        return ""

    def hint(self) -> str:
        """A line the GUI shows under the form (e.g. whether an API key will be sent)."""
        return ""

    @property
    def full_precision(self) -> bool:
        """Whether the engine computes at its registry precision with these settings (False: a setting
        lowers it, e.g. an 8-bit KV cache: such a run is no fp32 reference for the others' agreement)."""
        return True

    def with_token_timeout(self: S, token_s: float) -> S:
        """These settings adjusted to the worker's per-token timeout (the CLI's --timeout)."""
        return self

    def record(self) -> dict:
        """What records, environment.json and sweep fingerprints say: secrets redacted, unset fields left out."""
        data = {}
        for field, meta in self.options():
            value = getattr(self, field.name)
            if value is not None:
                data[field.name] = REDACTED if meta.secret or not meta.recorded else value
        return data


def whole_number(text: str) -> int | str | None:
    """A form field's text as a whole number; "" is None and anything else stays as typed, for
    `problem()` to name. ASCII digits only: str.isdigit() also passes "²", which int() refuses."""
    text = text.strip()
    if not text:
        return None
    try:
        return int(text) if text.isascii() and text.isdigit() else text
    except ValueError:  # more digits than int() converts (4300): a paste, not a count
        return text


def options_class(target: str) -> type[EngineSettings] | None:
    """The class named by a registry entry's `options` ("module:Class"), or None for no settings."""
    if not target:
        return None
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def flags_of(settings: EngineSettings | None) -> list[str]:
    """The command-line flags that give `settings` back (for a command started as a subprocess:
    `serve` from the window or a cold-start measurement); secrets have no flag and are not passed."""
    if settings is None:
        return []
    argv: list[str] = []
    for field, meta in settings.options():
        value = getattr(settings, field.name)
        if meta.flag and value not in (None, "") and not meta.secret:
            argv += [meta.flag, str(value)]
    return argv
