"""environment.json's `machine_state`: what the machine did across a session's runs (their
records' steal, clock, outside load and load average), the flagged runs, and whether energy was
measured (or why not)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from ..machine.telemetry import OUTSIDE_FLAG_PCT, STEAL_FLAG_PCT
from .records import RunRecord

_READINGS = ("steal_pct", "clock_mhz", "outside_cpu_pct", "load_avg_1m")


def machine_state_section(runs: Sequence[RunRecord]) -> dict:
    """{reading: {median, max}}, the thresholds, the flagged runs and the energy's source or reason."""
    out: dict = {}
    for name in _READINGS:
        values = [v for r in runs if (v := getattr(r, name)) is not None]
        out[name] = {"median": statistics.median(values), "max": max(values)} if values else None
    out["thresholds"] = {"steal_pct": STEAL_FLAG_PCT, "outside_cpu_pct": OUTSIDE_FLAG_PCT}
    out["flagged_runs"] = [{"run_id": r.run_id, "flag": r.machine_flag} for r in runs if r.machine_flag]
    sources = sorted({r.energy_source for r in runs if r.energy_source})
    reasons = sorted({r.energy_absent for r in runs if r.energy_absent})
    out["energy"] = {"measured_by": sources, "absent": reasons}
    return out


def flagged_caveat(runs: Sequence[RunRecord]) -> str:
    """One caveat's text naming the measured runs the machine's state flagged; '' when none was."""
    flagged = [r for r in runs if r.machine_flag and not r.is_warmup]
    if not flagged:
        return ""
    named = "; ".join(f"{r.run_id} ({r.machine_flag})" for r in flagged[:6])
    more = f" and {len(flagged) - 6} more" if len(flagged) > 6 else ""
    return (
        f"the machine was busy during {len(flagged)} measured run(s): {named}{more}. Their timings include "
        "another tenant's or process's load; a quieter machine (or more repeats) settles it"
    )
