"""The command line's arguments: one subcommand each for `gui`, `backends`, `bench`, `sweep`, `quality`, `profile`,
`report`, `serve`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn

from .. import __version__, registry
from ..errors import UsageError
from ..presets import preset_names
from ..report.comparison import MIN_EFFECT_PCT
from ..sources.prompts import example_key, example_prompts
from .engine_flags import add_engine_flags


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, like our own usage errors
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        description="whistle-stop: which way of running GPT-2 is fastest here, and what the speed costs in quality."
    )
    parser.add_argument("--version", action="version", version=f"whistle-stop {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    sub.add_parser("gui", help="open the desktop app (the default)")
    sub.add_parser("backends", help="list every engine, available or not, and why not")
    bench = sub.add_parser("bench", help="benchmark engines headless and write CSV/JSON records")
    add_run_arguments(bench)
    bench.add_argument(
        "--out",
        default="results",
        help="folder for tokens.csv, runs.csv, summary.csv, environment.json (default: %(default)s)",
    )
    bench.add_argument(
        "--no-harness-calibration",
        action="store_true",
        help="skip timing the null engine after the bench (the harness's own cost per token)",
    )
    bench.add_argument(
        "--serve-cold-start",
        action="store_true",
        help="after the bench, time process start to first completed response of `serve` with each "
        "engine, and of the engines' own servers (llama.cpp's, vLLM's) where installed: "
        "serve_cold_start.csv",
    )
    sweep = sub.add_parser("sweep", help="benchmark engines over prompt x output lengths (resumable), with plots")
    add_run_arguments(sweep, sweep=True)
    sweep.add_argument(
        "--out", default="sweep", help="folder for the records, environment.json and plots (default: %(default)s)"
    )
    sweep.add_argument(
        "--restart", action="store_true", help="discard an unfinished sweep in --out instead of resuming"
    )
    add_no_plots(sweep)
    quality = sub.add_parser("quality", help="perplexity per engine, agreement with the reference, speed beside it")
    add_run_arguments(quality)
    quality.set_defaults(new_tokens=32, repeats=3)  # 3: the fewest whose interval the verdict takes without a caveat
    quality.add_argument("--text", type=Path, help="text file to score (default: the bundled English text)")
    quality.add_argument("--max-length", type=int, help="window length in tokens (default: the model's context)")
    quality.add_argument("--stride", type=int, default=512, help="tokens between window starts (default: %(default)s)")
    quality.add_argument(
        "--bench",
        type=Path,
        help="take tokens/s and token streams from this results folder of the same model (a sweep's: its first cell)",
    )
    quality.add_argument(
        "--out",
        default="quality",
        help="folder for quality.csv, divergence.json and the records (default: %(default)s)",
    )
    add_no_plots(quality)
    profile = sub.add_parser("profile", help="where each engine's time goes: per-step breakdown, floor, traces")
    add_run_arguments(profile)
    profile.set_defaults(repeats=3)
    profile.add_argument(
        "--out",
        default="profile",
        help="folder for breakdown.csv, top_ops.csv, profile.json, the traces, charts and the unprofiled runs' records "
        "(default: %(default)s)",
    )
    add_no_plots(profile)
    report = sub.add_parser("report", help="turn results folders into a self-contained HTML page and PNGs")
    report.add_argument("folders", nargs="+", type=Path, help="bench, sweep or quality results folders")
    report.add_argument(
        "--out",
        type=Path,
        help="folder for report.html and the PNGs (default: report; with --markdown alone, no HTML is written)",
    )
    report.add_argument(
        "--markdown",
        type=Path,
        metavar="FILE",
        help="write one results folder as a Markdown page (environment, command, verdict, summary "
        "table) for docs/measurements/",
    )
    report.add_argument(
        "--baseline",
        type=_folder_list,
        metavar="DIR[,DIR...]",
        help="add a comparison section: the folders' engines against this baseline (as `compare BASELINE FOLDERS`)",
    )
    compare = sub.add_parser("compare", help="did it get faster or slower: NEW against BASE, with intervals")
    compare.add_argument("base", type=_folder_list, help="the baseline results folder (several: comma-separated)")
    compare.add_argument("new", type=_folder_list, help="the results folder to judge (several: comma-separated)")
    compare.add_argument(
        "--allow-different",
        action="store_true",
        help="compare even when the runs' settings differ (model, prompt, new tokens, sampling, threads)",
    )
    compare.add_argument(
        "--fail-if-slower",
        type=float,
        metavar="PCT",
        help="exit 1 when an engine's ms/token or TTFT is higher by more than PCT percent with confidence (a CI gate)",
    )
    compare.add_argument(
        "--min-effect",
        type=_min_effect,
        default=MIN_EFFECT_PCT,
        metavar="PCT",
        help=f"the smallest change that gets a verdict (default {MIN_EFFECT_PCT:g}%%; 0: any): an interval inside "
        "+-PCT reads 'same within PCT%%', one that crosses its edge 'not distinguishable'",
    )
    output = compare.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print the comparison as JSON")
    output.add_argument("--markdown", action="store_true", help="print the comparison as Markdown")
    serve = sub.add_parser("serve", help="serve one engine behind an OpenAI-compatible completions API")
    add_serve_arguments(serve)
    return parser


def add_no_plots(p: argparse.ArgumentParser) -> None:
    """One --no-plots for every command that draws PNG charts: headless and in CI they need Qt's offscreen platform."""
    p.add_argument("--no-plots", action="store_true", help="write records only")


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", required=True, help="the engine to serve (see `main.py backends`)")
    p.add_argument("--model", default="auto", help="auto | hub id | local folder | random:<config>")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (0: any free port; default: %(default)s)")
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="engine processes, one request each at a time: N concurrent streams at N times the memory, "
        "the cores split between them (default: %(default)s)",
    )
    p.add_argument(
        "--queue",
        type=int,
        default=32,
        help="requests that may wait for a worker; beyond them: 503 with Retry-After (default: %(default)s)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="threads per worker (0: the usable physical cores divided among the workers)",
    )
    p.add_argument(
        "--shutdown-timeout",
        type=float,
        default=10.0,
        help="seconds in-flight requests may take to finish after SIGTERM or Ctrl+C before they are cancelled "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--head-timeout",
        type=float,
        default=10.0,
        help="seconds a client may take to send a request's head (request line and headers); "
        "then 408 and the connection is closed (default: %(default)s)",
    )
    p.add_argument(
        "--api-key-env",
        help="environment variable holding an API key that requests must send "
        "(Authorization: Bearer KEY); the key is never logged",
    )
    p.add_argument("--served-model-name", help="the model's name in /v1/models and requests (default: its id)")
    p.add_argument(
        "--timeout",
        type=float,
        help="seconds without a sign of life (a token, a load step) before a worker counts as hung and is "
        "restarted (default: 120 for a token, 900 for a load)",
    )
    add_engine_flags(p)


