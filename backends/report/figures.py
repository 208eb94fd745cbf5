"""The data of every chart, Qt-free: what a figure is, its limit lines, bars, speed vs quality, the
profile's breakdown, load. The charts against length and position are in sweep_figures.py.

A `Figure` is plain data (series with interval error bars, dashed limit lines); `plots`
draws it into a pyqtgraph PlotItem (the GUI's own widgets) or a PNG (reports). Values are
medians of measured runs with the median's distribution-free interval (order statistics) as
error bar, as in the tables: `err` reaches up to its high end, `err_low` down to its low end;
`interval_caption` gives its true confidence level, which depends on the number of runs.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from ..machine.bandwidth import limit_ms_per_token, on_gpu
from ..results.load import LoadLevel
from ..results.records import RunRecord, runs_of
from ..results.stats import Summary, summarize
from ..results.summary import interval_levels, is_measured


@dataclass
class Series:
    name: str
    x: list[float]
    y: list[float]
    err: list[float] = field(default_factory=list)  # up from y to the interval's high end (0: none)
    labels: list[str] = field(default_factory=list)  # per point (scatter; a line: e.g. c=N), optional
    err_low: list[float] = field(default_factory=list)  # down from y to its low end (empty: as err)
    # per point, x values that horizontal whiskers reach to, inner to outer (e.g. ITL p90, p99); optional
    x_whiskers: list[list[float]] = field(default_factory=list)
    n: list[int] = field(default_factory=list)  # per point with an error bar: the runs behind its interval


@dataclass
class Limit:
    """A dashed line: what the machine allows. Horizontal at `value` (one read of one precision's
    weights), or a curve through (x, y) (a roofline against prompt length, a floor against position)."""

    label: str
    value: float
    x: list[float] = field(default_factory=list)
    y: list[float] = field(default_factory=list)


class Colouring(str, Enum):
    """What a series' colour follows (colours.py)."""

    BY_PLACE = "place"  # engines: their place in the run, so two of one run never share a colour
    BY_KEY = "key"  # categories (kinds of work, a start's parts): their name, the same in every run


@dataclass
class Figure:
    name: str  # file stem, e.g. "ttft_vs_prompt"
    title: str
    x_label: str
    y_label: str
    series: list[Series] = field(default_factory=list)
    limits: list[Limit] = field(default_factory=list)
    kind: str = "line"  # "line", "scatter", "bar" or "stacked" (x = category index, `categories` names them)
    categories: list[str] = field(default_factory=list)
    note: str = ""  # a caption line for reports
    markers: list[Series] = field(default_factory=list)  # short horizontal ticks at (x, y): per-bar limits
    # both axes logarithmic (x marked at powers of two: token counts; y at 1, 2, 5 a decade): a
    # doubling grid, whose short end would sit in one corner of linear axes
    log_axes: bool = False
    empty_reason: str = "no data"  # what an empty figure says in place of its points
    colouring: Colouring = Colouring.BY_PLACE

    @property
    def empty(self) -> bool:
        return not any(s.y for s in self.series)

    @property
    def interval_caption(self) -> str:
        """What the error bars are, at their true level ("" without any): a caption line for reports."""
        levels = interval_levels(n for s in self.series for n in s.n)
        return (
            (
                f"error bars: the median's distribution-free interval across runs (order statistics); its "
                f"confidence level with {levels}"
            )
            if levels
            else ""
        )


def with_data(figures: Iterable[Figure]) -> tuple[list[Figure], list[str]]:
    """The figures with something to draw, and for each one left out a line: its title and why."""
    figures = list(figures)
    shown = [f for f in figures if not f.empty]
    return shown, [f"{f.title}: {f.empty_reason}" for f in figures if f.empty]


def measured(runs: Iterable[RunRecord]) -> list[RunRecord]:
    return [r for r in runs if is_measured(r)]


def _up(summary: Summary) -> float:
    if summary.n < 2 or math.isnan(summary.median_ci_high):
        return 0.0
    return summary.median_ci_high - summary.median


def _down(summary: Summary) -> float:
    if summary.n < 2 or math.isnan(summary.median_ci_low):
        return 0.0
    return summary.median - summary.median_ci_low


def add_point(series: Series, x: float, summary: Summary) -> None:
    """A point at `x`: the median, its interval as error bars, its count."""
    series.x.append(float(x))
    series.y.append(summary.median)
    series.err.append(_up(summary))
    series.err_low.append(_down(summary))
    series.n.append(summary.n)


