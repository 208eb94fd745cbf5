"""Two sets of results folders compared: per engine and metric, the ratio NEW/BASE with its
distribution-free interval (shift.py) and a verdict, the settings that must match, the
environment's differences, and each engine's figures as shares of its own machine's limits.

The folders' runs are independent samples: an engine's measured runs of every BASE folder are
pooled against those of every NEW folder. Nothing is paired across folders.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..results.machine_state import flagged_caveat
from ..results.reader import load_results
from ..results.records import RunRecord
from ..results.shift import CONFIDENCE, Shift, hodges_lehmann
from ..results.slow_rounds import slow_rounds
from ..results.summary import is_measured
from ..status import RunStatus
from .environment_diff import environment_differences, split_differences

# (record field, label, unit, word when NEW is higher, word when lower)
METRICS: tuple[tuple[str, str, str, str, str], ...] = (
    ("ms_per_token", "ms/token", "ms", "slower", "faster"),
    ("ttft_ms", "TTFT", "ms", "slower", "faster"),
    ("peak_rss_mb", "peak RSS", "MB", "larger", "smaller"),
    ("cold_start_s", "cold start", "s", "slower", "faster"),
)
PER_WORKER = ("cold_start_s",)  # figures of a worker, not of a run: one sample per folder and engine
# what --fail-if-slower judges: the two latencies a user waits for (decode's, which every view ranks by, and
# the first token's: a prefill regression leaves ms/token alone)
GATE_METRICS = ("ms_per_token", "ttft_ms")
SAME = "not distinguishable"
# A change smaller than this is no change worth a verdict: peak RSS, nearly constant across runs, gives
# intervals a few tenths of a percent wide, and "smaller by 0.1%" would read as news (--min-effect).
MIN_EFFECT_PCT = 1.0
# What must match for a comparison to mean anything: (label, record field or environment key)
_RUN_SETTINGS = ("model", "prompt_tokens", "new_tokens", "decoding", "temperature", "top_k", "top_p", "seed")
_ENV_SETTINGS = (("weights", ("model", "weights_sha256_16")), ("prompt", ("settings", "prompt")))


@dataclass
class Side:
    """One side (BASE or NEW): its folders' measured runs pooled, and their environments."""

    folders: list[Path]
    runs: list[RunRecord]
    environments: list[dict]
    limits: list[dict]  # per run (parallel to `runs`): its folder's environment

    @classmethod
    def load(cls, folders: Sequence[Path]) -> Side:
        runs, envs, limits = [], [], []
        for folder in folders:
            records, _, env = load_results(Path(folder))
            envs.append(env)
            for run in records:
                runs.append(run)
                limits.append(env)
        return cls([Path(f) for f in folders], runs, envs, limits)

    def engines(self) -> list[str]:
        return list(dict.fromkeys(r.backend for r in self.runs if is_measured(r)))

    def values(self, engine: str, metric: str) -> list[float]:
        if metric in PER_WORKER:  # one per worker, on its first run: usually a warm-up
            runs = [r for r in self.runs if r.backend == engine and r.status == RunStatus.OK]
        else:
            runs = [r for r in self.runs if r.backend == engine and is_measured(r)]
        return [v for r in runs if (v := getattr(r, metric)) is not None]

    def settings(self) -> dict[str, set[str]]:
        """{setting: every value the side's folders hold}."""
        out: dict[str, set[str]] = {}
        for run in self.runs:
            if is_measured(run):
                for name in _RUN_SETTINGS:
                    out.setdefault(name, set()).add(str(getattr(run, name)))
        for env in self.environments:
            for label, (section, key) in _ENV_SETTINGS:
                value = (env.get(section) or {}).get(key)
                if value is not None:
                    out.setdefault(label, set()).add(str(value))
            threads = (env.get("settings") or {}).get("threads")
            if threads is not None:
                out.setdefault("threads", set()).add("default" if threads == 0 else str(threads))
        if not any(env.get("settings") for env in self.environments):  # no environment.json: the runs' own
            out["threads"] = {str(r.threads) for r in self.runs if is_measured(r)}
        return out


@dataclass(frozen=True)
class MetricComparison:
    engine: str
    metric: str
    label: str
    unit: str
    base_median: float | None
    new_median: float | None
    shift: Shift | None
    verdict: str

    def ratio_text(self) -> str:
        if self.shift is None:
            return ""
        s = self.shift
        head = f"{s.ratio:.3f}x"
        return head + (f" [{s.low:.3f}-{s.high:.3f}] @{s.level:.1%}" if s.has_interval else " (no interval)")

    def as_dict(self) -> dict:
        s = self.shift
        return {
            "engine": self.engine,
            "metric": self.metric,
            "unit": self.unit,
            "base_median": self.base_median,
            "new_median": self.new_median,
            "ratio": s.ratio if s else None,
            "low": s.low if s and s.has_interval else None,
            "high": s.high if s and s.has_interval else None,
            "level": s.level if s and s.has_interval else None,
            "n_base": s.n_base if s else 0,
            "n_new": s.n_new if s else 0,
            "verdict": self.verdict,
        }


