"""What `main.py backends` and `main.py bench` do (kept apart from argument parsing)."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from . import registry
from .atomic import check_writable_dir
from .errors import UsageError
from .events import BackendEvent, Progress, Ready
from .export import write_results
from .sampling import SamplingParams
from .session import BenchConfig, BenchResult, BenchSession, RunRecorded
from .summary import SUMMARY_HEADERS, summarize_backends, summary_rows
from .worker import Timeouts

EXIT_OK, EXIT_RUN_FAILED = 0, 1


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
                                    "api_key_env": args.remote_api_key_env}
    return BenchConfig(
        model=args.model, backends=backends, prompt=prompt, prompt_tokens=args.prompt_tokens,
        new_tokens=args.new_tokens, sampling=sampling, repeats=args.repeats, warmup=args.warmup,
        threads=args.threads, mode=args.mode, reference=args.reference,
        timeouts=Timeouts(token_s=args.timeout), engine_options=engine_options,
    ).validate()


def bench(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
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
    result = _run_interruptibly(session, model, prompt_ids, err)
    paths = write_results(out, result.runs, result.tokens, result.environment)
    print_summary(result, Console(width=None if sys.stdout.isatty() else 200))
    err.print("wrote " + ", ".join(str(p) for p in paths))
    if result.cancelled:
        err.print("[yellow]cancelled:[/] partial results were written")
    return EXIT_RUN_FAILED if result.failed else EXIT_OK


def _run_interruptibly(session: BenchSession, model, prompt_ids, err: Console) -> BenchResult:
    """Run in a thread so that Ctrl+C cancels cleanly and partial results are still written."""
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(result=session.run(model, prompt_ids)), daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.2)
    except KeyboardInterrupt:
        err.print("[yellow]cancelling...[/]")
        session.cancel()
        thread.join()
    return box["result"]


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
