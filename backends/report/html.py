"""Reports: results folders (bench, sweep or quality) -> one self-contained HTML page plus PNGs.

The page reads top-down: the verdict (results/verdict.py, as the CLI and the window give it),
then, with two or more folders, the comparison charts and where their environments differ (what
matters to the numbers first, the rest folded), then one section per folder. Every table sits in
its own horizontally scrolling box, so a wide one never overlaps anything, and no table is put in
a column beside another. The page embeds every figure as a base64 PNG and needs no other file or
network. A folder with load runs (load_requests.csv) gets a Load section: throughput against
latency per concurrency level, and the levels' table; one with serve_cold_start.csv, its table.
"""

from __future__ import annotations

import base64
import html
import math
import time
from pathlib import Path

from ..errors import UsageError
from ..profile.table import NOTE as PROFILE_NOTE
from ..profile.table import headers as profile_headers
from ..profile.table import profile_row
from ..results.load import (
    LOAD_HEADERS,
    RATE_HEADERS,
    LoadLevel,
    Slo,
    levels_by_cell,
    load_notes,
    load_rows,
    open_loop_levels,
    rate_notes,
    rate_rows,
    saturation_lines,
)
from ..results.records import runs_of
from ..results.stats import summarize
from ..results.summary import (
    NATIVE_MARK,
    SUMMARY_HEADERS,
    fmt,
    harness_note,
    interval_note,
    sampling_notes,
    speculation_notes,
    status_cell,
    summarize_backends,
    summary_rows,
)
from ..results.verdict import Verdict
from ..runs.quality_rows import ppl_change_text
from ..serve.cold_start import TABLE_HEADERS as SERVE_COLD_START_HEADERS
from ..serve.cold_start import TABLE_NOTE as SERVE_COLD_START_NOTE
from ..serve.cold_start import read_csv as read_serve_cold_start
from ..storage.atomic import atomic_write, check_writable_dir
from . import figures as fg
from .environment_diff import environment_differences, flatten, split_differences  # noqa: F401 (re-exported)
from .folder_data import FolderData, cancelled_note, comparison_figures, folder_figures, folder_verdict, load_folder
from .verdict_html import verdict_html

REPORT_HTML = "report.html"


