"""What `main.py backends`, `bench`, `sweep`, `quality` and `report` do (kept apart from argument parsing)."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .. import registry
from ..storage.atomic import check_writable_dir
from ..errors import UsageError
from ..worker.events import BackendEvent, Progress, Ready
from ..results.export import write_results
from ..sampling import SamplingParams
from ..runs.bench import BenchConfig, BenchResult, BenchSession, RunRecorded
from ..results.summary import SUMMARY_HEADERS, summarize_backends, summary_rows
from ..worker.process import Timeouts

EXIT_OK, EXIT_RUN_FAILED = 0, 1


def _stderr_console() -> Console:
    """Progress goes to stderr; wide when it is a file or a pipe, so lines are not wrapped."""
    return Console(stderr=True, width=None if sys.stderr.isatty() else 200)


def list_backends() -> int:
    table = Table(title="whistle-stop engines")
    for column in ("engine", "precision", "available", "what it is / why not"):
        table.add_column(column)
    for name, spec in registry.ENGINES.items():
        ok, why = registry.available(name)
        table.add_row(name, spec.precision, "yes" if ok else "no", escape(spec.description if ok else why),
                      style=None if ok else "dim")
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    return EXIT_OK


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    prompt = args.prompt
    if args.prompt_file is not None:
        try:
            prompt = args.prompt_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read --prompt-file: {exc}") from exc
    backends = tuple(b.strip() for b in args.backends.split(",") if b.strip())
    for name in backends:
        registry.get(name)  # unknown names fail here, listing the known ones
    if args.timeout <= 0:
        raise UsageError(f"--timeout must be > 0, got {args.timeout}")
    sampling = SamplingParams(args.decoding, args.temperature, args.top_k, args.top_p, args.seed)
    engine_options = {}
    if "remote" in backends:
        if not args.remote_url:
            raise UsageError("the remote backend needs --remote-url (e.g. http://127.0.0.1:8000/v1)")
        engine_options["remote"] = {"url": args.remote_url, "model": args.remote_model or "",
                                    "api_key_env": args.remote_api_key_env,
                                    # the engine's own read timeout fires first, with a clearer message
                                    "timeout_s": max(1.0, args.timeout * 0.9)}
    return BenchConfig(
        model=args.model, backends=backends, prompt=prompt, prompt_tokens=args.prompt_tokens,
        new_tokens=args.new_tokens, sampling=sampling, repeats=args.repeats, warmup=args.warmup,
        threads=args.threads, mode=getattr(args, "mode", "fair"), reference=args.reference,
        timeouts=Timeouts(token_s=args.timeout), engine_options=engine_options,
    ).validate()


def bench(args: argparse.Namespace) -> int:
    err = _stderr_console()
    config = config_from_args(args)
    out = Path(args.out)
    try:
        check_writable_dir(out)
    except OSError as exc:
        raise UsageError(f"cannot write to --out {out}: {exc.strerror or exc}") from exc
    if config.reference and config.reference not in config.backends:
        raise UsageError(f"--reference {config.reference!r} is not among --backends")
    session = BenchSession(config, on_event=_progress_printer(err))
    model, prompt_ids = session.prepare()
    if model.notice:
        err.print(f"[yellow]warning:[/] {model.notice}")
    err.print(f"model {model.label} · prompt {len(prompt_ids)} tokens · {config.new_tokens} new tokens · "
              f"{config.sampling.decoding} · {session.threads} threads · {config.mode} mode")
    _warn_if_busy(session.threads, err)
    result = _run_interruptibly(session, model, prompt_ids, err)
    _add_cached_bandwidth(result.environment, session.threads)
    paths = write_results(out, result.runs, result.tokens, result.environment)
    print_summary(result, Console(width=None if sys.stdout.isatty() else 200))
    err.print("wrote " + ", ".join(str(p) for p in paths))
    if result.cancelled:
        err.print("[yellow]cancelled:[/] partial results were written")
    return EXIT_RUN_FAILED if result.failed else EXIT_OK


def _warn_if_busy(threads: int, err: Console) -> None:
    """Timings on an oversubscribed machine are meaningless for every engine: say so up front."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return
    cores = os.cpu_count() or 1
    if load + threads > cores + 0.5:
        err.print(f"[yellow]warning:[/] load average {load:.1f} on {cores} cores: other processes compete with the "
                  f"engines ({threads} threads each), so timings will be noisy")


