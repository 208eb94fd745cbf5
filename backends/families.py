"""Facts about engines derived from their registry rows, never from their names: the family an
engine belongs to and the precision group it is ranked in.

A family is the engine module a row points at: `whistle_stop.backends.engines.onnx.engine:...`
and `...engines.onnx.concat_engine:...` are both "onnx", `...engines.ctranslate2_engine:...` is
"ctranslate2". A new engine gets its family from where its class lives, with no table to edit.
"""

from __future__ import annotations

from enum import Enum

from .registry import ENGINES, EngineSpec


class PrecisionGroup(str, Enum):
    """What the verdict ranks engines within, in the order it lists them: bf16 and f16 are both
    16-bit floats (two bytes a weight), so they compete."""

    FP32 = "fp32"
    HALF = "bf16/f16"
    INT8 = "int8"
    INT4 = "int4"
    OTHER = "other"  # a server whose precision is its own (remote), or a record of an unknown engine

    def __str__(self) -> str:
        return self.value


_GROUPS = {
    "fp32": PrecisionGroup.FP32,
    "float32": PrecisionGroup.FP32,
    "f32": PrecisionGroup.FP32,
    "bf16": PrecisionGroup.HALF,
    "bfloat16": PrecisionGroup.HALF,
    "f16": PrecisionGroup.HALF,
    "fp16": PrecisionGroup.HALF,
    "float16": PrecisionGroup.HALF,
    "fp16-dynamic": PrecisionGroup.HALF,
    "int8": PrecisionGroup.INT8,
    "q8_0": PrecisionGroup.INT8,
    "int4": PrecisionGroup.INT4,
    "q4_0": PrecisionGroup.INT4,
}


def family(spec: EngineSpec) -> str:
    """The engine module's name: the first part after `engines.`, without an `_engine` suffix
    (an engine kept elsewhere, e.g. a test's: its module's own name)."""
    parts = spec.target.split(":")[0].split(".")
    name = parts[parts.index("engines") + 1] if "engines" in parts[:-1] else parts[-1]
    return name.removesuffix("_engine")


def family_label(key: str) -> str:
    """A family as the window's section headers write it: `torch_static` -> `torch static`."""
    return key.replace("_", " ")


def family_of(name: str, specs: dict[str, EngineSpec] | None = None) -> str:
    """An engine's family by name ("" for a name neither the registry nor `specs` knows)."""
    spec = (specs or {}).get(name) or ENGINES.get(name)
    return family(spec) if spec is not None else ""


def precision_group(precision: str) -> PrecisionGroup:
    return _GROUPS.get((precision or "").strip().lower(), PrecisionGroup.OTHER)


def engine_precision(name: str, recorded_dtype: str = "", specs: dict[str, EngineSpec] | None = None) -> str:
    """The registry's precision of an engine; a record's own dtype for an engine it does not know."""
    spec = (specs or {}).get(name) or ENGINES.get(name)
    return spec.precision if spec is not None else recorded_dtype


def families(specs: list[EngineSpec] | None = None) -> dict[str, list[str]]:
    """{family: [engine names]} in registry order."""
    out: dict[str, list[str]] = {}
    for spec in specs if specs is not None else ENGINES.values():
        out.setdefault(family(spec), []).append(spec.name)
    return out
