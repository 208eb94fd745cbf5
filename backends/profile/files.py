"""A profile on disk: breakdown.csv (one row per engine and phase), top_ops.csv, profile.json.

The traces (<engine>.trace.json, Chrome trace format) are written by the adapters in the
workers; the measured repeats go to runs.csv / tokens.csv / environment.json like a bench's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from ..profilers.categories import ORDER, Category
from ..results.export import write_csv
from ..status import RunStatus
from ..storage.atomic import atomic_write
from .breakdown import EngineProfile, OpShare, PhaseBreakdown

BREAKDOWN_CSV, TOP_OPS_CSV, PROFILE_JSON = "breakdown.csv", "top_ops.csv", "profile.json"
BACKENDS = "backends"  # profile.json's list of entries, named as every file names the engine

BREAKDOWN_COLUMNS = (
    [
        "backend",
        "precision",
        "phase",
        "profiler",
        "ms_per_token",
        "profiled_ms_per_token",
        "overhead_pct",
        "floor_ms",
        "bytes_per_token",
        "probe_gb_s",
        "slower_probe_gb_s",
        "probe_compute_gflops",
        "cpu_ms_per_token",
        "steps",
        "step_ms",
        "ttft_ms",
        "prefill_arithmetic",
        "peak_gops",
        "peak_probed_gops",
        "peak_isa",
        "prefill_flops",
        "prefill_bytes",
        "roofline_ms",
        "ttft_share",
        "ttft_share_at_probe",
    ]
    + [f"{c.key}_ms" for c in ORDER]
    + ["unattributed_share", "status", "error", "trace_file", "note"]
)
TOP_OPS_COLUMNS = ["backend", "phase", "rank", "op", "category", "ms_per_step", "calls_per_step", "share"]


def _num(value, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def breakdown_rows(profiles: Sequence[EngineProfile]) -> list[list[str]]:
    rows = []
    for p in profiles:
        phases: list[PhaseBreakdown | None] = [b for b in (p.prefill, p.decode) if b is not None] or [None]
        for b in phases:
            values = [_num(b.categories.get(c.value)) if b else "" for c in ORDER]
            unattributed = (b.categories.get("unattributed", 0.0) / b.step_ms) if b and b.step_ms else None
            rows.append(
                [
                    p.engine,
                    p.precision,
                    b.phase if b else "",
                    p.profiler,
                    _num(p.ms_per_token),
                    _num(p.profiled_ms_per_token),
                    _num(p.overhead_pct, 2),
                    _num(p.floor_ms),
                    _num(p.bytes_per_token, 0),
                    _num(p.probe_gb_s, 2),
                    _num(p.slower_probe_gb_s, 2),
                    _num(p.probe_compute_gflops, 2),
                    _num(p.cpu_ms_per_token),
                    str(b.steps) if b else "",
                    _num(b.step_ms) if b else "",
                    _num(p.ttft_ms),
                    p.prefill_arithmetic,
                    _num(p.peak_gops, 1),
                    _num(p.peak_probed_gops, 1),
                    p.peak_isa,
                    _num(p.prefill_flops, 0),
                    _num(p.prefill_bytes, 0),
                    _num(p.roofline_ms),
                    _num(p.ttft_share),
                    _num(p.ttft_share_at_probe),
                    *values,
                    _num(unattributed),
                    p.status,
                    p.error,
                    p.trace_file,
                    p.note,
                ]
            )
    return rows


def top_ops_rows(profiles: Sequence[EngineProfile]) -> list[list[str]]:
    return [
        [
            p.engine,
            op.phase,
            str(rank),
            op.name,
            _KEYS.get(op.category, op.category),
            _num(op.ms_per_step),
            _num(op.calls_per_step, 1),
            _num(op.share),
        ]
        for p in profiles
        for rank, op in enumerate(p.top_ops, start=1)
    ]


def write_profile(out: Path, profiles: Sequence[EngineProfile], settings: dict) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, columns, rows in (
        (BREAKDOWN_CSV, BREAKDOWN_COLUMNS, breakdown_rows(profiles)),
        (TOP_OPS_CSV, TOP_OPS_COLUMNS, top_ops_rows(profiles)),
    ):
        write_csv(out / name, columns, (dict(zip(columns, row)) for row in rows))
        written.append(out / name)
    payload = {
        "settings": settings,
        BACKENDS: [
            dict(
                _entry(p),
                floor_ms=p.floor_ms,
                overhead_pct=p.overhead_pct,
                floor_share=p.floor_share,
                floor_share_at_slower=p.floor_share_at_slower,
                roofline_ms=p.roofline_ms,
                ttft_share=p.ttft_share,
                ttft_share_at_probe=p.ttft_share_at_probe,
                single_token_floor_ms=p.single_token_floor_ms,
            )
            for p in profiles
        ],
    }
    with atomic_write(out / PROFILE_JSON, encoding="utf-8") as handle:
        json.dump(payload, handle, indent=1)
    written.append(out / PROFILE_JSON)
    return written


def _entry(p: EngineProfile) -> dict:
    """profile.json's entry for one engine: `backend` as every file names it, the phases' categories by key."""
    fields = asdict(p)
    entry = {"backend": fields.pop("engine"), **fields}
    for phase in ("prefill", "decode"):
        if entry[phase]:
            entry[phase]["categories"] = {_KEYS.get(k, k): ms for k, ms in entry[phase]["categories"].items()}
    for op in entry["top_ops"]:
        op["category"] = _KEYS.get(op["category"], op["category"])
    return entry


def read_profile(folder: Path) -> list[EngineProfile]:
    """The engines' profiles from a folder's profile.json ([] when there is none or it is unreadable)."""
    path = Path(folder) / PROFILE_JSON
    try:
        payload = {RENAMED_TOP.get(k, k): v for k, v in json.loads(path.read_text(encoding="utf-8")).items()}
        return [_engine_profile(raw) for raw in payload[BACKENDS]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # damaged or hand-edited: as if none
        return []


# profile.json's keys -> EngineProfile's attributes where they differ: today's `backend` (every file's
# name) is the attribute `engine`, and the keys before their renames still open (folders written then).
# The probe's figures read as the engine's own rate (runs.csv's bandwidth_gb_s); prefill_ms was the median
# TTFT. An old `engine` key is the attribute's own name.
RENAMED = {
    "backend": "engine",
    "bandwidth_gb_s": "probe_gb_s",
    "slower_bandwidth_gb_s": "slower_probe_gb_s",
    "bandwidth_label": "probe_label",
    "compute_gflops": "probe_compute_gflops",
    "prefill_ms": "ttft_ms",
}
# profile.json's top-level keys before their renames -> today's: the list was `engines` (folders written then).
RENAMED_TOP = {"engines": BACKENDS}
# Categories (the phases' and the top operations') are Category.key in the files (labels before), labels in memory.
_KEYS = {c.value: c.key for c in Category}
_LABELS = {c.key: c.value for c in Category}


def _engine_profile(raw: dict) -> EngineProfile:
    known = set(EngineProfile.__dataclass_fields__)
    fields = {RENAMED.get(k, k): v for k, v in raw.items() if RENAMED.get(k, k) in known}
    for phase in ("decode", "prefill"):
        if fields.get(phase):
            categories = {_LABELS.get(k, k): ms for k, ms in fields[phase]["categories"].items()}
            fields[phase] = PhaseBreakdown(**dict(fields[phase], categories=categories))
    fields["top_ops"] = [
        OpShare(**dict(op, category=_LABELS.get(op.get("category"), op.get("category"))))
        for op in fields.get("top_ops") or []
    ]
    fields["status"] = RunStatus.parse(str(fields.get("status", "ok")))
    return EngineProfile(**fields)
