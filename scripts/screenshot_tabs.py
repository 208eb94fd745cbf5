"""Save screenshots of the Sweep, Quality, Profile and Load tabs after a tiny real run (for the README):

    python -m scripts.screenshot_tabs [docs/sweep.png] [docs/quality.png] [--profile-out docs/profile.png]
                                      [--load-out docs/load.png] [--engines hf,hf-int8]
                                      [--only sweep|quality|profile|load]

The Load tab runs --load-engines (default numpy and vllm-bf16: a real vLLM server, minutes to start).

Runs offscreen when there is no display. Settings and the sweep folder go to a temporary
folder. The sweep draws its bandwidth limit lines only if the probe's result is cached: this never runs it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from .scripting import offscreen_without_display


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_out", nargs="?", default="docs/sweep.png")
    parser.add_argument("quality_out", nargs="?", default="docs/quality.png")
    parser.add_argument("--engines", default="hf,hf-int8")
    parser.add_argument("--model", default="random:tiny")
    parser.add_argument("--prompts", default="16, 64, 256, 1000")
    parser.add_argument("--news", default="8, 32, 64")
    parser.add_argument("--size", default="1600x1000")
    parser.add_argument("--dock-height", type=int, default=560)
    parser.add_argument("--profile-out", default="docs/profile.png")
    parser.add_argument("--load-out", default="docs/load.png")
    parser.add_argument("--load-engines", default="numpy,vllm-bf16")
    parser.add_argument("--load-model", default="random:gpt2")
    parser.add_argument("--load-levels", default="1, 2, 4, 8")
    parser.add_argument("--only", choices=("sweep", "quality", "profile", "load"), help="take one of the screenshots")
    args = parser.parse_args(argv)
    offscreen_without_display()

    from PySide6.QtCore import Qt

    from whistle_stop.backends.machine.bandwidth import cached_bandwidth
    from whistle_stop.backends.machine.threads import default_threads
    from whistle_stop.gui.app import create_app

    from .scripting import close_window, open_window, run_end_loop, settle_and_grab

    app = create_app()
    with tempfile.TemporaryDirectory() as scratch:
        window = open_window(Path(scratch), args.size)
        window.resizeDocks([window.charts_dock], [args.dock_height], Qt.Orientation.Vertical)
        setup = window.setup
        setup.set_model_spec(args.model)
        setup.set_engines(args.engines.split(","))
        setup.new_tokens.setValue(32)
        setup.repeats.setValue(3)
        setup.warmup.setValue(1)
        setup.flush()

        def run_and_grab(tab, out: str) -> bool:
            """Start the tab's job, wait for it, then grab the charts dock; False (and why) if it failed."""
            window.tabs.setCurrentWidget(tab)
            loop, outcome = run_end_loop(tab.job.controller)
            if not tab.start():
                print(f"cannot start: {tab.reason.text()}", file=sys.stderr)
                return False
            loop.exec()
            if "error" in outcome:
                print(outcome["error"], file=sys.stderr)
                return False
            settle_and_grab(window.charts_dock, Path(out), 400)
            return True

        if args.only in (None, "sweep"):
            sweep = window.sweep_tab
            sweep.prompt_lengths.setText(args.prompts)
            sweep.new_lengths.setText(args.news)
            sweep.folder.setText(str(Path(scratch) / "sweep"))
            sweep.measure.setChecked(cached_bandwidth(default_threads()) is not None)  # never a probe here
            if not run_and_grab(sweep, args.sweep_out):
                return 1
        if args.only in (None, "quality"):
            quality = window.quality_tab
            quality.max_length.setValue(256)
            quality.stride.setValue(256)
            if not run_and_grab(quality, args.quality_out):
                return 1
        if args.only in (None, "profile"):
            profile = window.profile_tab
            profile.out.setText(str(Path(scratch) / "profile"))
            if not run_and_grab(profile, args.profile_out):
                return 1
        if args.only in (None, "load"):
            setup.set_model_spec(args.load_model)
            setup.set_engines(args.load_engines.split(","))
            setup.flush()
            window.load_tab.concurrency.setText(args.load_levels)
            if not run_and_grab(window.load_tab, args.load_out):
                return 1
        close_window(window, app)
    return 0


if __name__ == "__main__":
    sys.exit(main())
