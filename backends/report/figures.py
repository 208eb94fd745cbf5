"""The data of every chart, Qt-free: sweeps, position, speed vs quality, comparisons, load.

A `Figure` is plain data (series with interval error bars, dashed limit lines); `plots`
draws it into a pyqtgraph PlotItem (the GUI's own widgets) or a PNG (reports). Values are
medians of measured runs with the median's distribution-free interval (order statistics) as
error bar, as in the tables: `err` reaches up to its high end, `err_low` down to its low end;
`interval_caption` gives its true confidence level, which depends on the number of runs.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..results.bandwidth import limit_ms_per_token, on_gpu
from ..results.load import LoadLevel
from ..results.records import RunRecord, TokenRecord, decode_bytes_per_token, runs_of
from ..results.roofline_curves import ENVIRONMENT_KEY as ROOFLINE_KEY
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


ONE_TOKEN = "no decode to show: every run made one token (a TTFT grid)"


def why_empty(runs: Sequence[RunRecord]) -> str:
    """What a decode figure with nothing to draw says: why, where the runs tell."""
    return ONE_TOKEN if runs and all(r.new_tokens <= 1 for r in runs) else "no data"


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


def _add(series: Series, x: float, summary: Summary) -> None:
    series.x.append(float(x))
    series.y.append(summary.median)
    series.err.append(_up(summary))
    series.err_low.append(_down(summary))
    series.n.append(summary.n)


def _backends(runs: Sequence[RunRecord]) -> list[str]:
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
    for name in _backends(runs):
        if name in out:
            continue
        # a speculative engine's GB/s is what target and draft read per decoded token, not its weights
        mine = [r for r in runs_of(runs, name) if not r.multi_token_steps]
        ratios = [r.bandwidth_gb_s * 1e9 / r.decode_tok_s for r in mine if r.bandwidth_gb_s and r.decode_tok_s]
        if ratios:
            dtype = next((r.dtype for r in mine if r.dtype), "")
            out[name] = (dtype, sorted(ratios)[len(ratios) // 2])
    gpu = gpu_backends(runs)
    return {name: weights for name, weights in out.items() if name not in gpu}


def gpu_backends(runs: Sequence[RunRecord]) -> set[str]:
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
    gpu = sorted(gpu_backends(runs))
    if gpu:
        parts.append(
            f"{', '.join(gpu)} run{'s' if len(gpu) == 1 else ''} on a GPU, "
            f"reading {'its' if len(gpu) == 1 else 'their'} "
            "weights from its memory: no host limit line bounds them (`profile` probes a GPU's own)"
        )
    return "; ".join(parts)


def _noted(note: str, runs: Sequence[RunRecord], environment: dict | None) -> str:
    extra = limit_note(runs, environment)
    return f"{note} ({extra})" if extra else note


def _by_axis(
    runs: Sequence[RunRecord], axis: str, metric: str, title: str, x_label: str, y_label: str, name: str
) -> Figure:
    figure = Figure(name, title, x_label, y_label)
    for backend in _backends(runs):
        groups: dict[int, list[float]] = defaultdict(list)
        for r in runs_of(runs, backend):
            groups[getattr(r, axis)].append(getattr(r, metric))
        series = Series(backend, [], [])
        for x in sorted(groups):
            s = summarize(groups[x])
            if s.n:
                _add(series, x, s)
        figure.series.append(series)
    return figure


LOG_SPAN = 16  # prompt lengths this many times apart or more are drawn on log axes (the sweep's 1..1,024)


def ttft_vs_prompt(runs: Sequence[RunRecord], gb_s: float | None = None, environment: dict | None = None) -> Figure:
    """TTFT by prompt length (pooled over output lengths: the first token does not depend on them)."""
    data = measured(runs)
    figure = _by_axis(
        data,
        "prompt_tokens",
        "ttft_ms",
        "Time to first token vs prompt length",
        "prompt tokens",
        "TTFT (ms)",
        "ttft_vs_prompt",
    )
    lengths = [x for s in figure.series for x in s.x]
    figure.log_axes = bool(lengths) and min(lengths) > 0 and max(lengths) >= LOG_SPAN * min(lengths)
    scale = "; both axes logarithmic" if figure.log_axes else ""
    figure.limits = roofline_limits(environment)
    if figure.limits:
        figure.note = _noted(
            "dashed: prefill's roofline per arithmetic, the larger of the prompt's FLOPs over the CPU's peak "
            f"for it (the instructions named) and its bytes over the measured bandwidth{scale}",
            runs,
            environment,
        )
        return figure
    figure.limits = limits(
        weight_bytes_by_backend(runs, environment),
        gb_s,
        "ms",
        ((environment or {}).get("bandwidth") or {}).get("label", ""),
    )
    figure.note = _noted(
        f"dashed: one read of the weights at the measured bandwidth (a floor for prefill){scale}", runs, environment
    )
    return figure


def roofline_limits(environment: dict | None) -> list[Limit]:
    """The sweep's prefill rooflines (environment.json's, results/roofline_curves.py) as dashed curves."""
    out = []
    for curve in (environment or {}).get(ROOFLINE_KEY) or []:
        points = curve.get("points") or []
        if not points:
            continue
        held = curve.get("peak_arithmetic") or curve["arithmetic"]
        peak = f"{held} peak {curve.get('peak_gops', 0):.0f} G/s, {curve.get('isa', '')}"
        label = f"{curve['arithmetic']} roofline ({peak})"
        out.append(Limit(label, float(points[-1][1]), [float(p[0]) for p in points], [float(p[1]) for p in points]))
    return out


def decode_vs_output(runs: Sequence[RunRecord], gb_s: float | None = None, environment: dict | None = None) -> Figure:
    """Decode tokens/s by output length, at the shortest prompt (longer prompts shift the curve)."""
    data = measured(runs)
    shortest = min((r.prompt_tokens for r in data), default=0)
    data = [r for r in data if r.prompt_tokens == shortest]
    figure = _by_axis(
        data,
        "new_tokens",
        "decode_tok_s",
        f"Decode speed vs output length ({shortest}-token prompt)",
        "new tokens",
        "decode tokens/s",
        "decode_vs_output",
    )
    lengths = sorted({r.new_tokens for r in data})
    what = ((environment or {}).get("bandwidth") or {}).get("label", "")
    figure.limits = output_floor_curves(environment, runs, gb_s, shortest, lengths, what) or limits(
        weight_bytes_by_backend(runs, environment), gb_s, "tok/s", what
    )
    figure.note = _noted(
        "dashed: the most tokens/s memory bandwidth allows when every weight, and the KV cache as it grows, is "
        "read per token",
        runs,
        environment,
    )
    figure.empty_reason = why_empty(data)
    return figure


def output_floor_curves(
    environment: dict | None,
    runs: Sequence[RunRecord],
    gb_s: float | None,
    prompt: int,
    lengths: list[int],
    what: str = "",
) -> list[Limit]:
    """Decode's most tokens/s against output length n at a `prompt`-token prompt, per precision and
    KV cache size: bandwidth / (weights + KV bytes per position x (prompt + n / 2)), the mean read of
    a run's decode steps (records.decode_bytes_per_token); [] without the engines' KV bytes. `what`:
    the probe's label, on the first line (as `limits`)."""
    if not gb_s or gb_s <= 0 or not lengths:
        return []
    engines = (environment or {}).get("engines") or {}
    kv = {name: float(info.get("kv_bytes_per_position") or 0) for name, info in engines.items()}
    groups: dict[tuple[str, float], float] = {}
    for name, (dtype, n_bytes) in weight_bytes_by_backend(runs, environment).items():
        if name in kv:
            key = (dtype or "?", kv[name])
            groups[key] = min(n_bytes, groups.get(key, n_bytes))
    several = len({dtype for dtype, _ in groups}) < len(groups)
    out = []
    for index, ((dtype, per_position), n_bytes) in enumerate(sorted(groups.items(), key=lambda kv_: -kv_[1])):
        per_token = [decode_bytes_per_token(n_bytes, per_position, prompt, n) for n in lengths]
        values = [1e3 / limit_ms_per_token(n, gb_s) for n in per_token]
        cache = f", KV {per_position / 1e3:.0f} kB/position" if several and per_position else ""
        span = f"{values[0]:.3g} -> {values[-1]:.3g}" if len(values) > 1 else f"{values[0]:.3g}"
        where = (f" ({what})" if what else f" at {gb_s:.0f} GB/s") if index == 0 else ""
        label = f"{dtype} limit{cache}{where}: {span} tok/s"
        curve = len(values) > 1 and values[0] != values[-1]
        out.append(Limit(label, values[-1], [float(n) for n in lengths], values) if curve else Limit(label, values[0]))
    return out