def _run_interruptibly(session: BenchSession, model, prompt_ids, err: Console) -> BenchResult:
    """Run in a thread so that Ctrl+C cancels cleanly and partial results are still written."""
    return _in_thread(lambda: session.run(model, prompt_ids), session, err)


def _in_thread(run, session: BenchSession, err: Console):
    box: dict = {}
    finished = threading.Event()

    def target() -> None:
        try:
            box["result"] = run()
        except BaseException as exc:  # re-raised in the main thread (e.g. a UsageError)
            box["error"] = exc
        finally:
            finished.set()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    # Wait on an Event, not Thread.join: a join interrupted by Ctrl+C can later return while the
    # thread still runs (CPython), and the partial results would be lost.
    try:
        while not finished.wait(0.2):
            pass
    except KeyboardInterrupt:
        err.print("[yellow]cancelling...[/]")
        session.cancel()
        while not finished.wait(0.2):
            pass
    if "error" in box:
        raise box["error"]
    return box["result"]


def _add_cached_bandwidth(environment: dict, threads: int) -> None:
    """Record the machine's bandwidth if a sweep or quality run measured it before (never measures here)."""
    from ..results.bandwidth import cached_bandwidth

    cached = cached_bandwidth(threads)
    if cached is not None:
        environment.setdefault("bandwidth", cached.as_dict())


def print_summary(result: BenchResult, console: Console) -> None:
    title = f"{result.model.label}: {len(result.prompt_ids)}-token prompt, {result.config.new_tokens} new tokens"
    table = Table(title=title)
    for header in SUMMARY_HEADERS:
        table.add_column(header, justify="left" if header in ("backend", "dtype", "status") else "right")
    reference = result.environment.get("reference")
    summaries = summarize_backends(result.runs, list(result.config.backends))
    for row in summary_rows(summaries, reference):
        table.add_row(*row)
    console.print(table)
    console.print("medians of measured runs (warm-ups excluded); ±: half the 95% interval of the mean across "
                  "repeats; ms/token = median inter-token latency; GB/s = weight bytes per token x tok/s"
                  + ("; [bold]random weights - timing only[/]" if result.model.is_random else ""))
    if any(s.concurrent for s in summaries):
        console.print("[yellow]race mode: engines ran at the same time, so timings are contended[/]")


def _progress_printer(console: Console):
    def on_event(event) -> None:
        if isinstance(event, BackendEvent):
            inner = event.event
            if isinstance(inner, Ready):
                console.print(f"  {event.backend}: loaded (import {inner.import_s:.2f} s, load {inner.load_s:.2f} s)")
            elif isinstance(inner, Progress):
                pct = f" {inner.fraction * 100:.0f}%" if inner.fraction is not None else ""
                console.print(f"  {event.backend}: {inner.message}{pct}")
        elif isinstance(event, RunRecorded):
            r = event.record
            if r.status == "ok":
                console.print(f"  {r.run_id}{' (warm-up)' if r.is_warmup else ''}: TTFT {r.ttft_ms or 0:.1f} ms, "
                              f"{r.itl_p50_ms or 0:.2f} ms/token, {r.decode_tok_s or 0:.1f} tok/s")
            else:
                console.print(f"  [red]{r.run_id}: {r.status}[/] {escape(r.error)}")
    return on_event