def _table(headers: list[str], rows: list[list[str]], text: bool = False) -> str:
    """A table in its own scrolling box: as wide as it needs, never over its neighbours. `text`: its
    cells are prose or lists (settings, versions) that wrap within a column instead of widening it."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    kind = ' class="text"' if text else ""
    return f'<div class="scroll"><table{kind}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _verdict_section(verdicts: list[tuple[str, Verdict]]) -> str:
    if not verdicts:
        return ""
    parts = ['<section class="verdict"><h2>Verdict</h2>']
    for label, result in verdicts:
        if len(verdicts) > 1:
            parts.append(f"<h3>{html.escape(label)}</h3>")
        parts.append(verdict_html(result))
    return "".join(parts) + "</section>"


def _differences_html(datas: list[FolderData]) -> str:
    """The differences that matter to the numbers in a table; the others folded below it."""
    diffs = environment_differences([d.environment for d in datas])
    if not diffs:
        return "<p>no differences</p>"
    headers = ["setting"] + [f"{i}: {d.label}" for i, d in enumerate(datas, start=1)]
    matter, rest = split_differences(diffs, {b for d in datas for b in d.backends})
    parts = [
        _table(headers, [[k] + v for k, v in matter], text=True)
        if matter
        else "<p>none that matter to the numbers (CPU, threads, the engines' libraries, model, settings)</p>"
    ]
    if rest:
        folded = _table(headers, [[k] + v for k, v in rest], text=True)
        parts.append(
            f"<details><summary>{len(rest)} other difference{'s' if len(rest) != 1 else ''} "
            f"(OS, other libraries, commit, ...)</summary>{folded}</details>"
        )
    return "".join(parts)


def _img(path: Path, figure: fg.Figure) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    caption = "; ".join(line for line in (figure.note, figure.interval_caption) if line)
    note = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
    return f'<figure><img alt="{html.escape(figure.title)}" src="data:image/png;base64,{data}">{note}</figure>'


def _num(value, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _sweep_table(data: FolderData) -> str:
    measured = fg.measured(data.runs)
    backends = list(dict.fromkeys(r.backend for r in measured))
    cells = sorted({(r.prompt_tokens, r.new_tokens) for r in measured})
    rows = []
    for p, n in cells:
        row = [str(p), str(n)]
        for b in backends:
            mine = [r for r in runs_of(measured, b) if (r.prompt_tokens, r.new_tokens) == (p, n)]
            ttft, speed = summarize([r.ttft_ms for r in mine]), summarize([r.decode_tok_s for r in mine])
            row.append(f"{fmt(ttft.median)} ms · {fmt(speed.median)} tok/s" if mine else "-")
        rows.append(row)
    return _table(["prompt", "new"] + [f"{b}: TTFT · decode" for b in backends], rows)


def _quality_html(data: FolderData) -> str:
    rows = []
    for r in data.quality:
        share = r.get("agree_share")
        agree = "-" if share is None else f"{r.get('agree_tokens')}/{r.get('compared_tokens')} ({100 * share:.0f}%)"
        delta = ppl_change_text(
            str(r.get("backend")), str(r.get("reference")), r.get("ppl_diff"), r.get("ppl_diff_pct")
        )
        status = r.get("status") or ""
        rows.append(
            [
                r.get("backend") or "",
                r.get("dtype") or "",
                _num(r.get("perplexity"), 3),
                delta,
                _num(r.get("decode_tok_s"), 1),
                agree,
                _num(r.get("first_divergence")),
                status_cell(status, r.get("error") or ""),
            ]
        )
    parts = [
        "<h3>Quality</h3>",
        _table(
            [
                "backend",
                "dtype",
                "perplexity",
                "Δ vs reference",
                "tok/s",
                "agree (share)",
                "first divergence",
                "status",
            ],
            rows,
        ),
    ]
    note = (data.environment.get("quality") or {}).get("note")
    if note:
        parts.append(f"<p class=warn>{html.escape(note)}</p>")
    for d in data.divergences:
        tops = []
        for label, key in ((d.get("reference", "reference"), "reference_top"), (d.get("backend", ""), "top")):
            items = ", ".join(f"{t['text']!r} {t['logit']:.3f}" for t in d.get(key) or [])
            tops.append(f"<li>{html.escape(label)}: {html.escape(items or d.get('error') or '-')}</li>")
        parts.append(
            f"<p>{html.escape(d['backend'])} diverges from {html.escape(d['reference'])} at generated token "
            f"{d['position']}: {html.escape(repr(d['reference_token']['text']))} vs "
            f"{html.escape(repr(d['token']['text']))}; top-5 logits on the common prefix:</p>"
            f"<ul>{''.join(tops)}</ul>"
        )
    return "".join(parts)


def _profile_html(data: FolderData) -> str:
    """The profile's decode and prefill tables (the rows `profile` prints) and top operations."""
    parts = []
    for phase in ("decode", "prefill"):
        parts.append(f"<h3>Profile: {phase} step</h3>")
        parts.append(_table(profile_headers(phase), [profile_row(p, phase) for p in data.profiles]))
    parts.append(f"<p class=note>{html.escape(PROFILE_NOTE)}</p>")
    parts.append(_top_ops_html(data.profiles))
    traces = [p.trace_file for p in data.profiles if p.trace_file]
    if traces:
        parts.append(
            "<p class=note>Traces (Chrome trace format; open in https://ui.perfetto.dev): "
            + html.escape(", ".join(Path(t).name for t in traces))
            + "</p>"
        )
    return "".join(parts)


def _top_ops_html(profiles: list) -> str:
    """The most expensive operations: one fold per engine, one table per phase inside it."""
    with_ops = [p for p in profiles if p.top_ops]
    parts = ["<h3>Most expensive operations</h3>"] if with_ops else []
    for p in with_ops:
        tables = []
        for phase in dict.fromkeys(op.phase for op in p.top_ops):
            rows = [
                [op.name, op.category, f"{op.ms_per_step:.3f}", f"{op.calls_per_step:.1f}", f"{100 * op.share:.1f}%"]
                for op in p.top_ops
                if op.phase == phase
            ]
            tables.append(
                f"<h4>{html.escape(phase)}</h4>"
                + _table(["operation", "category", "ms / step", "calls / step", "share"], rows)
            )
        parts.append(f"<details><summary>{html.escape(p.engine)}</summary>{''.join(tables)}</details>")
    return "".join(parts)


