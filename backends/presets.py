"""Named sets of engines (`bench --preset NAME`, the window's preset selector), resolved to the
engines available here, with the ones left out named and why.

The picks are declared facts, kept in this one module: the founding write-ups' comparison, each
family's best engine and each precision's best. Every preset starts with the reference engine
(where it is available), so its speed-ups have something to be measured against.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from . import registry
from .errors import UsageError
from .families import families
from .runs.config import BenchConfig


class Preset(str, Enum):
    FOUNDING = "founding"
    BEST_OF_FAMILY = "best-of-family"
    ONE_PER_PRECISION = "one-per-precision"
    ALL_AVAILABLE = "all-available"

    def __str__(self) -> str:
        return self.value


PRESET_HELP = {
    Preset.FOUNDING: "the founding write-ups' comparison: transformers, nanoGPT, ONNX (concatenating, in place, "
    "int8), float16 dynamic, TensorFlow, torch.compile, numpy, vLLM",
    Preset.BEST_OF_FAMILY: "the best engine of each family (its fastest at 8 bits or more)",
    Preset.ONE_PER_PRECISION: "the fastest engine of each precision: fp32, bf16, int8, int4",
    Preset.ALL_AVAILABLE: "every engine that can run here",
}

# The founding write-ups compared these, in this order (vLLM where it runs).
FOUNDING = (
    "hf",
    "nanogpt",
    "onnx-concat",
    "onnx",
    "onnx-int8",
    "hf-fp16-dynamic",
    "tf",
    "torch-static-compile",
    "numpy",
    "vllm",
)

# Each family's best engine, in order of preference: its fastest at 8 bits or more in the
# all-engines run of docs/measurements/archive-2026-11.md (a CUDA variant first: it is the faster
# where a GPU exists; the next one stands in where it is not available). hf is the reference.
FAMILY_BEST: dict[str, tuple[str, ...]] = {
    "hf": ("hf",),
    "torch_static": ("torch-static-cuda-graphs", "torch-static-compile", "torch-static-bf16", "torch-static"),
    "nanogpt": ("nanogpt",),
    "onnx": ("onnx-int8", "onnx"),
    "numpy_runtime": ("numpy",),
    "native": ("native-int8", "native"),
    "llamacpp": ("llamacpp-q8_0", "llamacpp"),
    "ctranslate2": ("ctranslate2-int8", "ctranslate2"),
    "openvino": ("openvino-int8", "openvino"),
    "tensorflow": ("tf-xla", "tf"),
    "ortgenai": ("ortgenai-int8", "ortgenai"),
    "openvino_genai": ("openvino-genai-int8", "openvino-genai"),
    "vllm": ("vllm",),
}

# Each precision's fastest engines in that run, in order of preference.
PRECISION_BEST: dict[str, tuple[str, ...]] = {
    "fp32": ("native", "onnx", "torch-static"),
    "bf16": ("native-bf16", "torch-static-compile", "llamacpp-bf16", "torch-static-bf16"),
    "int8": ("native-int8", "onnx-int8", "llamacpp-q8_0"),
    "int4": ("native-int4", "onnx-int4", "llamacpp-q4_0", "ortgenai-int4"),
}

# Families no preset picks: they are not a way to run GPT-2 a user would choose between.
FAMILY_LEFT_OUT: dict[str, str] = {
    "null": "the harness's own cost (bench times it after the engines anyway)",
    "remote": "needs the URL of a server you run (--remote-url)",
}


@dataclass(frozen=True)
class Skip:
    name: str
    why: str
    instead: str = ""  # the engine that stands in for it, if any

    def line(self) -> str:
        return f"skipped {self.name}: {self.why}" + (f" ({self.instead} instead)" if self.instead else "")


@dataclass(frozen=True)
class PresetChoice:
    preset: str
    engines: tuple[str, ...]  # the preset's available engines, then those `combined` added
    skipped: tuple[Skip, ...] = ()
    added: tuple[str, ...] = ()  # from --backends (or ticked beside the preset)

    def lines(self) -> list[str]:
        """What the preset chose (and what --backends added), then one line per engine it left
        out and why."""
        own = [n for n in self.engines if n not in self.added]
        head = f"preset {self.preset}: {', '.join(own) or 'no engine available here'}"
        if self.added:
            head += f" (+ {', '.join(self.added)} from --backends)"
        return [head] + [skip.line() for skip in self.skipped]

    def combined(self, extra: tuple[str, ...]) -> PresetChoice:
        """The preset's engines followed by `extra` (from --backends) not already among them."""
        added = tuple(name for name in dict.fromkeys(extra) if name not in self.engines)
        return PresetChoice(self.preset, self.engines + added, self.skipped, self.added + added)


def preset_names() -> list[str]:
    return [p.value for p in Preset]


def parse(name: str) -> Preset:
    try:
        return Preset(name.strip())
    except ValueError:
        raise UsageError(f"unknown preset {name!r}; presets: {', '.join(preset_names())}") from None


def resolve(name: str | Preset, reference: str = "") -> PresetChoice:
    """The preset's engines that are available here (registry.available), the reference first, and
    the ones it wanted but cannot run, each with why."""
    preset = parse(name) if isinstance(name, str) else name
    reference = reference or default_reference()
    wanted: list[tuple[str, ...]]  # each a list of candidates: the first available one is taken
    if preset == Preset.FOUNDING:
        wanted = [(n,) for n in FOUNDING]
    elif preset == Preset.BEST_OF_FAMILY:
        wanted = [FAMILY_BEST[key] for key in families() if key in FAMILY_BEST]
    elif preset == Preset.ONE_PER_PRECISION:
        wanted = list(PRECISION_BEST.values())
    else:
        wanted = [(n,) for key, names in families().items() if key not in FAMILY_LEFT_OUT for n in names]
    if reference in registry.ENGINES and not any(reference in group for group in wanted):
        wanted.insert(0, (reference,))
    engines: list[str] = []
    skipped: list[Skip] = []
    for candidates in wanted:
        missing: list[tuple[str, str]] = []
        for name in candidates:
            ok, why = registry.available(name)
            if ok:
                engines.append(name)
                break
            missing.append((name, why))
        else:
            name = ""
        skipped += [Skip(n, why, name or "") for n, why in missing]
    if reference in engines:  # first: the table and the verdict read from it
        engines.remove(reference)
        engines.insert(0, reference)
    return PresetChoice(preset.value, tuple(dict.fromkeys(engines)), tuple(skipped))


def default_reference() -> str:
    """The engine a run compares the others with when none is named (BenchConfig's default)."""
    return BenchConfig().reference_backend
