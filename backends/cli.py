"""The command line: `gui` (default), `backends`, `bench`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import __version__
from .errors import UsageError

EXIT_OK, EXIT_RUN_FAILED, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like our own usage errors
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="main.py", description="whistle-stop: which way of running GPT-2 is fastest here, "
                     "and what the speed costs in quality.")
    parser.add_argument("--version", action="version", version=f"whistle-stop {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    sub.add_parser("gui", help="open the desktop app (the default)")
    sub.add_parser("backends", help="list every engine, available or not, and why not")
    bench = sub.add_parser("bench", help="benchmark engines headless and write CSV/JSON records")
    add_run_arguments(bench)
    bench.add_argument("--out", default="results", help="folder for tokens.csv, runs.csv, environment.json")
    return parser


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="auto", help="auto | hub id (gpt2, distilgpt2, ...) | local folder | random:<config>")
    p.add_argument("--backends", default="hf", help="comma-separated engine names (see `main.py backends`)")
    p.add_argument("--prompt", help="prompt text (default: the bundled text cut to --prompt-tokens)")
    p.add_argument("--prompt-file", type=Path, help="read the prompt text from a file")
    p.add_argument("--prompt-tokens", type=int, default=50, help="length of the bundled prompt in tokens")
    p.add_argument("--new-tokens", type=int, default=100, help="tokens to generate (no early stop)")
    p.add_argument("--decoding", choices=["greedy", "sample"], default="greedy")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0, help="0: no limit")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=3, help="measured runs per engine")
    p.add_argument("--warmup", type=int, default=1, help="warm-up runs per engine (recorded, not summarised)")
    p.add_argument("--threads", type=int, default=0, help="threads per engine (0: all cores)")
    p.add_argument("--mode", choices=["fair", "race"], default="fair")
    p.add_argument("--reference", help="engine whose tokens the others are compared with (default: hf)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds without a token before a worker counts as hung")
    remote = p.add_argument_group("the `remote` engine (any OpenAI-compatible server)")
    remote.add_argument("--remote-url", help="base URL, e.g. http://127.0.0.1:8000/v1")
    remote.add_argument("--remote-model", help="model name the server knows")
    remote.add_argument("--remote-api-key-env", default="OPENAI_API_KEY",
                        help="environment variable holding the API key (the key is never recorded)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser().parse_args(argv)
        command = args.command or "gui"
        if command == "gui":
            from gui.app import run_app

            return run_app()
        if command == "backends":
            from .cli_commands import list_backends

            return list_backends()
        from .cli_commands import bench

        return bench(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
