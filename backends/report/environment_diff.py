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
    "probe_pid",  # a probe's process (each peak names its own): which one, not what it read
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
    "quality.",  # the text, window and stride perplexity is computed over
    "bandwidth.gb_s",  # what the floors and floor shares divide by
    "compute_peaks.peaks.",  # what the prefill rooflines divide by
)
# Readings under a MATTERS prefix that no number divides by: a peak's median pass, and what this
# run's own probe read where the machine's best (`gops`) is kept from a faster phase.
READINGS = (".median_gops", ".probed_gops")


SHOWN_CHARS = 160  # a value longer than this is cut where it is shown, never where it is compared


def flatten(data, prefix: str = "") -> dict[str, str]:
    """{dotted key: the whole value as text}: lists as JSON, None as ""."""
    out: dict[str, str] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}{key}."))
    else:
        text = json.dumps(data, default=str) if isinstance(data, (list, tuple)) else ("" if data is None else str(data))
        out[prefix[:-1]] = text
    return out


def shown(values: list[str]) -> list[str]:
    """The values as the table shows them: cut to SHOWN_CHARS, unless cutting would make two that
    differ read the same (then whole)."""
    cut = [v if len(v) <= SHOWN_CHARS else v[: SHOWN_CHARS - 3] + "..." for v in values]
    return cut if len(set(cut)) == len(set(values)) else values


def environment_differences(environments: list[dict]) -> list[tuple[str, list[str]]]:
    """[(key, [value in each folder, as shown])] for every key whose whole values are not all equal:
    two long lists (thirteen engines) that differ past the shown length still differ."""
    flat = [flatten(env) for env in environments]
    keys = list(dict.fromkeys(k for f in flat for k in f))
    rows = []
    for key in keys:
        if any(key == v or key.endswith("." + v) or key.startswith(v + ".") for v in VOLATILE):
            continue
        values = [f.get(key, "(absent)") for f in flat]
        if len(set(values)) > 1:
            rows.append((key, shown(values)))
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
        matters = key in libraries or (key.startswith(MATTERS) and not key.endswith(READINGS))
        (matter if matters else rest).append((key, values))
    return matter, rest