def _repeats(text: str) -> int | str:
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number or auto, not {text!r}") from None


def _folder_list(text: str) -> list[Path]:
    """'a/,b/' -> [Path('a'), Path('b')]: one side of a comparison may pool several folders."""
    folders = [Path(part) for part in text.split(",") if part.strip()]
    if not folders:
        raise argparse.ArgumentTypeError("no folder given")
    return folders


def _min_effect(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage, got {text!r}") from None
    if not 0 <= value < 100:  # NaN fails too
        raise argparse.ArgumentTypeError(f"must be from 0 to below 100, got {text}")
    return value


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one number")
    return values


def add_run_arguments(p: argparse.ArgumentParser, sweep: bool = False) -> None:
    """The generation options; with `sweep`, lengths are comma-separated lists and mode is fair only."""
    p.add_argument(
        "--model", default="auto", help="auto | hub id (gpt2, distilgpt2, ...) | local folder | random:<config>"
    )
    p.add_argument(
        "--backends",
        help=f"comma-separated engine names (see `main.py backends`; default: "
        f"{registry.reference()}); with --preset, engines added to the preset's",
    )
    p.add_argument(
        "--preset",
        help="a named set of the engines available here: "
        + ", ".join(preset_names())
        + " (the ones it skips are named, with why)",
    )
    prompt = p.add_mutually_exclusive_group()  # one source: a file silently beat an example and a text
    prompt.add_argument("--prompt", help="prompt text (default: the bundled text cut to --prompt-tokens)")
    prompt.add_argument("--prompt-file", type=Path, help="read the prompt text from a file")
    prompt.add_argument(
        "--prompt-example",
        help="one of the bundled example prompts (the window's list), by name: "
        + ", ".join(example_key(name) for name in example_prompts())
        + " (repeating-code repeats itself: what prompt lookup finds)",
    )
    if sweep:
        from ..runs.sweep_grid import DEFAULT_NEW_TOKENS, DEFAULT_PROMPT_TOKENS, GRIDS

        p.add_argument(
            "--prompt-tokens",
            type=_int_list,
            help=f"prompt lengths, e.g. 16,64,256,512 (default: {','.join(map(str, DEFAULT_PROMPT_TOKENS))})",
        )
        p.add_argument(
            "--new-tokens",
            type=_int_list,
            help=f"output lengths, e.g. 16,64,256 (default: {','.join(map(str, DEFAULT_NEW_TOKENS))})",
        )
        p.add_argument(
            "--grid",
            choices=list(GRIDS),
            help="a named grid instead of the lengths: "
            + "; ".join(f"{name}: {grid.help}" for name, grid in GRIDS.items()),
        )
    else:
        p.add_argument(
            "--prompt-tokens",
            type=int,
            default=50,
            help="length of the bundled prompt in tokens (default: %(default)s)",
        )
        p.add_argument(
            "--new-tokens", type=int, default=100, help="tokens to generate, no early stop (default: %(default)s)"
        )
    p.add_argument("--decoding", choices=["greedy", "sample"], default="greedy", help="default: %(default)s")
    p.add_argument(
        "--temperature", type=float, default=1.0, help="below 1e-5: greedy, as vLLM takes it (default: %(default)s)"
    )
    p.add_argument("--top-k", type=int, default=0, help="0: no limit (default: %(default)s)")
    p.add_argument("--top-p", type=float, default=1.0, help="default: %(default)s")
    p.add_argument("--seed", type=int, default=0, help="default: %(default)s")
    p.add_argument(
        "--repeats",
        type=_repeats,
        default=3,
        help="measured runs per engine, or auto: rounds until every engine's median interval is narrower than "
        "--target-width (default: %(default)s)",
    )
    p.add_argument(
        "--target-width",
        type=float,
        default=5.0,
        metavar="PCT",
        help="--repeats auto: the median interval's width to reach, %% of the median (default: %(default)s)",
    )
    p.add_argument("--max-repeats", type=int, default=40, help="--repeats auto: the most rounds (default: %(default)s)")
    p.add_argument(
        "--max-minutes",
        type=float,
        default=10.0,
        help="--repeats auto: stop the measured rounds after this long (default: %(default)s)",
    )
    p.add_argument(
        "--warmup", type=int, default=1, help="warm-up runs per engine, recorded, not summarised (default: %(default)s)"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="threads per engine (0: the usable physical cores, capped by the cgroup CPU quota)",
    )
    if not sweep:
        p.add_argument("--mode", choices=["fair", "race"], default="fair", help="default: %(default)s")
    p.add_argument(
        "--concurrency",
        type=_int_list,
        default=[],
        help=f"load levels for server engines ({', '.join(registry.serving_concurrently())}), e.g. "
        "1,2,4,8: that many requests at once, "
        "each with its own random prefix; every engine's bench runs are level 1",
    )
    if not sweep:
        p.add_argument(
            "--request-rate",
            help="open-loop levels for server engines: R[,R2,...] requests/s (inf: all at once) or sweep (multiples "
            "of the engine's batch-1 rate up to the first it cannot keep up with); arrivals are Poisson from --seed",
        )
        p.add_argument(
            "--burstiness",
            type=float,
            default=1.0,
            help="--request-rate's arrivals: gamma gaps of this shape, mean 1/rate, as vLLM's bench serve "
            "(1: Poisson; below 1 burstier, above 1 more even; default: %(default)s)",
        )
        p.add_argument(
            "--rate-requests",
            type=int,
            default=20,
            help="requests sent at each --request-rate (default: %(default)s)",
        )
    p.add_argument("--slo-ttft-ms", type=float, help="goodput SLO: a request's time to first token at most this")
    p.add_argument(
        "--slo-itl-ms",
        type=float,
        help="goodput SLO: a request's mean inter-token latency (TPOT, as vLLM's goodput) at most this",
    )
    p.add_argument(
        "--reference",
        help=f"engine whose tokens the others are compared with (default: {registry.reference()} where it runs, "
        "else the first fp32 engine)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        help="seconds without a sign of life (a token, a load step, a perplexity window) before a worker counts "
        "as hung and is killed (default: 120 for a token, 900 for a load or a window)",
    )
    p.add_argument(
        "--cold",
        action="store_true",
        help="evict the weights and this engine's cached artefact files from the page cache before "
        "each engine starts (Linux)",
    )
    add_engine_flags(p)  # each engine's own settings (a server's URL, say)