@dataclass(frozen=True)
class Normalised:
    """An engine's figures as shares of its own machine's limits, on each side."""

    engine: str
    base_floor_share: float | None  # decode: the floor's ms / the run's ms per token (1 = at the floor)
    new_floor_share: float | None
    base_roofline_share: float | None  # prefill: the roofline's ms / the run's TTFT
    new_roofline_share: float | None
    absent: str = ""  # why a share is missing

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class Comparison:
    base: Side
    new: Side
    rows: list[MetricComparison]
    only_base: list[str]
    only_new: list[str]
    setting_differences: list[tuple[str, str, str]]  # (setting, BASE's, NEW's)
    environment_differences: list[tuple[str, list[str]]]  # the ones that matter to the numbers
    normalised: list[Normalised]
    caveats: list[str] = field(default_factory=list)
    confidence: float = CONFIDENCE
    min_effect_pct: float = MIN_EFFECT_PCT  # the smallest change that gets a verdict

    def slower(self, pct: float) -> list[MetricComparison]:
        """The engines' ms/token or TTFT rows higher by more than `pct` percent with confidence: the
        interval's low end above 1 + pct/100."""
        bound = 1 + pct / 100
        return [
            r
            for r in self.rows
            if r.metric in GATE_METRICS and r.shift is not None and r.shift.has_interval and r.shift.low > bound
        ]

    def as_dict(self) -> dict:
        return {
            "base": [str(f) for f in self.base.folders],
            "new": [str(f) for f in self.new.folders],
            "method": "Hodges-Lehmann ratio NEW/BASE on log values, Mann-Whitney (Moses) interval",
            "confidence": self.confidence,
            "min_effect_pct": self.min_effect_pct,
            "rows": [r.as_dict() for r in self.rows],
            "only_in_base": self.only_base,
            "only_in_new": self.only_new,
            "setting_differences": [{"setting": s, "base": b, "new": n} for s, b, n in self.setting_differences],
            "environment_differences": [{"key": k, "values": v} for k, v in self.environment_differences],
            "normalised": [n.as_dict() for n in self.normalised],
            "caveats": self.caveats,
        }


def verdict_word(shift: Shift | None, higher: str, lower: str, min_effect_pct: float = MIN_EFFECT_PCT) -> str:
    """higher/lower when the whole interval lies beyond the smallest effect that counts; "within" when it lies
    inside it; otherwise not distinguishable."""
    if shift is None:
        return ""
    if not shift.has_interval:
        return f"{SAME} (too few runs: {shift.n_base} vs {shift.n_new})"
    margin = min_effect_pct / 100
    if shift.low > 1 + margin:
        return higher
    if shift.high < 1 - margin:
        return lower
    if margin > 0 and shift.low >= 1 - margin and shift.high <= 1 + margin:
        return f"same within {min_effect_pct:g}%"
    return SAME


def setting_differences(base: Side, new: Side) -> list[tuple[str, str, str]]:
    """(setting, BASE's values, NEW's values) for each that is not one and the same value on both sides."""
    b, n = base.settings(), new.settings()
    out = []
    for key in dict.fromkeys([*b, *n]):
        left, right = b.get(key, set()), n.get(key, set())
        if len(left | right) > 1:
            out.append((key, ", ".join(sorted(left)) or "(absent)", ", ".join(sorted(right)) or "(absent)"))
    return out


def refusal(differences: list[tuple[str, str, str]]) -> str:
    """The one line that refuses a comparison of runs whose settings differ."""
    shown = "; ".join(f"{key} {b} vs {n}" for key, b, n in differences)
    return f"the runs' settings differ ({shown}): not comparable (--allow-different compares them anyway)"


