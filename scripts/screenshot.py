"""Save a screenshot of the window after a real run (for the README):

    python -m scripts.screenshot [docs/screenshot.png] [--engines hf,hf-int8] [--model random:tiny]

Runs offscreen when there is no display. Settings go to a temporary folder, not the user's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from .scripting import offscreen_without_display


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default="docs/screenshot.png")
    parser.add_argument("--engines", default="hf,hf-int8")
    parser.add_argument("--model", default="random:tiny")
    parser.add_argument("--new-tokens", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size", default="1600x1000")
    parser.add_argument("--tab", default="Latency per token", help="the chart tab to show")
    args = parser.parse_args(argv)
    offscreen_without_display()

    from whistle_stop.backends.sources.prompts import example_prompts
    from whistle_stop.gui.app import create_app

    from .scripting import close_window, open_window, run_end_loop, settle_and_grab

    app = create_app()
    with tempfile.TemporaryDirectory() as settings_dir:
        window = open_window(Path(settings_dir), args.size)
        setup = window.setup
        setup.set_model_spec(args.model)
        setup.set_engines(args.engines.split(","))
        setup.prompt.setPlainText(next(iter(example_prompts().values())))
        setup.new_tokens.setValue(args.new_tokens)
        setup.repeats.setValue(args.repeats)
        setup.warmup.setValue(1)
        loop, outcome = run_end_loop(window.bench.job)
        if not window.start_run():
            print(f"cannot run: {setup.problem()}", file=sys.stderr)
            return 1
        loop.exec()
        if "error" in outcome:
            print(f"run failed: {outcome['error']}", file=sys.stderr)
            return 1
        for index in range(window.tabs.count()):
            if window.tabs.tabText(index) == args.tab:
                window.tabs.setCurrentIndex(index)
        settle_and_grab(window, Path(args.out), 300)
        close_window(window, app)
    return 0


if __name__ == "__main__":
    sys.exit(main())