# --- sweep, quality, report ------------------------------------------------------------------
def _out_dir(path) -> Path:
    out = Path(path)
    try:
        check_writable_dir(out)
    except OSError as exc:
        raise UsageError(f"cannot write to --out {out}: {exc.strerror or exc}") from exc
    return out


def sweep_command(args: argparse.Namespace) -> int:
    from ..report.figures import decode_vs_output, itl_vs_position, ttft_vs_prompt
    from ..runs.sweep import CellDone, CellStarted, SweepGrid, SweepNote, SweepSession

    err = _stderr_console()
    first = argparse.Namespace(**{**vars(args), "prompt_tokens": args.prompt_tokens[0], "new_tokens": args.new_tokens[0]})
    config = config_from_args(first)
    if config.reference and config.reference not in config.backends:
        raise UsageError(f"--reference {config.reference!r} is not among --backends")
    grid = SweepGrid(tuple(args.prompt_tokens), tuple(args.new_tokens)).validate()
    out = _out_dir(args.out)
    printer = _progress_printer(err)

    def on_event(event) -> None:
        if isinstance(event, CellStarted):
            err.print(f"[bold]cell {event.index}/{event.total}[/]: prompt {event.prompt_tokens}, new {event.new_tokens}")
        elif isinstance(event, CellDone):
            err.print(f"  cell {event.index}/{event.total} written to {out}")
        elif isinstance(event, SweepNote):
            err.print(f"  {event.message}")
        else:
            printer(event)

    session = SweepSession(config, grid, out, restart=args.restart, on_event=on_event)
    plan = session.prepare()
    if plan.model.notice:
        err.print(f"[yellow]warning:[/] {plan.model.notice}")
    for skipped in plan.skipped:
        err.print(f"[yellow]skipped:[/] prompt {skipped.prompt_tokens}, new {skipped.new_tokens}: {skipped.reason}")
    if plan.completed:
        err.print(f"resuming: {len(plan.completed)} cell(s) already complete in {out}, {len(plan.cells)} to run")
    err.print(f"model {plan.model.label} · {len(plan.cells)} cells · {config.repeats} repeats · "
              f"{config.sampling.decoding} · {session.threads} threads")
    result = _in_thread(lambda: session.run(plan), session, err)
    if not args.no_plots and result.runs:
        from ..report.plots import render_all

        gb_s = (result.environment.get("bandwidth") or {}).get("gb_s")
        figures = [ttft_vs_prompt(result.runs, gb_s, result.environment),
                   decode_vs_output(result.runs, gb_s, result.environment),
                   itl_vs_position(result.runs, result.tokens, gb_s, result.environment)]
        err.print("plots: " + ", ".join(str(p) for p in render_all(figures, out)))
    _print_sweep(result, Console(width=None if sys.stdout.isatty() else 200))
    if result.cancelled:
        err.print("[yellow]cancelled:[/] finished cells are saved; run the same command again to resume")
    return EXIT_RUN_FAILED if result.failed else EXIT_OK


def _print_sweep(result: BenchResult, console: Console) -> None:
    from ..results.stats import summarize
    from ..results.summary import fmt

    measured = [r for r in result.runs if not r.is_warmup and r.status == "ok"]
    backends = list(result.config.backends)
    table = Table(title=f"{result.model.label}: sweep (median TTFT ms · decode tok/s)")
    for header in ["prompt", "new"] + backends:
        table.add_column(header, justify="right")
    for p, n in sorted({(r.prompt_tokens, r.new_tokens) for r in measured}):
        cells = []
        for b in backends:
            mine = [r for r in measured if r.backend == b and (r.prompt_tokens, r.new_tokens) == (p, n)]
            cells.append(f"{fmt(summarize([r.ttft_ms for r in mine]).median)} · "
                         f"{fmt(summarize([r.decode_tok_s for r in mine]).median)}" if mine else "-")
        table.add_row(str(p), str(n), *cells)
    console.print(table)
    if result.model.is_random:
        console.print("[bold]random weights - timing only[/]")


