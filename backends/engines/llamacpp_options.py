"""Settings of the llama.cpp engines. Stdlib only: the CLI's parser and the GUI's form import it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..engine_settings import EngineSettings, option

BUFFER_CHOICES = ("auto", "extra", "plain")


@dataclass(frozen=True)
class LlamaCppOptions(EngineSettings):
    TITLE: ClassVar[str] = "llama.cpp"
    CLI_TITLE: ClassVar[str] = "the llama.cpp engines"

    weight_buffers: str | None = option(
        None,
        label="Weight buffers",
        placeholder="auto, extra or plain",
        tooltip="auto: llama.cpp's repacked/AMX weight buffers where a one-time probe ran them on this CPU; "
        "extra: always; plain: never (as llama.cpp's --no-repack)",
        flag="--llamacpp-weight-buffers",
        help="auto (default): llama.cpp's extra weight buffers (repacked, AMX) where a one-time probe in a child "
        "process ran them on this CPU, else plain; extra: always; plain: never (as --no-repack)",
    )

    def problem(self) -> str:
        if self.weight_buffers not in (None, "", *BUFFER_CHOICES):
            return f"--llamacpp-weight-buffers must be one of {', '.join(BUFFER_CHOICES)}, not {self.weight_buffers!r}"
        return ""
