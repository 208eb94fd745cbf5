"""`main.py quality`: perplexity per engine, agreement with the reference, speed beside it."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ..errors import UsageError
from ..results.summary import runs_kept, status_cell
from ..results.verdict import verdict
from .charts import charts
from .common import (
    cancelled,
    check_reference,
    config_from_args,
    in_thread,
    out_dir,
    planned_runs,
    print_verdict,
    progress_printer,
    stderr_console,
    stdout_console,
)
from .main import EXIT_OK, EXIT_RUN_FAILED
from .tables import TextTable, print_table

QUALITY_HEADERS = ("backend", "dtype", "perplexity", "Δ vs ref", "tok/s", "agree", "first divergence", "status")


def quality_command(args: argparse.Namespace) -> int:
    from ..report.figures import speed_vs_quality
    from ..runs.quality import QualitySession, QualitySettings, write_quality

    err = stderr_console()
    config = config_from_args(args)
    check_reference(config)
    if args.bench is not None and not Path(args.bench).is_dir():
        raise UsageError(f"--bench {args.bench} is not a folder")
    out = out_dir(args.out)
    settings = QualitySettings(
        text_path=args.text, max_length=args.max_length, stride=args.stride, bench_dir=args.bench
    )
    session = QualitySession(config, settings, on_event=progress_printer(err))
    model, prompt_ids = session.prepare()
    info = session.text_info
    err.print(
        f"model {model.label} · {info['text_tokens']} text tokens in {info['windows']} windows of "
        f"{info['max_length']} (stride {info['stride']}) · reference {session.reference}"
    )
    result = in_thread(lambda: session.run(model, prompt_ids), session, err)
    quality = session.quality
    assert quality is not None  # run() made it
    paths = write_quality(out, result, quality)

    figure = speed_vs_quality([vars(r) for r in quality.rows], model.is_random)
    png = out / f"{figure.name}.png"

    def render() -> list[Path]:
        from ..report.plots import render_png

        return [render_png(figure, png)]

    paths += charts([png], render, err, skip=args.no_plots)
    _print_quality(quality, model, stdout_console())
    quality_rows = [vars(r) for r in quality.rows]
    print_verdict(verdict(result.runs, list(config.backends), session.reference, quality_rows), stdout_console())
    err.print("wrote " + ", ".join(str(p) for p in paths))
    if result.cancelled:
        scored = len([r for r in quality.rows if r.perplexity is not None])
        runs = "runs from --bench" if args.bench is not None else runs_kept(result.runs, planned_runs(config))
        return cancelled(err, f"{runs}, perplexity of {scored} of {len(config.backends)} engines", out)
    failed = result.failed or any(r.status != "ok" for r in session.quality.rows)
    return EXIT_RUN_FAILED if failed else EXIT_OK


def _print_quality(quality, model, console: Console) -> None:
    from ..results.summary import fmt
    from ..runs.quality_rows import ppl_change_text

    rows = []
    for r in quality.rows:
        delta = ppl_change_text(r.backend, r.reference, r.ppl_diff, r.ppl_diff_pct)
        agree = (
            f"{r.agree_tokens}/{r.compared_tokens} ({100 * r.agree_share:.0f}%)" if r.agree_share is not None else "-"
        )
        status = status_cell(str(r.status), r.error)
        rows.append(
            [
                r.backend,
                r.dtype,
                fmt(r.perplexity, 3),
                delta,
                fmt(r.decode_tok_s),
                agree,
                "-" if r.first_divergence is None else str(r.first_divergence),
                status,
            ]
        )
    text, scored = Path(quality.info["text"]).name, quality.info["scored_tokens"]
    title = f"{model.label}: perplexity on {text} ({scored} tokens scored)"
    table = TextTable(title, QUALITY_HEADERS, rows, keys=2, left=("backend", "dtype", "status"), prose=("status",))
    print_table(console, table)
    for d in quality.divergences:
        console.print(
            f"{d.backend} diverges from {d.reference} at generated token {d.position}: "
            f"{d.reference_token['text']!r} vs {d.token['text']!r}"
        )
        for label, top in ((d.reference, d.reference_top), (d.backend, d.top)):
            items = ", ".join(f"{t['text']!r} {t['logit']:.3f}" for t in top) or d.error or "-"
            console.print(f"  top-5 {label}: {escape(items)}")
    if not quality.info.get("greedy", True):
        console.print("agreement is measured for greedy decoding only")
    if model.is_random:
        console.print(f"[bold]{quality.info['note']}[/]")