def quality_command(args: argparse.Namespace) -> int:
    from ..report.figures import speed_vs_quality
    from ..runs.quality import QualitySession, QualitySettings, write_quality

    err = _stderr_console()
    config = config_from_args(args)
    if config.reference and config.reference not in config.backends:
        raise UsageError(f"--reference {config.reference!r} is not among --backends")
    if args.bench is not None and not Path(args.bench).is_dir():
        raise UsageError(f"--bench {args.bench} is not a folder")
    out = _out_dir(args.out)
    settings = QualitySettings(text_path=args.text, max_length=args.max_length, stride=args.stride, bench_dir=args.bench)
    session = QualitySession(config, settings, on_event=_progress_printer(err))
    model, prompt_ids = session.prepare()
    info = session.text_info
    err.print(f"model {model.label} · {info['text_tokens']} text tokens in {info['windows']} windows of "
              f"{info['max_length']} (stride {info['stride']}) · reference {session.reference}")
    result = _in_thread(lambda: session.run(model, prompt_ids), session, err)
    _add_cached_bandwidth(result.environment, session.threads)
    paths = write_quality(out, result, session.quality)
    from ..report.plots import render_png

    figure = speed_vs_quality([vars(r) for r in session.quality.rows], model.is_random)
    paths.append(render_png(figure, out / f"{figure.name}.png"))
    _print_quality(session.quality, model, Console(width=None if sys.stdout.isatty() else 200))
    err.print("wrote " + ", ".join(str(p) for p in paths))
    failed = result.failed or any(r.status != "ok" for r in session.quality.rows)
    return EXIT_RUN_FAILED if failed else EXIT_OK


def _print_quality(quality, model, console: Console) -> None:
    from ..results.summary import fmt

    table = Table(title=f"{model.label}: perplexity on {Path(quality.info['text']).name} "
                        f"({quality.info['scored_tokens']} tokens scored)")
    for header in ("backend", "dtype", "perplexity", "Δ vs ref", "tok/s", "agree", "first divergence", "status"):
        table.add_column(header, justify="left" if header in ("backend", "dtype", "status") else "right")
    for r in quality.rows:
        delta = "reference" if r.backend == r.reference else (f"{r.ppl_diff:+.3f} ({r.ppl_diff_pct:+.2f}%)"
                                                              if r.ppl_diff is not None else "-")
        agree = f"{r.agree_tokens}/{r.compared_tokens} ({100 * r.agree_share:.0f}%)" if r.agree_share is not None else "-"
        status = r.status if r.status == "ok" else f"{r.status}: {r.error}"[:80]
        table.add_row(r.backend, r.dtype, fmt(r.perplexity, 3), delta, fmt(r.decode_tok_s),
                      agree, "-" if r.first_divergence is None else str(r.first_divergence), escape(status))
    console.print(table)
    for d in quality.divergences:
        console.print(f"{d.backend} diverges from {d.reference} at generated token {d.position}: "
                      f"{d.reference_token['text']!r} vs {d.token['text']!r}")
        for label, top in ((d.reference, d.reference_top), (d.backend, d.top)):
            items = ", ".join(f"{t['text']!r} {t['logit']:.3f}" for t in top) or d.error or "-"
            console.print(f"  top-5 {label}: {escape(items)}")
    if not quality.info.get("greedy", True):
        console.print("agreement is measured for greedy decoding only")
    if model.is_random:
        console.print(f"[bold]{quality.info['note']}[/]")


def report_command(args: argparse.Namespace) -> int:
    from ..report.html import build_report

    for folder in args.folders:
        if not Path(folder).is_dir():
            raise UsageError(f"{folder} is not a folder")
    path = build_report(list(args.folders), args.out)
    _stderr_console().print(f"wrote {path} and its PNG figures")
    return EXIT_OK
