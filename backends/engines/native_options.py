"""Settings of the native engines. Stdlib only: the CLI's parser and the GUI's form import it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .options import EngineSettings, option

KV_CHOICES = ("fp32", "int8")
PAGES_CHOICES = ("2mb", "4kb")


@dataclass(frozen=True)
class NativeOptions(EngineSettings):
    TITLE: ClassVar[str] = "own C runtime"
    CLI_TITLE: ClassVar[str] = "the native engines"

    kv: str | None = option(
        None,
        label="KV cache",
        placeholder="fp32 or int8",
        tooltip="fp32 (default): keys and values as computed; int8: each head's row of keys or values in "
        "8 bits with a float32 scale, a quarter of the bytes a decode step reads per position",
        flag="--native-kv",
        help="fp32 (default) or int8: the KV cache's type (int8: a quarter of fp32's bytes per position, "
        "each head's row with its own scale; its agreement is reported like any precision's)",
    )

    pages: str | None = option(
        None,
        label="Weight pages",
        placeholder="2mb or 4kb",
        tooltip="2mb (default): the weights in transparent huge pages, no page walk per 4 KB a decode step "
        "reads; 4kb: ordinary pages, for a machine where huge pages are slow to come at load (some VMs)",
        flag="--native-pages",
        help="2mb (default) or 4kb: the pages the weights lie in (2mb: Linux's transparent huge pages, "
        "steps a few per cent faster; on some VMs the first write of huge pages adds up to 2 s to the load)",
    )

    @property
    def full_precision(self) -> bool:
        return self.kv in (None, "", "fp32")

    def problem(self) -> str:
        if self.kv not in (None, "", *KV_CHOICES):
            return f"--native-kv must be one of {', '.join(KV_CHOICES)}, not {self.kv!r}"
        if self.pages not in (None, "", *PAGES_CHOICES):
            return f"--native-pages must be one of {', '.join(PAGES_CHOICES)}, not {self.pages!r}"
        return ""
