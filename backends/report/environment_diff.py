"""Where the environments of several results folders differ, and which differences matter to the
numbers: the CPU, the threads, the versions of the libraries the runs' engines use, the model and
the settings. The rest (OS build, other libraries, bytecode...) is listed apart, folded."""

from __future__ import annotations

import json
from collections.abc import Iterable

from .. import registry

# Differences that say nothing about the machine or the settings.
VOLATILE = (
    "finished_at",
    "measured_at",
    "cancelled",
    "model.folder",
    "sweep.completed",
    "sweep.pending",
    "machine.hostname",
    "bandwidth.cached",
)
# What the numbers depend on (prefixes of flattened keys); libraries are added per engine.
MATTERS = (
    "machine.cpu",
    "machine.cores_",
    "machine.gpus",
    "threads_resolved",
    "thread_env.",
    "model.",
    "settings.",
    "reference",
    "prompt_tokens",
)


def flatten(data, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}{key}."))
    else:
        text = json.dumps(data, default=str) if isinstance(data, (list, tuple)) else ("" if data is None else str(data))
        out[prefix[:-1]] = text if len(text) <= 160 else text[:157] + "..."
    return out


def environment_differences(environments: list[dict]) -> list[tuple[str, list[str]]]:
    """[(key, [value in each folder])] for every key whose values are not all equal."""
    flat = [flatten(env) for env in environments]
    keys = list(dict.fromkeys(k for f in flat for k in f))
    rows = []
    for key in keys:
        if any(key == v or key.endswith("." + v) or key.startswith(v + ".") for v in VOLATILE):
            continue
        values = [f.get(key, "(absent)") for f in flat]
        if len(set(values)) > 1:
            rows.append((key, values))
    return rows


def engine_libraries(backends: Iterable[str]) -> set[str]:
    """The distributions the named engines run on (their registry rows' `packages`)."""
    out: set[str] = set()
    for name in backends:
        spec = registry.ENGINES.get(name)
        out.update(spec.packages if spec is not None else ())
    return out


def split_differences(
    rows: list[tuple[str, list[str]]], backends: Iterable[str]
) -> tuple[list[tuple[str, list[str]]], list[tuple[str, list[str]]]]:
    """(the differences that matter to the numbers, the others)."""
    libraries = {f"libraries.{name}" for name in engine_libraries(backends)}
    matter: list[tuple[str, list[str]]] = []
    rest: list[tuple[str, list[str]]] = []
    for key, values in rows:
        (matter if key in libraries or key.startswith(MATTERS) else rest).append((key, values))
    return matter, rest