def _load_html(levels: list[LoadLevel], slo: Slo, image: str, rate_image: str = "") -> str:
    """The Load section: the figure, then the levels' table per cell (the rows `bench --concurrency` prints);
    with open-loop levels, the rate curve and their table (`bench --request-rate`), saturation lines first."""
    parts = ["<h3>Load</h3>", image]
    cells = levels_by_cell(levels)
    for (prompt, new), cell in cells:
        if len(cells) > 1:
            parts.append(f"<p class=facts>{prompt}-token prompts, {new} new tokens</p>")
        parts.append(_table(LOAD_HEADERS, load_rows(cell)))
    parts += [f"<p class=note>{html.escape(line)}</p>" for line in load_notes(levels, slo)]
    if open_loop_levels(levels):
        parts += ["<h3>Open loop</h3>"] + [f"<p><b>{html.escape(line)}</b></p>" for line in saturation_lines(levels)]
        parts.append(rate_image)
        for (prompt, new), cell in cells:
            if open_loop_levels(cell):
                if len(cells) > 1:
                    parts.append(f"<p class=facts>{prompt}-token prompts, {new} new tokens</p>")
                parts.append(_table(RATE_HEADERS, rate_rows(cell)))
        parts += [f"<p class=note>{html.escape(line)}</p>" for line in rate_notes(levels)[:1]]
    return "".join(parts)


SERVE_COLD_START_WHAT = "Process start to the first completed response (a one-token greedy completion)"


def _serve_cold_start_html(folder: Path) -> str:
    """`bench --serve-cold-start`'s table (serve_cold_start.csv), as the CLI printed it ("" without one)."""
    rows = read_serve_cold_start(folder)
    if not rows:
        return ""
    note = f"{SERVE_COLD_START_WHAT}; {SERVE_COLD_START_NOTE}."
    return (
        "<h3>Serve cold start</h3>"
        + _table(list(SERVE_COLD_START_HEADERS), [row.shown() for row in rows])
        + f"<p class=note>{html.escape(note)}</p>"
    )


def _folder_html(index: int, data: FolderData, images: list[str], load: str = "") -> str:
    env = data.environment
    model, machine, app = env.get("model") or {}, env.get("machine") or {}, env.get("app") or {}
    facts = [
        f"kind: {data.kind}",
        f"model: {model.get('id', '?')} ({model.get('weights', '?')} weights)",
        f"CPU: {machine.get('cpu', '?')}",
        f"threads: {env.get('threads_resolved', '?')}",
        f"git: {app.get('git_commit') or '?'}",
        f"finished: {env.get('finished_at', '?')}",
    ]
    if data.gb_s:
        label = (data.environment.get("bandwidth") or {}).get("label")
        facts.append(f"memory bandwidth: {label}" if label else f"memory bandwidth: {data.gb_s:.1f} GB/s")
    parts = [f"<section><h2>{index}: {html.escape(data.label)}</h2><p class=facts>{html.escape(' · '.join(facts))}</p>"]
    parts += [f"<p class=warn>{html.escape(line)}</p>" for line in [cancelled_note(data)] if line]
    if model.get("weights") == "random":
        parts.append("<p class=warn>random weights - timing only: perplexity and text are meaningless</p>")
    for skipped in (env.get("sweep") or {}).get("skipped", []):
        parts.append(f"<p class=note>skipped: {html.escape(skipped.get('reason', ''))}</p>")
    if data.kind == "sweep":
        parts.append(_sweep_table(data))
    elif data.runs:
        summaries = summarize_backends(data.runs, data.backends, data.tokens)
        parts.append(_table(SUMMARY_HEADERS, summary_rows(summaries, env.get("reference"))))
        parts += [
            f"<p class=note>{html.escape(line)}</p>"
            for line in [interval_note(summaries), harness_note(env.get("harness"))]
            if line
        ]
        parts += [  # a warning only where the timings are not comparable (marked as in the table)
            f"<p class={'warn' if line.startswith(NATIVE_MARK) else 'note'}>{html.escape(line)}</p>"
            for line in sampling_notes(summaries)
        ]
        parts += [f"<p class=note>{html.escape(line)}</p>" for line in speculation_notes(summaries)]
    if data.quality:
        parts.append(_quality_html(data))
    if data.profiles:
        parts.append(_profile_html(data))
    if images:
        parts.append(f'<div class="figures">{"".join(images)}</div>')  # figures only: never a table
    parts.append(load)
    parts.append(_serve_cold_start_html(data.path))
    parts.append("</section>")
    return "".join(parts)


