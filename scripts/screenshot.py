"""Save a screenshot of the window after a real run, or of its first screen (for the README):

    python -m scripts.screenshot [docs/summary.png] [--engines hf,hf-int8] [--model random:tiny] [--tab Summary]
    python -m scripts.screenshot docs/screenshot.png --preset best-of-family --first-screen

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
    parser.add_argument("--preset", help="pick this preset instead of --engines")
    parser.add_argument("--first-screen", action="store_true", help="grab before any run (the estimate shown)")
    parser.add_argument("--dock-height", type=int, default=0, help="the charts dock's height (0: the window's own)")
    parser.add_argument("--dock-only", action="store_true", help="grab the charts dock, not the whole window")
    args = parser.parse_args(argv)
    offscreen_without_display()

    from whistle_stop.backends.sources.prompts import example_prompts
    from whistle_stop.gui.app import create_app

    from .scripting import close_window, open_window, run_end_loop, settle_and_grab

    app = create_app()
    with tempfile.TemporaryDirectory() as settings_dir:
        window = open_window(Path(settings_dir), args.size)
        if args.dock_height:
            from PySide6.QtCore import Qt

            window.resizeDocks([window.charts_dock], [args.dock_height], Qt.Orientation.Vertical)
        setup = window.setup
        setup.set_model_spec(args.model)
        if args.preset:
            setup.apply_preset(args.preset)
        else:
            setup.set_engines(args.engines.split(","))
        setup.prompt.setPlainText(next(iter(example_prompts().values())))
        setup.new_tokens.setValue(args.new_tokens)
        setup.repeats.setValue(args.repeats)
        setup.warmup.setValue(1)
        if args.first_screen:
            settle_and_grab(window, Path(args.out), 1500)  # the model probe finds the files: the estimate settles
            close_window(window, app)
            return 0
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
        settle_and_grab(window.charts_dock if args.dock_only else window, Path(args.out), 300)
        close_window(window, app)
    return 0


if __name__ == "__main__":
    sys.exit(main())
