"""The charts against length and position, Qt-free: TTFT against prompt length with prefill's
roofline, decode speed against output length and ms/token against position with decode's floor
(a sweep's three; the position chart for a bench too). Plain `Figure`s (figures.py)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence

from ..machine.bandwidth import limit_ms_per_token
from ..results.records import RunRecord, TokenRecord, decode_bytes_per_token, runs_of
from ..results.roofline_curves import ENVIRONMENT_KEY as ROOFLINE_KEY
from ..results.stats import summarize
from .figures import (
    Figure,
    Limit,
    Series,
    add_point,
    engines_of,
    limits,
    measured,
    weight_bytes_by_backend,
    with_limit_note,
)

ONE_TOKEN = "no decode to show: every run made one token (a TTFT grid)"


def why_empty(runs: Sequence[RunRecord]) -> str:
    """What a decode figure with nothing to draw says: why, where the runs tell."""
    return ONE_TOKEN if runs and all(r.new_tokens <= 1 for r in runs) else "no data"


def _by_axis(
    runs: Sequence[RunRecord], axis: str, metric: str, title: str, x_label: str, y_label: str, name: str
) -> Figure:
    figure = Figure(name, title, x_label, y_label)
    for backend in engines_of(runs):
        groups: dict[int, list[float]] = defaultdict(list)
        for r in runs_of(runs, backend):
            groups[getattr(r, axis)].append(getattr(r, metric))
        series = Series(backend, [], [])
        for x in sorted(groups):
            s = summarize(groups[x])
            if s.n:
                add_point(series, x, s)
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
    scale += "; each point pools the runs of every output length"
    figure.limits = roofline_limits(environment)
    if figure.limits:
        figure.note = with_limit_note(
            "dashed: prefill's roofline per arithmetic, the larger of the prompt's FLOPs over the peak for it "
            "of the device the engines run on (the CPU's instructions or the GPU's GEMM named) and its bytes over "
            f"that device's measured bandwidth{scale}",
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
    figure.note = with_limit_note(
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
        whose = "" if held == curve["arithmetic"] else f"{held} "  # named where another arithmetic's peak stands in
        peak = f"{whose}peak {curve.get('peak_gops', 0):.0f} G/s, {curve.get('isa', '')}"
        where = " on the GPU" if curve.get("device") == "cuda" else ""
        label = f"{curve['arithmetic']} roofline{where} ({peak})"
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
    figure.limits = output_floor_curves(environment, runs, gb_s, shortest, lengths, what)
    figure.note = with_limit_note(
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
    a run's decode steps (records.decode_bytes_per_token); a flat line where the KV bytes are not
    known (an older folder). `what`: the probe's label, on the first line (as `limits`)."""
    if not gb_s or gb_s <= 0 or not lengths:
        return []
    out = []
    for index, (dtype, per_position, n_bytes, cache) in enumerate(_floor_groups(environment, runs)):
        per_token = [decode_bytes_per_token(n_bytes, per_position, prompt, n) for n in lengths]
        values = [1e3 / limit_ms_per_token(n, gb_s) for n in per_token]
        ends = f"{values[0]:.3g}", f"{values[-1]:.3g}"
        span = f"{ends[0]} -> {ends[1]}" if ends[0] != ends[1] else ends[0]  # not '2.67e+03 -> 2.67e+03'
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
    costed = {run_id for run_id, _ in costs}
    stepless = sorted({r.backend for r in data.values() if r.multi_token_steps and r.run_id not in costed})
    left_out = (
        f"not drawn: {', '.join(stepless)} (several tokens a step, its tokens not saying which)" if stepless else ""
    )
    if not positions:
        figure.limits = limits(weight_bytes_by_backend(runs, environment), gb_s, "ms")
        figure.note = "; ".join(
            n for n in (with_limit_note(floor_note(figure.limits), runs, environment), left_out) if n
        )
        figure.empty_reason = left_out or why_empty(list(data.values()))
        return figure
    last = max(positions.values())
    figure.limits = floor_curves(environment, runs, gb_s, last + 1)
    figure.note = "; ".join(n for n in (with_limit_note(floor_note(figure.limits), runs, environment), left_out) if n)
    width = max(1, math.ceil((last + 1) / bins))
    per_run: dict[tuple[str, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    where: dict[tuple[str, int], list[int]] = defaultdict(list)
    for (run_id, index), ms in costs.items():
        backend, b = data[run_id].backend, positions[(run_id, index)] // width
        per_run[(backend, b)][run_id].append(ms)
        where[(backend, b)].append(positions[(run_id, index)])
    for backend in engines_of(list(data.values())):
        if backend in stepless:
            continue
        series = Series(backend, [], [])
        for b in sorted(k[1] for k in per_run if k[0] == backend):
            average = {run_id: _mean_or_median(data[run_id], v) for run_id, v in per_run[(backend, b)].items()}
            add_point(series, statistics.fmean(where[(backend, b)]), summarize(list(average.values())))
        figure.series.append(series)
    return figure


def floor_note(floors: Sequence[Limit]) -> str:
    """What the position chart's dashed lines are: curves that grow with the KV cache where the folder
    records its bytes per position (a sweep), else flat lines at what a run's mean step read (a bench:
    weights and KV cache from its GB/s over its tok/s)."""
    if any(limit.x for limit in floors):
        return (
            "dashed: decode's floor per precision, one read of the weights and of the KV cache up to that position "
            "per token at the measured bandwidth"
        )
    return (
        "dashed: decode's floor per precision, flat: one read per token of what a run's mean decode step reads "
        "(the weights, and the KV cache at the run's middle position where the folder records no KV bytes per "
        "position) at the measured bandwidth"
    )


def token_costs(runs: dict[str, RunRecord], tokens: Sequence[TokenRecord]) -> dict[tuple[str, int], float]:
    """{(run_id, token_index): ms} for each decoded token of these runs: its gap; for an engine whose
    steps make several tokens, its step's time (from the previous step's last token) shared evenly
    by the step's tokens where the tokens say their step (else its gap: a burst's first token holds
    it all), and nothing for the first step's tokens (in the TTFT). Such an engine's runs whose tokens
    do not say their step (older folders) are left out: their gaps cannot be shared."""
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
            # an older folder's tokens without their step: a burst's first token holds the step's time
            # and the rest read ~0, so a bin of in-burst tokens only would chart a false 0 ms/token
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
    out = []
    for dtype, per_position, n_bytes, cache in _floor_groups(environment, runs):
        start, end = limit_ms_per_token(n_bytes, gb_s), limit_ms_per_token(n_bytes + per_position * last, gb_s)
        span = f"{start:.3g} -> {end:.3g}" if per_position else f"{start:.3g}"
        label = f"{dtype} floor{cache}: {span} ms at {gb_s:.0f} GB/s"
        out.append(Limit(label, end, [0.0, float(last)], [start, end]) if per_position else Limit(label, start))
    return out


def _floor_groups(environment: dict | None, runs: Sequence[RunRecord]) -> list[tuple[str, float, float, str]]:
    """(precision, KV bytes per position, weight bytes, cache label) per precision and KV cache size,
    the most bytes first: each group's fewest weight bytes (the bound of them all); the cache label
    (", KV 20 kB/position") only where one precision has two cache sizes (an 8-bit cache beside float32)."""
    engines = (environment or {}).get("engines") or {}
    kv = {name: float(info.get("kv_bytes_per_position") or 0) for name, info in engines.items()}
    groups: dict[tuple[str, float], float] = {}
    for name, (dtype, n_bytes) in weight_bytes_by_backend(runs, environment).items():
        key = (dtype or "?", kv.get(name, 0.0))
        groups[key] = min(n_bytes, groups.get(key, n_bytes))
    several = len({dtype for dtype, _ in groups}) < len(groups)
    return [
        (dtype, per_position, n_bytes, f", KV {per_position / 1e3:.0f} kB/position" if several and per_position else "")
        for (dtype, per_position), n_bytes in sorted(groups.items(), key=lambda item: -item[1])
    ]


def sweep_figures(
    runs: Sequence[RunRecord], tokens: Sequence[TokenRecord], environment: dict | None, gb_s: float | None = None
) -> list[Figure]:
    """A sweep's three charts (the CLI, the window's Sweep tab and the report draw these), at `gb_s`,
    else at the bandwidth its environment.json measured."""
    gb_s = gb_s or ((environment or {}).get("bandwidth") or {}).get("gb_s")
    return [
        ttft_vs_prompt(runs, gb_s, environment),
        decode_vs_output(runs, gb_s, environment),
        itl_vs_position(runs, tokens, gb_s, environment),
    ]