_CSS = """body{font-family:system-ui,sans-serif;margin:1.5em auto;padding:0 1.5em;max-width:1800px;color:#222;
line-height:1.4}section{margin:1.5em 0 2.5em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em}
.scroll{overflow-x:auto;max-width:100%;margin:.6em 0}table{border-collapse:collapse;font-size:.85em;white-space:nowrap}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}
table.text{white-space:normal}table.text td,table.text th{text-align:left;max-width:32em;overflow-wrap:anywhere}
.figures{display:flex;flex-wrap:wrap;gap:1em}figure{margin:0;flex:1 1 560px;max-width:900px}
img{max-width:100%;border:1px solid #eee}.facts{color:#555}.warn{color:#b00;font-weight:bold}.note{color:#666}
.verdict{background:#f5f8fc;border-left:4px solid #358be2;padding:.2em 1.2em .8em}.verdict ul ul{color:#444}
.caveats{font-weight:bold;margin-bottom:.2em}.warn-list{color:#8a1c1c}details{margin:.4em 0}
summary{cursor:pointer;color:#335}figcaption{color:#666;font-size:.8em}"""


def build_report(folders: list[Path], out_dir: Path, baseline: list[Path] | None = None) -> Path:
    """Write report.html and every figure as PNG into out_dir; return the HTML's path. With a
    `baseline`: a section comparing the folders' engines against it (`compare`'s rows)."""
    if not folders:
        raise UsageError("report needs at least one results folder")
    datas = [load_folder(Path(f)) for f in folders]
    out_dir = Path(out_dir)
    try:
        check_writable_dir(out_dir)
    except OSError as exc:
        raise UsageError(f"cannot write to --out {out_dir}: {exc.strerror or exc}") from exc
    from .plots import render_png

    verdicts = [
        (f"{i}: {d.label}", v) for i, d in enumerate(datas, start=1) if (v := folder_verdict(d, datas)) is not None
    ]
    sections = [_verdict_section(verdicts)]
    if baseline:
        from .comparison_html import baseline_section

        sections.append(baseline_section(baseline, folders))
    if len(datas) > 1:
        images = [_img(render_png(f, out_dir / f"{f.name}.png"), f) for f in comparison_figures(datas)]
        sections.append(
            f'<section><h2>Comparison</h2><div class="figures">{"".join(images)}</div>'
            f"<h3>Environment differences</h3>{_differences_html(datas)}</section>"
        )
    columns = []
    for index, data in enumerate(datas, start=1):
        shown, left_out = fg.with_data(folder_figures(data))
        images = [_img(render_png(f, out_dir / f"{index}-{f.name}.png"), f) for f in shown]
        images += [f'<p class="note">{html.escape(line)}</p>' for line in left_out]
        levels, load = data.load_levels, ""
        if levels:
            curve = fg.load_curve(levels)
            rate_image = ""
            if open_loop_levels(levels):
                rates = fg.rate_curve(levels)
                rate_image = _img(render_png(rates, out_dir / f"{index}-{rates.name}.png"), rates)
            load = _load_html(
                levels, data.slo, _img(render_png(curve, out_dir / f"{index}-{curve.name}.png"), curve), rate_image
            )
        columns.append(_folder_html(index, data, images, load))
    sections += columns  # one after another: a folder's wide tables never sit beside another's
    title = "whistle-stop report: " + ", ".join(d.label for d in datas)
    page = (
        f"<!DOCTYPE html><html><head><meta charset=utf-8><title>{html.escape(title)}</title><style>{_CSS}</style>"
        f"</head><body><h1>{html.escape(title)}</h1><p class=facts>generated {time.strftime('%Y-%m-%d %H:%M')} · "
        "values are medians of measured runs; [low–high] and error bars: the median's distribution-free interval "
        "across repeats (order statistics; its confidence level, which depends on the number of runs, "
        "is under each table and figure)"
        f"</p>{''.join(sections)}</body></html>"
    )
    path = out_dir / REPORT_HTML
    with atomic_write(path, encoding="utf-8") as f:
        f.write(page)
    return path