def itl_vs_position(
    runs: Sequence[RunRecord],
    tokens: Sequence[TokenRecord],
    gb_s: float | None = None,
    environment: dict | None = None,
    bins: int = 48,
) -> Figure:
    """ms/token by position in the sequence (prompt + index): the KV cache grows as it goes.

    Positions are binned; each run contributes its median ITL per bin (an engine whose steps make
    several tokens, speculative decoding: its mean time per decoded token in the bin, each step's
    time shared by the tokens it made, since its median gap falls inside a burst; the first step's
    tokens are in the TTFT), and the bin's value is the median across runs with the median's
    interval across them, drawn at the mean position of the bin's tokens."""
    data = {r.run_id: r for r in measured(runs)}
    costs = token_costs(data, tokens)
    positions = {key: data[key[0]].prompt_tokens + key[1] for key in costs}
    figure = Figure("itl_vs_position", "ms/token vs position in the sequence", "position (tokens)", "ms/token")
    figure.note = _noted(
        "dashed: decode's floor per precision, one read of the weights and of the KV cache up to that position "
        "per token at the measured bandwidth",
        runs,
        environment,
    )
    if not positions:
        figure.limits = limits(weight_bytes_by_backend(runs, environment), gb_s, "ms")
        figure.empty_reason = why_empty(list(data.values()))
        return figure
    last = max(positions.values())
    figure.limits = floor_curves(environment, runs, gb_s, last + 1)
    width = max(1, math.ceil((last + 1) / bins))
    per_run: dict[tuple[str, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    where: dict[tuple[str, int], list[int]] = defaultdict(list)
    for (run_id, index), ms in costs.items():
        backend, b = data[run_id].backend, positions[(run_id, index)] // width
        per_run[(backend, b)][run_id].append(ms)
        where[(backend, b)].append(positions[(run_id, index)])
    for backend in _backends(list(data.values())):
        series = Series(backend, [], [])
        for b in sorted(k[1] for k in per_run if k[0] == backend):
            average = {run_id: _mean_or_median(data[run_id], v) for run_id, v in per_run[(backend, b)].items()}
            _add(series, statistics.fmean(where[(backend, b)]), summarize(list(average.values())))
        figure.series.append(series)
    return figure


def token_costs(runs: dict[str, RunRecord], tokens: Sequence[TokenRecord]) -> dict[tuple[str, int], float]:
    """{(run_id, token_index): ms} for each decoded token of these runs: its gap; for an engine whose
    steps make several tokens, its step's time (from the previous step's last token) shared evenly
    by the step's tokens where the tokens say their step (else its gap: a burst's first token holds
    it all), and nothing for the first step's tokens (in the TTFT)."""
    by_run: dict[str, list[TokenRecord]] = defaultdict(list)
    for t in tokens:
        if t.run_id in runs:
            by_run[t.run_id].append(t)
    out: dict[tuple[str, int], float] = {}
    for run_id, mine in by_run.items():
        mine.sort(key=lambda t: t.token_index)
        run = runs[run_id]
        if not run.multi_token_steps:
            out.update({(run_id, t.token_index): t.itl_ms for t in mine if t.itl_ms is not None})
            continue
        first = mine[0].step
        if first is None or any(t.step is None for t in mine):
            skip = run.tokens_generated - run.decoded_tokens if run.decoded_tokens is not None else 1
            out.update({(run_id, t.token_index): t.itl_ms for t in mine[skip:] if t.itl_ms is not None})
            continue
        steps: dict[int, list[TokenRecord]] = defaultdict(list)
        for t in mine:
            steps[t.step].append(t)  # type: ignore[index]
        previous_end = None
        for step, made in steps.items():
            if previous_end is not None and step != first:
                share = (made[0].t_ms - previous_end) / len(made)
                out.update({(run_id, t.token_index): share for t in made})
            previous_end = made[-1].t_ms
    return out


def _mean_or_median(run: RunRecord, values: list[float]) -> float:
    """A run's ms/token over some of its tokens: their median, or their mean where its steps make
    several tokens (a burst's gaps are near zero but for its first)."""
    return statistics.fmean(values) if run.multi_token_steps else statistics.median(values)


def floor_curves(environment: dict | None, runs: Sequence[RunRecord], gb_s: float | None, last: int) -> list[Limit]:
    """Decode's floor against position, per precision and KV cache size: (weights + KV bytes per
    position x position) / bandwidth, a line from 0 to `last`. Without the KV bytes (an older
    folder) the weights' horizontal line."""
    if not gb_s or gb_s <= 0:
        return []
    engines = (environment or {}).get("engines") or {}
    kv = {name: float(info.get("kv_bytes_per_position") or 0) for name, info in engines.items()}
    groups: dict[tuple[str, float], float] = {}
    for name, (dtype, n_bytes) in weight_bytes_by_backend(runs, environment).items():
        key = (dtype or "?", kv.get(name, 0.0))
        groups[key] = min(n_bytes, groups.get(key, n_bytes))
    several = len({dtype for dtype, _ in groups}) < len(groups)  # one precision with two cache sizes
    out = []
    for (dtype, per_position), n_bytes in sorted(groups.items(), key=lambda kv_: -kv_[1]):
        start, end = limit_ms_per_token(n_bytes, gb_s), limit_ms_per_token(n_bytes + per_position * last, gb_s)
        cache = f", KV {per_position / 1e3:.0f} kB/position" if several and per_position else ""
        label = f"{dtype} floor{cache}: {start:.3g} -> {end:.3g} ms at {gb_s:.0f} GB/s"
        out.append(Limit(label, end, [0.0, float(last)], [start, end]) if per_position else Limit(label, start))
    return out


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
                _add(series, index, s)
        figure.series.append(series)
    return figure


def bench_bars(runs: Sequence[RunRecord], metric: str = "decode_tok_s", label: str = "this run") -> Figure:
    data = measured(runs)
    per = {b: summarize([getattr(r, metric) for r in runs_of(data, b)]) for b in _backends(data)}
    titles = {"decode_tok_s": ("Decode speed", "decode tokens/s"), "ttft_ms": ("Time to first token", "TTFT (ms)")}
    title, y_label = titles.get(metric, (metric, metric))
    return bars(title, y_label, {label: per}, f"bench_{metric}")


def startup_bars(runs: Sequence[RunRecord]) -> Figure:
    """Stacked bars per engine: its cold start (spawn to first token, artefacts cached) and, on top,
    the one-time build its first run made (export, conversion, compile): neither hides the other."""
    data = [r for r in runs if r.cold_start_s is not None]
    names = _backends(data)
    first = {b: runs_of(data, b)[0] for b in names}
    figure = Figure(
        "bench_startup",
        "Starting an engine: cold start and one-time build",
        "engine",
        "seconds",
        kind="stacked",
        categories=names,
        note="stacked: cold start (worker spawned to first token, artefacts cached), then the one-time build "
        "the first run had to make (0 once cached)",
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
    from ..profile.categories import ORDER

    shown = [p for p in profiles if getattr(p, phase) is not None]
    figure = Figure(
        f"profile_{phase}",
        f"Where a {phase} step goes",
        "engine",
        "ms per step",
        kind="stacked",
        categories=[p.engine for p in shown],
        note="stacked: the profiled run's mean step by category; tick: "
        + (
            "the memory floor (weights + KV read per token / measured bandwidth)"
            if phase == "decode"
            else "the roofline (the larger of FLOPs / the arithmetic's peak and bytes / bandwidth)"
        ),
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
        "output tokens/s (all requests)",
        note="one point per concurrency level (c=N); whiskers: pooled ITL p90 (thick) and p99 (thin); "
        "local engines: their concurrency-1 bench runs only",
    )
    cells = sorted({(lv.prompt_tokens, lv.new_tokens) for lv in levels})
    groups: dict[tuple[str, int, int], list[LoadLevel]] = defaultdict(list)
    for level in levels:
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