def engines_of(runs: Sequence[RunRecord]) -> list[str]:
    """The engines of these runs, in their order."""
    return list(dict.fromkeys(r.backend for r in runs))


def weight_bytes_by_backend(runs: Sequence[RunRecord], environment: dict | None = None) -> dict[str, tuple[str, float]]:
    """{backend: (dtype, weight bytes per token)} of the engines on the host: from environment.json's
    "engines" when the sweep recorded it, else recovered from the runs (GB/s was computed as bytes x
    tok/s). An engine on a GPU is left out: its weights stream from the GPU's memory, which the
    host's limit lines do not bound (limit_note names it)."""
    out: dict[str, tuple[str, float]] = {}
    for name, info in ((environment or {}).get("engines") or {}).items():
        if info.get("weight_bytes_per_token"):
            out[name] = (info.get("dtype", ""), float(info["weight_bytes_per_token"]))
    for name in engines_of(runs):
        if name in out:
            continue
        # a speculative engine's GB/s is what target and draft read per decoded token, not its weights
        mine = [r for r in runs_of(runs, name) if not r.multi_token_steps]
        ratios = [r.bandwidth_gb_s * 1e9 / r.decode_tok_s for r in mine if r.bandwidth_gb_s and r.decode_tok_s]
        if ratios:
            dtype = next((r.dtype for r in mine if r.dtype), "")
            out[name] = (dtype, sorted(ratios)[len(ratios) // 2])
    gpu = gpuengines_of(runs)
    return {name: weights for name, weights in out.items() if name not in gpu}


def gpuengines_of(runs: Sequence[RunRecord]) -> set[str]:
    """The engines whose runs ran on a CUDA device."""
    return {r.backend for r in runs if on_gpu(r.device or "")}


def limits(weights: dict[str, tuple[str, float]], gb_s: float | None, unit: str, what: str = "") -> list[Limit]:
    """One dashed line per precision. unit "ms": ms per weight read; "tok/s": reads per second.
    `what`: the probe's label (what the bandwidth is), shown on the first line instead of the bare figure."""
    if not gb_s or gb_s <= 0:
        return []
    by_dtype: dict[str, float] = {}
    for dtype, n_bytes in weights.values():  # the fewest of a precision's engines: the bound of them all
        by_dtype[dtype or "?"] = min(n_bytes, by_dtype.get(dtype or "?", n_bytes))
    out = []
    for index, (dtype, n_bytes) in enumerate(sorted(by_dtype.items(), key=lambda kv: -kv[1])):
        ms = limit_ms_per_token(n_bytes, gb_s)
        value = ms if unit == "ms" else 1e3 / ms
        # The bandwidth is the same for every line: say it once, on the first label, keep the others short.
        where = (f" ({what})" if what else f" at {gb_s:.0f} GB/s") if index == 0 else ""
        out.append(Limit(f"{dtype} limit{where}: {value:.3g} {unit}", value))
    return out


def limit_note(runs: Sequence[RunRecord], environment: dict | None) -> str:
    """What the dashed lines stand on (the probe's own label) and which engines they do not bound:
    those whose weights fit in the last-level cache read them from there, not from DRAM, and those
    that read a quarter of the probe's bytes or less per token, since the caches keep part of a
    working set a few times their size (docs/methodology.md): `profile` probes each engine
    at its own size."""
    bandwidth = (environment or {}).get("bandwidth") or {}
    parts = [f"limit: {bandwidth['label']}"] if bandwidth.get("label") else []
    llc, probe_bytes = bandwidth.get("llc_bytes") or 0, bandwidth.get("bytes") or 0
    weights = weight_bytes_by_backend(runs, environment)
    small = [name for name, (_, n) in weights.items() if llc and n <= llc]
    if small:
        parts.append(
            f"weights of {', '.join(small)} fit in the last-level cache ({llc / 1e6:.0f} MB): "
            "the DRAM limit does not bound them"
        )
    smaller = [name for name, (_, n) in weights.items() if name not in small and probe_bytes and n <= probe_bytes / 4]
    if smaller:
        one = len(smaller) == 1
        parts.append(
            f"{', '.join(smaller)} read{'s' if one else ''} under a quarter of the probe's "
            f"{probe_bytes / 1e6:.0f} MB per token: caches keep part of a smaller working set, so "
            f"{'it' if one else 'they'} can beat this limit (`profile` probes each engine at its own size)"
        )
    gpu = sorted(gpuengines_of(runs))
    if gpu:
        parts.append(
            f"{', '.join(gpu)} run{'s' if len(gpu) == 1 else ''} on a GPU, "
            f"reading {'its' if len(gpu) == 1 else 'their'} "
            "weights from its memory: no host limit line bounds them (`profile` probes a GPU's own)"
        )
    return "; ".join(parts)


def with_limit_note(note: str, runs: Sequence[RunRecord], environment: dict | None) -> str:
    """A figure's caption with what its limit lines stand on and whom they do not bound."""
    extra = limit_note(runs, environment)
    return f"{note} ({extra})" if extra else note


def speed_vs_quality(rows: Sequence[dict], random_weights: bool = False) -> Figure:
    """One point per engine: decode tokens/s (x) against perplexity (y; lower is better)."""
    figure = Figure("speed_vs_quality", "Speed vs quality", "decode tokens/s", "perplexity", kind="scatter")
    for row in rows:
        speed, ppl = row.get("decode_tok_s"), row.get("perplexity")
        if speed is None or ppl is None or not math.isfinite(speed) or not math.isfinite(ppl):
            continue
        figure.series.append(Series(row["backend"], [float(speed)], [float(ppl)], [0.0], [row["backend"]]))
    if random_weights:
        figure.note = "random weights - timing only: perplexity is meaningless here"
    return figure


def bars(title: str, y_label: str, groups: dict[str, dict[str, Summary]], name: str) -> Figure:
    """Grouped bars: {series (e.g. a results folder): {category (an engine): Summary}}."""
    categories = list(dict.fromkeys(c for per in groups.values() for c in per))
    figure = Figure(name, title, "", y_label, kind="bar", categories=categories)
    for label, per in groups.items():
        series = Series(label, [], [])
        for index, category in enumerate(categories):
            s = per.get(category)
            if s is not None and s.n:
                add_point(series, index, s)
        figure.series.append(series)
    return figure


def bench_bars(runs: Sequence[RunRecord], metric: str = "decode_tok_s", label: str = "this run") -> Figure:
    data = measured(runs)
    per = {b: summarize([getattr(r, metric) for r in runs_of(data, b)]) for b in engines_of(data)}
    titles = {"decode_tok_s": ("Decode speed", "decode tokens/s"), "ttft_ms": ("Time to first token", "TTFT (ms)")}
    title, y_label = titles.get(metric, (metric, metric))
    return bars(title, y_label, {label: per}, f"bench_{metric}")


def startup_bars(runs: Sequence[RunRecord]) -> Figure:
    """Stacked bars per engine: its cold start (spawn to first token, artefacts cached) and, on top,
    the one-time build its first run made (export, conversion, compile): neither hides the other."""
    data = [r for r in runs if r.cold_start_s is not None]
    names = engines_of(data)
    first = {b: runs_of(data, b)[0] for b in names}
    figure = Figure(
        "bench_startup",
        "Starting an engine: cold start and one-time build",
        "backend",
        "seconds",
        kind="stacked",
        categories=names,
        note="stacked: cold start (worker spawned to first token, artefacts cached), then the one-time build "
        "the first run had to make (0 once cached)",
        colouring=Colouring.BY_KEY,
    )
    x = [float(i) for i in range(len(names))]
    figure.series.append(Series("cold start", x, [first[b].cold_start_s or 0.0 for b in names]))
    builds = [first[b].build_s or 0.0 for b in names]
    if any(builds):
        figure.series.append(Series("one-time build", x, builds))
    return figure


def profile_breakdown(profiles: Sequence, phase: str = "decode") -> Figure:
    """Stacked bars per engine: each category's ms per step (the profiled run's mean step), with the
    memory floor as a tick on each bar. `profiles`: profile.breakdown.EngineProfile."""
    from ..profilers.categories import ORDER

    shown = [p for p in profiles if getattr(p, phase) is not None]
    figure = Figure(
        f"profile_{phase}",
        f"Where a {phase} step goes",
        "backend",
        "ms per step",
        kind="stacked",
        categories=[p.engine for p in shown],
        note="stacked: the profiled run's mean step by category; tick: "
        + (
            "the memory floor (weights + KV read per token / measured bandwidth)"
            if phase == "decode"
            else "the roofline (the larger of FLOPs / the arithmetic's peak and bytes / bandwidth)"
        ),
        colouring=Colouring.BY_KEY,
    )
    for category in ORDER:
        values = [max(0.0, getattr(p, phase).categories.get(category.value, 0.0)) for p in shown]
        if any(v > 0 for v in values):
            figure.series.append(Series(category.value, list(range(len(shown))), values))
    floors = [(i, p.floor_ms if phase == "decode" else p.roofline_ms) for i, p in enumerate(shown)]
    floors = [(i, f) for i, f in floors if f]
    if floors:
        name = "memory floor" if phase == "decode" else "roofline"
        figure.markers.append(Series(name, [float(i) for i, _ in floors], [f for _, f in floors]))
    return figure


def load_curve(levels: Sequence[LoadLevel]) -> Figure:
    """Throughput against latency under load: per engine (and cell) a curve with one point per
    concurrency level at (median ITL, aggregate output tokens/s), labelled c=N, with whiskers to
    the pooled ITL p90 and p99. A local engine has one point: its concurrency-1 bench runs."""
    figure = Figure(
        "load_curve",
        "Output tokens/s vs median ITL under load",
        "median ITL (ms)",
        "output tokens/s (completed requests)",
        note="one point per concurrency level (c=N); whiskers: pooled ITL p90 (thick) and p99 (thin); "
        "local engines: their concurrency-1 bench runs only",
    )
    cells = sorted({(lv.prompt_tokens, lv.new_tokens) for lv in levels})
    groups: dict[tuple[str, int, int], list[LoadLevel]] = defaultdict(list)
    for level in levels:
        if not level.open_loop:  # open-loop levels: rate_curve
            groups[(level.backend, level.prompt_tokens, level.new_tokens)].append(level)
    for (backend, prompt, new), group in groups.items():
        # Several cells (a sweep with --concurrency): one curve per cell, named by it.
        name = backend if len(cells) == 1 else f"{backend} · {prompt}+{new}"
        series = Series(name, [], [])
        for level in sorted(group, key=lambda lv: lv.concurrency):
            if not (math.isfinite(level.itl_p50_ms) and math.isfinite(level.output_tok_s)):
                continue  # every request failed: no point to place
            series.x.append(level.itl_p50_ms)
            series.y.append(level.output_tok_s)
            series.labels.append(f"c={level.concurrency}")
            series.x_whiskers.append([v for v in (level.itl_p90_ms, level.itl_p99_ms) if math.isfinite(v)])
        figure.series.append(series)
    return figure


def rate_curve(levels: Sequence[LoadLevel]) -> Figure:
    """Latency against offered request rate (`bench --request-rate`): per engine, its median TTFT and
    median ITL at each finite offered rate, with bars up to their p90; a point where the server fell
    behind is labelled "saturated". An infinite rate has no place on the axis: its row is in the table."""
    figure = Figure(
        "rate_curve",
        "Latency vs offered request rate (open loop)",
        "offered rate (req/s)",
        "latency (ms)",
        note="per engine: median TTFT and median ITL (pooled) at each offered rate, bars up to p90; "
        "saturated: the server completed requests under 90% of the rate they were sent at (its queue grows); "
        "an infinite rate is in the table only",
        empty_reason="no open-loop level (bench --request-rate)",
    )
    groups: dict[tuple[str, int, int], list[LoadLevel]] = defaultdict(list)
    for level in levels:
        if level.open_loop and level.request_rate is not None and math.isfinite(level.request_rate):
            groups[(level.backend, level.prompt_tokens, level.new_tokens)].append(level)
    cells = {(prompt, new) for _, prompt, new in groups}
    for (backend, prompt, new), group in groups.items():
        name = backend if len(cells) == 1 else f"{backend} · {prompt}+{new}"
        for metric in ("ttft", "itl"):
            series = Series(f"{name} {metric.upper()} p50", [], [])
            for level in sorted(group, key=lambda lv: lv.request_rate or 0.0):
                p50, p90 = getattr(level, f"{metric}_p50_ms"), getattr(level, f"{metric}_p90_ms")
                if not math.isfinite(p50):
                    continue  # every request failed: no point to place
                series.x.append(float(level.request_rate or 0.0))
                series.y.append(p50)
                series.err.append(max(0.0, p90 - p50) if math.isfinite(p90) else 0.0)
                series.err_low.append(0.0)
                series.labels.append("saturated" if level.saturated else "")
            figure.series.append(series)
    return figure