def compare_folders(
    base_folders: Sequence[Path], new_folders: Sequence[Path], min_effect_pct: float = MIN_EFFECT_PCT
) -> Comparison:
    base, new = Side.load(base_folders), Side.load(new_folders)
    base_engines, new_engines = base.engines(), new.engines()
    common = [e for e in base_engines if e in new_engines]
    rows = []
    for engine in common:
        for metric, label, unit, higher, lower in METRICS:
            x, y = base.values(engine, metric), new.values(engine, metric)
            if not x and not y:
                continue
            shift = hodges_lehmann(x, y)
            rows.append(
                MetricComparison(
                    engine,
                    metric,
                    label,
                    unit,
                    statistics.median(x) if x else None,
                    statistics.median(y) if y else None,
                    shift,
                    verdict_word(shift, higher, lower, min_effect_pct) if shift else "no runs on one side",
                )
            )
    envs = [*base.environments, *new.environments]
    matter, _ = split_differences(environment_differences(envs), common) if len(envs) > 1 else ([], [])
    commit = [(k, v) for k, v in environment_differences(envs) if k == "app.git_commit"] if len(envs) > 1 else []
    comparison = Comparison(
        base,
        new,
        rows,
        [e for e in base_engines if e not in new_engines],
        [e for e in new_engines if e not in base_engines],
        setting_differences(base, new),
        [*commit, *matter],
        [normalised(engine, base, new) for engine in common],
    )
    comparison.caveats = _caveats(comparison)
    comparison.min_effect_pct = min_effect_pct
    return comparison


def _caveats(c: Comparison) -> list[str]:
    out = []
    for name, side in (("BASE", c.base), ("NEW", c.new)):
        busy = flagged_caveat(side.runs)
        if busy:
            out.append(f"{name}: {busy}")
        slow = slow_rounds(side.runs)
        if slow:
            out.append(f"{name}: a slow phase of the machine: " + "; ".join(r.text for r in slow))
    if c.only_base:
        out.append(f"only in BASE (not compared): {', '.join(c.only_base)}")
    if c.only_new:
        out.append(f"only in NEW (not compared): {', '.join(c.only_new)}")
    if c.setting_differences:
        out.append("compared although the settings differ (--allow-different): " + refusal(c.setting_differences))
    cpus = {str((env.get("machine") or {}).get("cpu", "")) for env in [*c.base.environments, *c.new.environments]}
    if len(cpus) > 1:
        out.append(
            "different machines: the raw ratios mix the machine's speed with the engine's; "
            "the shares of each machine's own floor and roofline tell them apart"
        )
    return out


# --- each engine's figures as shares of its machine's limits -------------------------------------------------
def _floor_gb_s(env: dict, device: str) -> float | None:
    section = env.get("gpu_bandwidth" if device.startswith("cuda") else "bandwidth") or {}
    value = section.get("gb_s")
    return float(value) if value else None


def _roofline_ms(env: dict, engine: str, prompt_tokens: int) -> float | None:
    """The engine's prefill roofline at this prompt length (environment.json's curves, interpolated
    linearly between their points); None where the folder has none for it."""
    for curve in env.get("prefill_roofline") or ():
        if engine not in (curve.get("engines") or ()):
            continue
        points = sorted((int(p[0]), float(p[1])) for p in curve.get("points") or ())
        for (n0, ms0), (n1, ms1) in zip(points, points[1:], strict=False):
            if n0 <= prompt_tokens <= n1:
                return ms0 + (ms1 - ms0) * (prompt_tokens - n0) / (n1 - n0) if n1 > n0 else ms0
        if len(points) == 1 and points[0][0] == prompt_tokens:
            return points[0][1]
    return None


def _shares(side: Side, engine: str) -> tuple[float | None, float | None, list[str]]:
    floor, roof, why = [], [], []
    for run, env in zip(side.runs, side.limits, strict=True):
        if run.backend != engine or not is_measured(run):
            continue
        gb_s = _floor_gb_s(env, run.device or "cpu")
        if gb_s and run.bandwidth_gb_s:
            floor.append(run.bandwidth_gb_s / gb_s)  # = the floor's ms / the run's ms per token
        roofline = _roofline_ms(env, engine, run.prompt_tokens)
        if roofline and run.ttft_ms:
            roof.append(roofline / run.ttft_ms)
    if not floor:
        why.append("no bandwidth probe in environment.json or no bytes per token (decode)")
    if not roof:
        why.append("no prefill roofline in environment.json (a sweep or profile probes the peaks)")
    return (statistics.median(floor) if floor else None, statistics.median(roof) if roof else None, why)


def normalised(engine: str, base: Side, new: Side) -> Normalised:
    bf, br, bwhy = _shares(base, engine)
    nf, nr, nwhy = _shares(new, engine)
    absent = "; ".join(dict.fromkeys([*(f"BASE: {w}" for w in bwhy), *(f"NEW: {w}" for w in nwhy)]))
    return Normalised(engine, bf, nf, br, nr, absent)


def share_ratio(base: float | None, new: float | None) -> float | None:
    """NEW's share over BASE's: near 1 when the machine, not the engine, explains a raw ratio."""
    return new / base if base and new and math.isfinite(base) else None
