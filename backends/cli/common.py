"""What the run commands (`bench`, `sweep`, `quality`, `profile`) share: the config from the
arguments, checked folders, progress on stderr, running in a thread that Ctrl+C can cancel, and
what a cancelled command says and returns."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

from rich.console import Console
from rich.markup import escape

from .. import presets, registry
from ..errors import UsageError
from ..results.verdict import Verdict
from ..runs.arrivals import RateSpec, parse_request_rate
from ..runs.bench import BenchConfig, RunRecorded
from ..runs.events import LoadRecorded
from ..sampling import SamplingParams
from ..sources.prompts import example_prompt
from ..storage.atomic import check_writable_dir
from ..worker.events import BackendEvent, Progress, Ready
from ..worker.timeouts import Timeouts
from .engine_flags import settings_from_args
from .main import EXIT_CANCELLED

T = TypeVar("T")


def stderr_console() -> Console:
    """Progress goes to stderr; wide when it is a file or a pipe, so lines are not wrapped."""
    return Console(stderr=True, width=None if sys.stderr.isatty() else 200)


def stdout_console() -> Console:
    return Console(width=None if sys.stdout.isatty() else 200)


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    prompt = args.prompt
    if getattr(args, "prompt_example", None):
        prompt = example_prompt(args.prompt_example)
    if args.prompt_file is not None:
        try:
            prompt = args.prompt_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:  # a binary or non-UTF-8 file is bad input too
            raise UsageError(f"cannot read --prompt-file {args.prompt_file}: {exc}") from exc
    backends = tuple(b.strip() for b in (args.backends or "").split(",") if b.strip())
    for name in backends:
        registry.get(name)  # unknown names fail here, listing the known ones
    backends = engines_with_preset(getattr(args, "preset", None), backends, args.reference)
    auto = args.repeats == "auto"
    if auto and getattr(args, "command", "bench") != "bench":
        raise UsageError("--repeats auto is bench's (its rounds are one cell's); give a number of repeats")
    sampling = SamplingParams(args.decoding, args.temperature, args.top_k, args.top_p, args.seed)
    return BenchConfig(
        model=args.model,
        backends=backends,
        prompt=prompt,
        prompt_tokens=args.prompt_tokens,
        new_tokens=args.new_tokens,
        sampling=sampling,
        repeats=getattr(args, "max_repeats", 40) if auto else args.repeats,
        repeats_auto=auto,
        target_width_pct=getattr(args, "target_width", 5.0),
        max_minutes=getattr(args, "max_minutes", 10.0),
        warmup=args.warmup,
        threads=args.threads,
        mode=getattr(args, "mode", "fair"),
        reference=args.reference,
        timeouts=Timeouts.from_flag(args.timeout),
        engine_options=settings_from_args(args, backends),
        cold=getattr(args, "cold", False),
        concurrency=tuple(getattr(args, "concurrency", None) or ()),
        rate=rate_spec_from_args(args),
        slo_ttft_ms=getattr(args, "slo_ttft_ms", None),
        slo_itl_ms=getattr(args, "slo_itl_ms", None),
    ).validate()


def rate_spec_from_args(args: argparse.Namespace) -> RateSpec:
    """--request-rate, --burstiness and --rate-requests as one RateSpec (checked: one line when wrong)."""
    text = getattr(args, "request_rate", None)
    spec = parse_request_rate(text) if text is not None else RateSpec()
    burstiness = getattr(args, "burstiness", 1.0)
    requests = getattr(args, "rate_requests", 20)
    if text is None and (burstiness != 1.0 or requests != 20):
        raise UsageError("--burstiness and --rate-requests set the arrivals of --request-rate: give it too")
    return dataclasses.replace(spec, burstiness=burstiness, requests=requests).validate()


def engines_with_preset(preset: str | None, backends: tuple[str, ...], reference: str | None) -> tuple[str, ...]:
    """--backends alone (default: the reference engine), or --preset's available engines followed by --backends' others;
    what the preset chose and skipped goes to stderr, one line each."""
    if not preset:
        return backends or (registry.reference(),)
    choice = presets.resolve(preset, reference or "")
    combined = choice.combined(backends)
    if not combined.engines:
        raise UsageError(f"preset {choice.preset}: no engine of it is available here (`main.py backends` says why)")
    err = stderr_console()
    for line in combined.lines():
        err.print(line, markup=False)
    return combined.engines


def print_verdict(verdict: Verdict, console: Console) -> None:
    """The verdict under a command's table: the same lines the window and the report show."""
    console.print()
    for line in verdict.lines():
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def check_reference(config: BenchConfig) -> None:
    if config.reference and config.reference not in config.backends:
        raise UsageError(f"--reference {config.reference!r} is not among --backends")


def out_dir(path) -> Path:
    """--out as a folder we can write to, made if needed; else a UsageError before anything runs."""
    out = Path(path)
    try:
        check_writable_dir(out)
    except OSError as exc:
        raise UsageError(f"cannot write to --out {out}: {exc.strerror or exc}") from exc
    return out


class Cancellable(Protocol):
    def cancel(self) -> None: ...


def in_thread(run: Callable[[], T], session: Cancellable, err: Console) -> T:
    """Run in a thread so that Ctrl+C cancels cleanly and partial results are still written."""
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


def planned_runs(config: BenchConfig, cells: int = 1) -> int:
    """The measured runs a command sets out to record: every engine's repeats in every cell."""
    return cells * len(config.backends) * config.repeats


def cancelled(err: Console, kept: str, out: Path, then: str = "") -> int:
    """Say what a cancelled command kept, and return the exit status of Ctrl+C (130): a script
    chaining `bench && report` must not take a partial result for a complete one."""
    err.print(
        f"[yellow]cancelled:[/] {escape(kept)}; partial results written to {escape(str(out))}"
        + (f"; {escape(then)}" if then else "")
    )
    return EXIT_CANCELLED


def progress_printer(console: Console) -> Callable[[object], None]:
    def on_event(event) -> None:
        if isinstance(event, BackendEvent):
            inner = event.event
            if isinstance(inner, Ready):
                console.print(f"  {event.backend}: loaded (import {inner.import_s:.2f} s, load {inner.load_s:.2f} s)")
            elif isinstance(inner, Progress):
                pct = f" {inner.fraction * 100:.0f}%" if inner.fraction is not None else ""
                console.print(f"  {event.backend}: {inner.message}{pct}")
        elif isinstance(event, LoadRecorded) and event.records:
            first = event.records[0]
            ok = [r for r in event.records if r.status == "ok"]
            tokens = sum(r.tokens_generated for r in ok)  # as the load table: a failed request's are not output
            rate = f", {tokens / first.round_s:.1f} output tok/s" if first.round_s else ""
            errors = [r.error for r in event.records if r.error]
            problem = f" [red]{len(errors)} failed:[/] {escape(errors[0])}" if errors else ""
            console.print(
                f"  {first.run_id}{' (warm-up)' if first.is_warmup else ''}: {len(ok)}/{len(event.records)} "
                f"requests ok{rate}{problem}"
            )
        elif isinstance(event, RunRecorded):
            r = event.record
            if r.status == "ok":
                console.print(
                    f"  {r.run_id}{' (warm-up)' if r.is_warmup else ''}: TTFT {r.ttft_ms or 0:.1f} ms, "
                    f"{r.ms_per_token or 0:.2f} ms/token, {r.decode_tok_s or 0:.1f} tok/s"
                )
            else:
                console.print(f"  [red]{r.run_id}: {r.status}[/] {escape(r.error)}")

    return on_event
