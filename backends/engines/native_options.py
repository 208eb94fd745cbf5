"""Settings of the native engines. Stdlib only: the CLI's parser and the GUI's form import it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..engine_settings import EngineSettings, option

KV_CHOICES = ("fp32", "int8")
PAGES_CHOICES = ("2mb", "4kb")
ISA_CHOICES = ("auto", "amx", "avx512", "avx2", "c")  # machine/isa.py's Isa values (a test holds them equal)


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

    isa: str | None = option(
        None,
        label="Instruction set",
        placeholder="auto, amx, avx512, avx2 or c",
        tooltip="auto (default): the kernels built for the best level this CPU executes; amx: AVX-512 with "
        "AMX tile products in prefill; avx512: AVX-512 without tiles; avx2: AVX2 and FMA; c: the plain-C "
        "paths. A level this CPU cannot execute is refused",
        flag="--native-isa",
        help="auto (default), amx, avx512, avx2 or c: the instruction-set level the native kernels are built "
        "for and run at (auto: the best this CPU executes; a level it lacks is refused)",
    )

    @property
    def level(self) -> str:
        """The asked level's name ("auto" when unset)."""
        return self.isa or "auto"

    @property
    def full_precision(self) -> bool:
        return self.kv in (None, "", "fp32")

    def problem(self) -> str:
        if self.kv not in (None, "", *KV_CHOICES):
            return f"--native-kv must be one of {', '.join(KV_CHOICES)}, not {self.kv!r}"
        if self.pages not in (None, "", *PAGES_CHOICES):
            return f"--native-pages must be one of {', '.join(PAGES_CHOICES)}, not {self.pages!r}"
        if self.isa not in (None, "", *ISA_CHOICES):
            return f"--native-isa must be one of {', '.join(ISA_CHOICES)}, not {self.isa!r}"
        if self.level != "auto":
            from ..machine.isa import IsaUnavailable, resolve  # reads this CPU: only for a forced level

            try:
                resolve(self.level)
            except IsaUnavailable as exc:
                return f"--native-isa {self.level}: {exc}"
        return ""

    def hint(self) -> str:
        from ..machine.isa import executable_levels

        return f"instruction sets this CPU executes: {', '.join(i.value for i in executable_levels())}"
